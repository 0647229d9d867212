"""One model of the library: what a list shows, and whether MLX can load it.

A folder becomes an entry through the same validation as a dropped folder
(``read_model_info``); a folder with only GGUF or PyTorch weights is "not an MLX model",
said with the reason; anything else wrong (a half download, a missing snapshot file) is
"broken" with ``ModelError``'s one-line message. Building an entry never raises.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from core.jsonfile import read_json
from core.library.memo import Memo, info_from_json, info_to_json, signature
from core.model.info import ModelError, ModelInfo, read_model_info
from core.units import count, size


class Source(StrEnum):
    HUGGING_FACE = "huggingface"  # the Hugging Face cache (mlx_lm, LM Studio's MLX engine, ...)
    LM_STUDIO = "lmstudio"  # LM Studio's models folder
    FOLDER = "folder"  # a folder the person added
    DEMO = "demo"  # the demo model, converted into the cache folder (`demo` names it)


class State(StrEnum):
    OK = "ok"  # MLX loads it
    NOT_MLX = "not_mlx"  # GGUF-only or PyTorch-only: another app's model
    BROKEN = "broken"  # a half download, a missing file, a bad config


CONFIG_CAP = 4 << 20  # a model's config.json
SOURCE_LABELS = {
    Source.HUGGING_FACE: "Hugging Face cache",
    Source.LM_STUDIO: "LM Studio",
    Source.FOLDER: "added folder",
    Source.DEMO: "the demo model (`demo` names it)",
}

_PYTORCH_SUFFIXES = (".bin", ".pt", ".pth")


@dataclass(frozen=True)
class LibraryEntry:
    """A model found on this Mac. ``info`` is set when ``state`` is OK."""

    name: str
    source: Source
    path: Path
    state: State
    reason: str | None = None
    size_bytes: int = 0
    revision: str | None = None
    info: ModelInfo | None = field(default=None, compare=False, repr=False)
    # False for a quick entry (``checked=False`` listing): its config and files looked
    # right, its headers are not read yet; ``complete_entry`` validates it.
    checked: bool = field(default=True, compare=False)
    model_type: str | None = field(default=None, compare=False)  # config.json's, unchecked

    @property
    def usable(self) -> bool:
        return self.state is State.OK

    @property
    def architecture(self) -> str | None:
        return self.info.architecture if self.info else self.model_type

    @property
    def parameters(self) -> int | None:
        return self.info.parameter_count if self.info else None

    @property
    def quantization(self) -> str | None:
        return self.info.quantization_label if self.info else None

    def summary(self) -> str:
        """One line: "mlx-community/X · llama · 135M params · 4-bit · 93.6 MB · Hugging Face
        cache", or the reason it cannot be used."""
        where = SOURCE_LABELS[self.source]
        if self.info is not None:
            return " · ".join(
                [
                    self.name,
                    self.info.architecture,
                    f"{count(self.info.parameter_count)} params",
                    self.info.quantization_label,
                    size(self.size_bytes),
                    where,
                ]
            )
        if self.state is State.OK:  # not checked yet
            return " · ".join([self.name, self.model_type or "?", size(self.size_bytes), where])
        label = "not an MLX model" if self.state is State.NOT_MLX else "broken"
        return f"{self.name} · {label}: {self.reason} · {where}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": str(self.source),
            "path": str(self.path),
            "state": str(self.state),
            "mlx": self.usable,
            "reason": self.reason,
            "architecture": self.architecture,
            "parameters": self.parameters,
            "quantization": self.quantization,
            "size_bytes": self.size_bytes,
            "revision": self.revision,
            "checked": self.checked,
        }


def entry_for_folder(
    name: str,
    source: Source,
    folder: Path,
    *,
    size_bytes: int | None = None,
    revision: str | None = None,
    problem: str | None = None,
    memo: Memo | None = None,
    checked: bool = True,
) -> LibraryEntry:
    """The entry for a model folder; never raises. ``problem`` marks a known breakage
    (a cache entry huggingface_hub reported as corrupt, an interrupted download) that
    explains a failed validation better than the validation itself. ``memo`` skips the
    validation of a folder whose files have not changed since it was last validated.
    ``checked=False`` reads no header for a folder the memo does not know: a quick
    entry from its config and file names."""
    on_disk = folder_size(folder) if size_bytes is None else size_bytes
    sig = signature(folder, problem or "") if memo is not None else ""
    record = memo.get(folder, sig) if memo is not None else None
    if record is not None:
        info = info_from_json(record["info"]) if record.get("info") else None
        state = State(record["state"])
        if state is not State.OK or info is not None:
            info = replace(info, name=name) if info is not None else None
            return LibraryEntry(
                name, source, folder, state, record.get("reason"), on_disk, revision, info
            )
    if not checked:
        return _quick(name, source, folder, on_disk, revision, problem)
    entry = _validated(name, source, folder, on_disk, revision, problem)
    if memo is not None:
        saved = info_to_json(entry.info) if entry.info is not None else None
        memo.put(folder, sig, {"state": str(entry.state), "reason": entry.reason, "info": saved})
    return entry


