"""The edge where a model folder's files become trusted numbers.

Everything in ``config.json``, the safetensors index and the headers was written by
someone else, so nothing in them is believed before it is checked: types, counts below
generous limits (memory must never grow with a number read from a file), JSON size and
depth, file names inside the folder. Whatever is wrong becomes one ``ModelError`` whose
message is one line naming the file and the field, so every command can print it and
exit 2 and the window can show it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

# A config.json is a few kB and the largest index a few MB: 64 MB is generous.
MAX_JSON_BYTES = 64 * 1024 * 1024
# Real configs nest 3 or 4 levels; safetensors headers 3.
MAX_JSON_DEPTH = 64
_SHOWN_CHARS = 40

# Counts read from config.json: the key, its smallest and largest accepted value. The
# limits are far above any model that exists (a 1T-parameter model has 61 layers, hidden
# 7168, vocabulary 160k), and low enough that nothing sized by them can exhaust memory.
MAX_LAYERS = 10_000
MAX_HIDDEN = 1_000_000
MAX_HEADS = 100_000
MAX_INTERMEDIATE = 10_000_000
MAX_VOCAB = 10_000_000
MAX_CONTEXT = 1_000_000_000
MAX_BITS = 16
MAX_GROUP_SIZE = 1_000_000

# An mlx-lm module name (mlx_lm.models.<model_type>).
_MODEL_TYPE = re.compile(r"[A-Za-z0-9_\-]{1,100}")


class ModelError(Exception):
    """A model folder MacMesh cannot use; the message names the problem and the fix.

    Always one line: a file can put newlines in a name or value, a terminal should not.
    """

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def show(value: object) -> str:
    """A value read from a file, short enough for a one-line message (never its repr in
    full: a hostile value can be megabytes long or nested thousands deep)."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return str(value) if abs(value) < 10**_SHOWN_CHARS else "a huge number"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, str):
        text = value if len(value) <= _SHOWN_CHARS else value[:_SHOWN_CHARS] + "…"
        return json.dumps(text)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def json_depth(value: object) -> int:
    """How deep ``value`` nests, counted without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item)
    return deepest


def parse_json(raw: bytes, where: str) -> Any:
    """``raw`` as JSON, or ``ValueError`` saying why (invalid, or nested too deep).

    ``where`` starts the message: the file's name or path.
    """
    try:
        value = json.loads(raw)
    except RecursionError:
        raise ValueError(f"{where} is nested too deep (over {MAX_JSON_DEPTH} levels)") from None
    except (UnicodeDecodeError, ValueError) as error:  # JSONDecodeError, or a 5000-digit int
        reason = str(error).splitlines()[0][:100]
        raise ValueError(f"{where} is not valid JSON ({reason})") from None
    if json_depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"{where} is nested too deep (over {MAX_JSON_DEPTH} levels)")
    return value


def read_json(path: Path, what: str) -> Any:
    """A small JSON file of the model folder, size and depth bounded.

    ``what`` says what to do about a bad file ("Download the model again.").
    """
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_JSON_BYTES + 1)
    except OSError as error:
        raise ModelError(
            f"{path}: cannot read it ({_reason(error)}). {_access_fix(error)}"
        ) from None
    if len(raw) > MAX_JSON_BYTES:
        raise ModelError(f"{path} is over {MAX_JSON_BYTES // 2**20} MB: not a model file. {what}")
    try:
        return parse_json(raw, str(path))
    except ValueError as error:
        raise ModelError(f"{error}. {what}") from None


def is_file(path: Path) -> bool:
    """``path.is_file()``, with a folder or file that cannot be read made a ModelError
    instead of an OSError (a folder without permission raises on stat)."""
    try:
        return path.is_file()
    except OSError as error:
        raise ModelError(
            f"{path}: cannot read it ({_reason(error)}). {_access_fix(error)}"
        ) from None


def is_dir(path: Path) -> bool:
    """``path.is_dir()``; see ``is_file``."""
    try:
        return path.is_dir()
    except OSError as error:
        raise ModelError(
            f"{path}: cannot read it ({_reason(error)}). {_access_fix(error)}"
        ) from None


def _reason(error: OSError) -> str:
    return error.strerror or type(error).__name__


def _access_fix(error: OSError) -> str:
    if isinstance(error, PermissionError):
        return "Give your user permission to read the model folder and its files."
    return "Choose a folder MacMesh can read."


# -- config.json -------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigView:
    """config.json's fields as the language model sees them: a multimodal config's
    ``text_config`` first, the top level for what it lacks. Messages name where a bad
    value came from (``text_config.hidden_size``)."""

    path: Path
    top: dict[str, Any]
    text: dict[str, Any]

    @classmethod
    def of(cls, path: Path, config: object) -> ConfigView:
        if not isinstance(config, dict):
            raise ModelError(f"{path}: the file must hold a JSON object, not {show(config)}.")
        model_type = config.get("model_type")
        if not model_type:
            raise ModelError(f"{path} does not say the model's architecture (model_type).")
        if not isinstance(model_type, str) or not _MODEL_TYPE.fullmatch(model_type):
            raise ModelError(
                f'{path}: model_type must be an architecture name like "llama", '
                f"not {show(model_type)}."
            )
        architectures = config.get("architectures")
        if architectures is not None and not (
            isinstance(architectures, str)
            or (isinstance(architectures, list) and all(isinstance(a, str) for a in architectures))
        ):
            raise ModelError(
                f"{path}: architectures must be a list of names, not {show(architectures)}."
            )
        nested = config.get("text_config")
        if nested is not None and not isinstance(nested, dict):
            raise ModelError(f"{path}: text_config must be an object, not {show(nested)}.")
        return cls(path, config, nested or {})

    def get(self, key: str) -> tuple[object, str]:
        """The value of ``key`` (None when absent) and its name in messages."""
        if self.text.get(key) is not None:
            return self.text[key], f"text_config.{key}"
        return self.top.get(key), key

    def count(
        self,
        *keys: str,
        limit: int,
        default: int | None = None,
        minimum: int = 1,
    ) -> int:
        """The first of ``keys`` present, as an int in [minimum, limit].

        Absent (or null): ``default``, or a ModelError when there is none. A float that
        is a whole number (4096.0) counts as that integer.
        """
        for key in keys:
            value, label = self.get(key)
            if value is None:
                continue
            number = _whole(value)
            if number is None or not minimum <= number <= limit:
                kind = "a positive integer" if minimum == 1 else f"an integer from {minimum}"
                raise ModelError(
                    f"{self.path}: {label} must be {kind} up to {limit:,}, not {show(value)}."
                )
            return number
        if default is None:
            raise ModelError(
                f"{self.path} has no {keys[0]}: MacMesh cannot tell the model's shape. "
                "The file is incomplete or describes a model mlx-lm cannot run."
            )
        return default

    def flag(self, key: str) -> bool:
        value, label = self.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise ModelError(f"{self.path}: {label} must be true or false, not {show(value)}.")
        return value

    def name(self, *keys: str) -> str | None:
        """The first of ``keys`` holding a string (a dtype name), or None."""
        for key in keys:
            value, label = self.get(key)
            if value is None:
                continue
            if not isinstance(value, str) or len(value) > _SHOWN_CHARS:
                raise ModelError(f"{self.path}: {label} must be a short name, not {show(value)}.")
            return value
        return None

    def quantization(self) -> dict[str, Any] | None:
        """The quantization settings (mlx ``quantization`` or HF ``quantization_config``)
        with ``bits`` and ``group_size``, checked, or None when the model is not quantized."""
        for key in ("quantization", "quantization_config"):
            for source, prefix in ((self.top, ""), (self.text, "text_config.")):
                value = source.get(key)
                if value is None:
                    continue
                label = prefix + key
                if not isinstance(value, dict):
                    raise ModelError(f"{self.path}: {label} must be an object, not {show(value)}.")
                if "bits" in value and "group_size" in value:
                    self._check_quantization(value, label)
                    return value
        return None

    def _check_quantization(self, settings: dict[str, Any], label: str) -> None:
        self._bits(settings["bits"], f"{label}.bits")
        group = _whole(settings["group_size"])
        if group is None or not 1 <= group <= MAX_GROUP_SIZE:
            raise ModelError(
                f"{self.path}: {label}.group_size must be a positive integer up to "
                f"{MAX_GROUP_SIZE:,}, not {show(settings['group_size'])}."
            )
        mode = settings.get("mode", "affine")
        if not isinstance(mode, str) or len(mode) > _SHOWN_CHARS:
            raise ModelError(f"{self.path}: {label}.mode must be a short name, not {show(mode)}.")
        for module, override in settings.items():
            if isinstance(override, dict) and override.get("bits") is not None:
                self._bits(override["bits"], f"{label}.{module}.bits")

    def _bits(self, value: object, label: str) -> None:
        bits = _whole(value)
        if bits is None or not 1 <= bits <= MAX_BITS:
            raise ModelError(
                f"{self.path}: {label} must be an integer from 1 to {MAX_BITS}, not {show(value)}."
            )


def _whole(value: object) -> int | None:
    """``value`` as an int when it is a JSON integer (or a whole finite float), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


