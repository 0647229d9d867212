"""MacMesh's own settings: one small JSON file the core owns (docs/design.md, rule 6).

Qt's QSettings keeps window geometry only; what a person chose (the last model, the
strategy, ...) lives here so the CLI and the app share it and a person can read it.

The file is ``settings.json`` in ``core.paths.config_dir()``::

    {
      "version": 1,
      "last_model": "/Users/me/models/Qwen3-30B-A3B-4bit",   # a folder, or null
      "last_strategy": "pipeline",                            # "auto", "pipeline" or "tensor"
      "demo_nodes": 2,                                        # simulated Macs, 1-4
      "demo_on": false,                                       # the window shows the demo
      "demo_rdma": true,                                      # false: the demo without RDMA
      "max_tokens": 256,                                      # longest answer, 1-32768
      "interfaces": [],                                       # network interfaces (later)
      "library_folders": ["/Volumes/models/Llama-3-8B-4bit"], # model folders added to the library
      "model_source": "auto",                                 # auto, hub or this-mac
      "batch": 8,                                             # requests served at once, 1-256
      "prompt_cache_mb": 256,                                 # per rank, MB (0: none)
      "kv_bits": 16,                                          # KV cache: 16 (as is), 8 or 4
      "kv_group_size": 64                                     # its quantization groups
    }

``batch`` and ``prompt_cache_mb`` are the serving settings, one source end to end: the
plan counts them (``core.run.planning.chat_options``), the ranks run them (the job's
``--batch`` and ``--prompt-cache-mb``) and the API runs ``batch`` requests at once.

Reading never fails: a missing file gives the defaults, a corrupt file (not JSON, not a
regular file, over 1 MB, nested more than 64 deep, a number of more than 40 digits) gives
the defaults and a one-line warning naming the file, a bad value gives that value's
default and a warning. Keys this
version does not know are kept on save, so an older MacMesh does not erase a newer one's
settings. Writes are atomic: a temporary file in the same folder, fsync, then rename.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from core import paths
from core.jsonfile import FileProblem, read_json, write_json_atomic
from core.worker import kvbits
from core.worker import protocol as p
from core.worker.vocab import ModelSource, Strategy

log = logging.getLogger(__name__)

FILE_NAME = "settings.json"
VERSION = 1
STRATEGIES = (Strategy.AUTO, Strategy.PIPELINE, Strategy.TENSOR)  # the window offers these
SETTINGS_CAP = 1 << 20  # bytes: a settings file is a few hundred
MAX_DEMO_NODES = 4
MAX_TOKENS_LIMIT = 32768
MAX_PROMPT_CACHE_MB = 1 << 20  # a terabyte: a bound, not a size anyone asks for
# Where nodes get their part of a model from Hugging Face: the Hub when they reach it,
# else a copy from this Mac (auto); always the Hub; always this Mac. Plain values: the
# command line offers them as choices, and argparse's messages then read "hub".
MODEL_SOURCES = tuple(source.value for source in ModelSource)


@dataclass(frozen=True)
class Settings:
    """What MacMesh remembers between runs. ``extra`` holds keys of newer versions."""

    last_model: str | None = None
    last_strategy: Strategy = Strategy.PIPELINE
    demo_nodes: int = 2
    demo_on: bool = False  # the demo cluster was shown: the next launch shows it again
    demo_rdma: bool = True  # False: the demo without RDMA (every simulated Mac's off)
    max_tokens: int = 256
    interfaces: tuple[str, ...] = ()
    library_folders: tuple[str, ...] = ()
    model_source: ModelSource = ModelSource.AUTO
    batch: int = p.DEFAULT_BATCH  # requests the ranks (and the API) run at once
    prompt_cache_mb: int = p.DEFAULT_PROMPT_CACHE_MB  # each rank's prompt cache bound
    kv_bits: int = kvbits.NONE  # the KV cache quantized (8, 4) or not (16)
    kv_group_size: int = kvbits.DEFAULT_GROUP_SIZE
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def updated(self, **changes: Any) -> Settings:
        """A copy with ``changes``, each checked like a value read from the file."""
        values = {name: _check(name, value, getattr(self, name)) for name, value in changes.items()}
        return replace(self, **values)

    def to_json(self) -> dict[str, Any]:
        data = dict(self.extra)
        data.update(
            version=VERSION,
            last_model=self.last_model,
            last_strategy=self.last_strategy,
            demo_nodes=self.demo_nodes,
            demo_on=self.demo_on,
            demo_rdma=self.demo_rdma,
            max_tokens=self.max_tokens,
            interfaces=list(self.interfaces),
            library_folders=list(self.library_folders),
            model_source=self.model_source,
            batch=self.batch,
            prompt_cache_mb=self.prompt_cache_mb,
            kv_bits=self.kv_bits,
            kv_group_size=self.kv_group_size,
        )
        return data


def settings_path() -> Path:
    return paths.config_dir() / FILE_NAME


def load_settings(path: Path | None = None) -> Settings:
    """The saved settings, or the defaults for anything missing or unreadable."""
    path = path or settings_path()
    if not path.exists() and not path.is_symlink():
        return Settings()
    try:  # a regular file, small, shallow, short numbers (a FIFO never hangs it)
        data = read_json(path, SETTINGS_CAP)
    except FileProblem as problem:
        log.warning("%s; using the default settings", problem)
        return Settings()
    if not isinstance(data, dict):
        log.warning("%s does not hold a JSON object; using the default settings", path)
        return Settings()
    return _from_json(data, path)


def save_settings(settings: Settings, path: Path | None = None) -> None:
    """Write ``settings`` atomically: a reader sees the old file or the new one, never half."""
    path = path or settings_path()
    write_json_atomic(path, settings.to_json())


def _from_json(data: dict[str, Any], path: Path) -> Settings:
    known = {f.name for f in fields(Settings)} - {"extra"}
    defaults = Settings()
    values: dict[str, Any] = {}
    for name in known:
        if name in data:
            try:
                values[name] = _check(name, data[name], getattr(defaults, name))
            except ValueError as error:
                log.warning("%s: %s; using the default %r", path, error, getattr(defaults, name))
    extra = {k: v for k, v in data.items() if k not in known and k != "version"}
    return Settings(**values, extra=extra)


def _check(name: str, value: Any, default: Any) -> Any:
    """``value`` as the type ``name`` needs; ValueError saying what is wrong otherwise."""
    if name == "last_model":
        if value is None or (isinstance(value, str) and value):
            return value
        raise ValueError(f"last_model must be a folder path or null, not {value!r}")
    if name == "last_strategy":
        if value in STRATEGIES:
            return Strategy(value)
        raise ValueError(f"last_strategy must be one of {', '.join(STRATEGIES)}, not {value!r}")
    if name == "demo_nodes":
        return _int_in(name, value, 1, MAX_DEMO_NODES)
    if name in ("demo_on", "demo_rdma"):
        if isinstance(value, bool):
            return value
        raise ValueError(f"{name} must be true or false, not {value!r}")
    if name == "max_tokens":
        return _int_in(name, value, 1, MAX_TOKENS_LIMIT)
    if name == "interfaces":
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ValueError(f"interfaces must be a list of interface names, not {value!r}")
    if name == "library_folders":
        if isinstance(value, list | tuple) and all(isinstance(v, str) and v for v in value):
            return tuple(dict.fromkeys(value))
        raise ValueError(f"library_folders must be a list of folder paths, not {value!r}")
    if name == "model_source":
        if value in MODEL_SOURCES:
            return ModelSource(value)
        raise ValueError(f"model_source must be one of {', '.join(MODEL_SOURCES)}, not {value!r}")
    if name == "batch":
        return _int_in(name, value, 1, p.MAX_BATCH)
    if name == "prompt_cache_mb":
        return _int_in(name, value, 0, MAX_PROMPT_CACHE_MB)
    if name == "kv_bits":
        return _one_of(name, value, kvbits.KV_BITS)
    if name == "kv_group_size":
        return _one_of(name, value, kvbits.GROUP_SIZES)
    raise ValueError(f"unknown setting {name!r} (default {default!r})")


def _one_of(name: str, value: Any, allowed: tuple[int, ...]) -> int:
    if isinstance(value, bool) or value not in allowed:
        said = ", ".join(str(a) for a in allowed)
        raise ValueError(f"{name} must be one of {said}, not {value!r}")
    return int(value)


def _int_in(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, not {value!r}")
    return value
