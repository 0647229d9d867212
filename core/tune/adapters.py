"""Trained adapters, kept in the user data folder: ``data_dir()/adapters/<slug>/``.

An adapter folder is mlx-lm's own layout, so ``mlx_lm.utils.load(model,
adapter_path=folder)`` and ``mlx_lm.fuse`` read it as it is:

- ``adapters.safetensors``: the LoRA weights (``NNNNNNN_adapters.safetensors``: checkpoints);
- ``adapter_config.json``: what ``mlx_lm.tuner.utils.load_adapters`` reads
  (``fine_tune_type``, ``num_layers``, ``lora_parameters`` {rank, scale, dropout});

plus MacMesh's ``macmesh.json``: its name, base model (the base model folder's name), the
data's hash and size, iterations, final losses, whether it was stopped early, the settings
and when it was made. An adapter made by ``mlx_lm.lora`` outside MacMesh has no
``macmesh.json``: it is still an adapter, named after its folder, its base read from the
``model`` that mlx-lm's ``adapter_config.json`` records (unknown without it).
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.jsonfile import FileProblem, read_json, write_json_atomic
from core.paths import data_dir
from core.tune.settings import SettingsError, TuneSettings

ADAPTER_JSON_CAP = 4 << 20  # an adapter's config or metadata: a few KB

WEIGHTS_FILE = "adapters.safetensors"
CONFIG_FILE = "adapter_config.json"
METADATA_FILE = "macmesh.json"
#: mlx-lm's checkpoints: ``0000050_adapters.safetensors`` at iteration 50.
CHECKPOINT = re.compile(r"^(\d{7})_adapters\.safetensors$")
FINE_TUNE_TYPES = ("lora", "dora", "full")

#: The keys of ``macmesh.json`` and the JSON types each may hold (None: may be null).
METADATA_KEYS: dict[str, tuple[type | None, ...]] = {
    "name": (str,),
    "base_model": (str, None),
    "data_sha256": (str, None),
    "data_examples": (int, None),
    "iterations": (int, None),
    "train_loss": (float, int, None),
    "val_loss": (float, int, None),
    "stopped": (bool,),
    "settings": (dict, None),
    "created": (str,),
}


class AdapterError(ValueError):
    """A folder that is not a usable adapter; the message says which file and why."""


@dataclass(frozen=True)
class Adapter:
    path: Path
    name: str
    base_model: str | None
    data_sha256: str | None
    iterations: int | None
    train_loss: float | None
    val_loss: float | None
    stopped: bool
    settings: TuneSettings | None
    created: str
    data_examples: int | None = None
    #: False for an adapter made outside MacMesh (no ``macmesh.json``)
    made_here: bool = True


def adapters_dir() -> Path:
    """The folder holding every adapter MacMesh trained (made when missing)."""
    folder = data_dir() / "adapters"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def slug(name: str) -> str:
    """``name`` as a folder name: lowercase ASCII letters, digits and dashes."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    text = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")
    return text[:60].rstrip("-") or "adapter"