# -- the safetensors index -------------------------------------------------------------------


def index_file_names(index: Path, content: object, what: str) -> list[str]:
    """The weight files an index names, each a plain relative path inside the folder.

    Names are checked as text, not resolved: a Hugging Face cache folder's files are
    symlinks into its blob store, and that is fine; ``../`` or an absolute path is not.
    """
    weight_map = content.get("weight_map") if isinstance(content, dict) else None
    if not isinstance(weight_map, dict):
        raise ModelError(
            f"{index}: weight_map must be an object of tensor names to file names, not "
            f"{show(weight_map)}. {what}"
        )
    names = set()
    for tensor, name in weight_map.items():
        if not isinstance(name, str):
            raise ModelError(
                f"{index}: weight_map[{show(tensor)}] must be a file name, not {show(name)}. {what}"
            )
        names.add(name)
    for name in names:
        parts = PurePosixPath(name).parts
        if (
            not name
            or "\\" in name
            or "\x00" in name
            or name.startswith("/")
            or ".." in parts
            or len(name) > 1024
        ):
            raise ModelError(
                f"{index}: weight_map names the file {show(name)}, outside the model folder. "
                f"Weight files must be inside it. {what}"
            )
    if not names:
        raise ModelError(f"{index}: weight_map names no weight files. {what}")
    return sorted(names)