def _validated(
    name: str,
    source: Source,
    folder: Path,
    on_disk: int,
    revision: str | None,
    problem: str | None,
) -> LibraryEntry:

    def entry(
        state: State, reason: str | None = None, info: ModelInfo | None = None
    ) -> LibraryEntry:
        return LibraryEntry(name, source, folder, state, reason, on_disk, revision, info)

    not_mlx = _not_mlx_reason(folder)
    if not_mlx:
        return entry(State.NOT_MLX, not_mlx)
    try:
        info = read_model_info(folder)
    except ModelError as error:
        return entry(State.BROKEN, f"{problem} ({error})" if problem else str(error))
    except Exception as error:  # a list must never crash on one odd folder
        return entry(State.BROKEN, f"cannot read it: {type(error).__name__}: {error}")
    return entry(State.OK, info=replace(info, name=name))  # not a snapshot's commit


def complete_entry(entry: LibraryEntry, memo: Memo | None = None) -> LibraryEntry:
    """A quick entry validated (headers read, the memo filled); a checked one as it is."""
    if entry.checked:
        return entry
    problem = entry.reason if entry.state is State.BROKEN else None
    return entry_for_folder(
        entry.name,
        entry.source,
        entry.path,
        size_bytes=entry.size_bytes,
        revision=entry.revision,
        problem=problem,
        memo=memo,
    )


def _quick(
    name: str,
    source: Source,
    folder: Path,
    on_disk: int,
    revision: str | None,
    problem: str | None,
) -> LibraryEntry:
    """What config.json and the file names say, in well under a millisecond: GGUF or
    PyTorch only, no config, a half download, weight files missing; else OK, unchecked."""

    def entry(
        state: State, reason: str | None = None, model_type: str | None = None
    ) -> LibraryEntry:
        return LibraryEntry(
            name, source, folder, state, reason, on_disk, revision, None, False, model_type
        )

    try:
        names = os.listdir(folder)
    except OSError as error:
        return entry(State.BROKEN, f"cannot read {folder}: {error.strerror or error}")
    not_mlx = not_mlx_reason(names)
    if not_mlx:
        return entry(State.NOT_MLX, not_mlx)
    if problem:
        return entry(State.BROKEN, problem)
    try:
        config = read_json(folder / "config.json", CONFIG_CAP)  # a FIFO, a huge one: refused
        model_type = config.get("model_type") if isinstance(config, dict) else None
    except (OSError, ValueError):
        model_type = None
    if not isinstance(model_type, str) or not any(n.endswith(".safetensors") for n in names):
        return _validated(name, source, folder, on_disk, revision, problem)  # says why
    return entry(State.OK, model_type=model_type)


def weight_kinds(names: list[str]) -> set[str]:
    """Which weight formats a list of file names holds: safetensors, gguf, pytorch."""
    kinds = set()
    for name in names:
        lower = name.lower()
        if lower.endswith(".safetensors"):
            kinds.add("safetensors")
        elif lower.endswith(".gguf"):
            kinds.add("gguf")
        elif lower.endswith(_PYTORCH_SUFFIXES):
            kinds.add("pytorch")
    return kinds


def not_mlx_reason(names: list[str]) -> str | None:
    """Why a set of files is not an MLX model (GGUF-only, PyTorch-only), or None."""
    kinds = weight_kinds(names)
    if "safetensors" in kinds:
        return None
    if "gguf" in kinds:
        return (
            "GGUF weights only (llama.cpp, LM Studio's GGUF engine): not an MLX model. "
            "Look for an MLX version of it, e.g. on mlx-community"
        )
    if "pytorch" in kinds:
        return (
            "PyTorch weights only (.bin/.pt): not an MLX model. Look for a safetensors or "
            "mlx-community version, or convert it with mlx_lm.convert"
        )
    return None


def _not_mlx_reason(folder: Path) -> str | None:
    try:
        names = [p.name for p in folder.iterdir()]
    except OSError:
        return None  # read_model_info says what is wrong with the folder
    return not_mlx_reason(names)


def folder_size(folder: Path) -> int:
    """Bytes of the files in ``folder`` (symlinks followed, each target counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    try:
        children = list(folder.rglob("*"))
    except OSError:
        return 0
    for path in children:
        try:
            stat = path.stat()
        except OSError:
            continue
        key = (stat.st_dev, stat.st_ino)
        if path.is_file() and key not in seen:
            seen.add(key)
            total += stat.st_size
    return total