def new_adapter_folder(name: str, parent: Path | None = None) -> Path:
    """A new, empty folder for an adapter called ``name`` in ``adapters_dir()`` (or
    ``parent``): its slug, with ``-2``, ``-3``... when taken. Made here, so two runs
    started at once never share one."""
    root = adapters_dir() if parent is None else parent
    root.mkdir(parents=True, exist_ok=True)
    base = slug(name)
    for number in range(1, 10_000):
        folder = root / (base if number == 1 else f"{base}-{number}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise AdapterError(f"{root} already holds 10,000 adapters named {base}: pick another name")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def write_metadata(folder: Path, **values: Any) -> Path:
    """Write (or update) ``folder/macmesh.json`` with ``values``, atomically: a reader
    sees the old file or the new, never half. Keys it had keep their value unless given;
    ``name`` defaults to the folder's name, ``created`` to now, ``stopped`` to False.
    ``settings`` may be a ``TuneSettings``. Returns the file's path."""
    unknown = sorted(set(values) - set(METADATA_KEYS))
    if unknown:
        raise TypeError(f"unknown adapter metadata: {', '.join(unknown)}")
    if isinstance(values.get("settings"), TuneSettings):
        values["settings"] = values["settings"].to_dict()
    path = folder / METADATA_FILE
    current: dict[str, Any] = {}
    if path.is_file():
        try:
            loaded = read_json(path, ADAPTER_JSON_CAP)
        except FileProblem:
            loaded = None
        current = loaded if isinstance(loaded, dict) else {}
    merged = {
        "name": folder.name,
        "base_model": None,
        "data_sha256": None,
        "data_examples": None,
        "iterations": None,
        "train_loss": None,
        "val_loss": None,
        "stopped": False,
        "settings": None,
        "created": now_iso(),
        **current,
        **values,
    }
    problem = _metadata_problem(merged)
    if problem:
        raise TypeError(f"adapter metadata: {problem}")
    write_json_atomic(path, merged)
    return path


def read_adapter(folder: Path | str) -> Adapter:
    """The adapter in ``folder``; ``AdapterError`` (one line) when it is not one."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise AdapterError(
            f"{folder} is not a folder" if folder.exists() else f"{folder} does not exist"
        )
    weights = folder / WEIGHTS_FILE
    missing = [n for n in (WEIGHTS_FILE, CONFIG_FILE) if not (folder / n).is_file()]
    if missing:
        raise AdapterError(
            f"{folder.name} is not an adapter: it has no {' and no '.join(missing)} "
            "(an adapter folder holds the two files mlx-lm's LoRA training writes)"
        )
    config = _read_object(folder / CONFIG_FILE, folder.name)
    problem = _config_problem(config)
    if problem:
        raise AdapterError(f"{folder.name}/{CONFIG_FILE}: {problem}")
    meta_path = folder / METADATA_FILE
    if not meta_path.exists():
        return _made_elsewhere(folder, config, weights)
    meta = _read_object(meta_path, folder.name)
    problem = _metadata_problem(meta, partial=True)
    if problem:
        raise AdapterError(f"{folder.name}/{METADATA_FILE} is broken: {problem}")
    settings = None
    if meta.get("settings") is not None:
        try:
            settings = TuneSettings.from_dict(meta["settings"])
        except (SettingsError, TypeError) as error:
            raise AdapterError(
                f"{folder.name}/{METADATA_FILE} is broken: its settings: {error}"
            ) from None
    return Adapter(
        path=folder,
        name=meta.get("name") or folder.name,
        base_model=meta.get("base_model"),
        data_sha256=meta.get("data_sha256"),
        iterations=meta.get("iterations"),
        train_loss=_float(meta.get("train_loss")),
        val_loss=_float(meta.get("val_loss")),
        stopped=bool(meta.get("stopped", False)),
        settings=settings,
        created=meta.get("created") or _mtime(weights),
        data_examples=meta.get("data_examples"),
    )


def list_adapters(root: Path | None = None) -> list[Adapter]:
    """Every adapter in ``adapters_dir()`` (or ``root``), newest first; folders that are not
    adapters (an unfinished run, a stray folder) are left out."""
    root = adapters_dir() if root is None else root
    found = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        try:
            found.append(read_adapter(folder))
        except AdapterError:
            continue
    return sorted(found, key=lambda a: a.created, reverse=True)


def find_adapter(text: str, root: Path | None = None) -> Path:
    """The adapter folder ``text`` names: a folder's path, or the name (or folder name)
    of an adapter MacMesh trained. ``AdapterError`` (one line) when neither."""
    path = Path(text).expanduser()
    if path.is_dir() or os.sep in text or text.startswith("."):
        return path
    wanted = {text, slug(text)}
    for adapter in list_adapters(root):
        if adapter.path.name in wanted or adapter.name == text:
            return adapter.path
    known = [a.path.name for a in list_adapters(root)[:5]]
    hint = f" (yours: {', '.join(known)})" if known else " (none trained yet: `macmesh finetune`)"
    raise AdapterError(f"no adapter folder or trained adapter called {text!r}{hint}")


def checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(iteration, file) of each checkpoint mlx-lm saved in ``folder``, in order."""
    found = [
        (int(m.group(1)), p)
        for p in folder.glob("*_adapters.safetensors")
        if (m := CHECKPOINT.match(p.name))
    ]
    return sorted(found)


# --- helpers ----------------------------------------------------------------------------


def _read_object(path: Path, where: str) -> dict[str, Any]:
    try:
        value = read_json(path, ADAPTER_JSON_CAP)
    except FileProblem as problem:
        if not path.exists() or "not JSON" not in problem.what:
            raise AdapterError(f"cannot read {where}/{path.name}: {problem.what}") from None
        detail = problem.what.removeprefix("not JSON (").removesuffix(")")
        raise AdapterError(f"{where}/{path.name} is broken: not valid JSON ({detail})") from None
    if not isinstance(value, dict):
        raise AdapterError(f"{where}/{path.name} is broken: not a JSON object")
    return value


def _config_problem(config: dict[str, Any]) -> str | None:
    kind = config.get("fine_tune_type", "lora")
    if kind not in FINE_TUNE_TYPES:
        return f"fine_tune_type {kind!r} is not one of {', '.join(FINE_TUNE_TYPES)}"
    layers = config.get("num_layers")
    if kind != "full" and (isinstance(layers, bool) or not isinstance(layers, int)):
        return "no whole number num_layers (the layers the adapter applies to)"
    lora = config.get("lora_parameters")
    if kind != "full" and not (isinstance(lora, dict) and isinstance(lora.get("rank"), int)):
        return "no lora_parameters with a rank"
    return None


def _metadata_problem(meta: dict[str, Any], partial: bool = False) -> str | None:
    for key, allowed in METADATA_KEYS.items():
        if key not in meta:
            if partial:
                continue
            return f"no {key!r}"
        value = meta[key]
        if value is None and None in allowed:
            continue
        types = tuple(t for t in allowed if t is not None)
        if isinstance(value, bool) and bool not in types:
            return f"{key!r} must be {_type_names(types)}, not {value!r}"
        if not isinstance(value, types):
            return f"{key!r} must be {_type_names(types)}, not {type(value).__name__}"
    return None


def _type_names(types: tuple[type, ...]) -> str:
    names = {
        str: "text",
        int: "a whole number",
        float: "a number",
        bool: "true or false",
        dict: "an object",
    }
    return " or ".join(dict.fromkeys(names[t] for t in types))


def _made_elsewhere(folder: Path, config: dict[str, Any], weights: Path) -> Adapter:
    """An adapter ``mlx_lm.lora`` made outside MacMesh: what its config tells."""
    model = config.get("model")
    iters = config.get("iters")
    return Adapter(
        path=folder,
        name=folder.name,
        base_model=Path(model).name if isinstance(model, str) and model else None,
        data_sha256=None,
        iterations=iters if isinstance(iters, int) and not isinstance(iters, bool) else None,
        train_loss=None,
        val_loss=None,
        stopped=False,
        settings=_settings_of(config),
        created=_mtime(weights),
        made_here=False,
    )


def _settings_of(config: dict[str, Any]) -> TuneSettings | None:
    """The ``TuneSettings`` an mlx-lm ``adapter_config.json`` records, None if it cannot
    say (mlx-lm saves its whole command line: ``iters``, ``batch_size``, ...)."""
    if "iters" not in config:  # not mlx_lm.lora's command line: the defaults would lie
        return None
    names = {f.name for f in fields(TuneSettings)}
    renamed = {"num_layers": "lora_layers", "save_every": "steps_per_save"}
    values = {renamed.get(k, k): v for k, v in config.items() if renamed.get(k, k) in names}
    lora = config.get("lora_parameters")
    if isinstance(lora, dict) and "rank" in lora:
        values["lora_rank"] = lora["rank"]
    try:
        settings = TuneSettings.from_dict(values)
        settings.check()
    except (SettingsError, TypeError):
        return None
    return settings


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _mtime(path: Path) -> str:
    try:
        stamp = path.stat().st_mtime
    except OSError:
        return ""
    return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds")
