"""What the library already validated, so a listing reads headers only for what changed.

Validating a folder reads every safetensors header (thousands of tensors for a large
model); listing 200 models that way takes seconds. The verdict for a folder cannot
change while its files do not, so it is kept in ``library-index.json`` in MacMesh's cache
folder, keyed by the folder and a signature of its files (name, size, modification
time, as ``stat`` sees them through the cache's symlinks), MacMesh's and mlx-lm's
versions (mlx-lm decides which architectures load) and the known breakage. A changed
file, a new version or an unreadable index means validating again; the index is a
speed-up only, and losing it costs one slow listing.
"""

from __future__ import annotations

import logging
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from core import __version__, paths
from core.jsonfile import FileProblem, read_json, write_json_atomic
from core.model.experts import Experts
from core.model.info import ModelInfo

log = logging.getLogger(__name__)

FILE_NAME = "library-index.json"
# 2: a model's routed experts (ModelInfo.experts); 3: what MacMesh's own tensor sharding
# keeps whole (ModelInfo.tensor_whole_*)
VERSION = 3
MEMO_CAP = 16 << 20  # what the library learnt of every folder


def signature(folder: Path, extra: str = "") -> str:
    """The folder's files as ``stat`` sees them (symlinks followed); "" if unreadable."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return ""
    parts = [_tool_versions(), extra]
    for name in names:
        try:
            stat = os.stat(folder / name)
            parts.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns}")
        except OSError:
            parts.append(f"{name}:missing")
    return "|".join(parts)


_VERSIONS: str | None = None


def _tool_versions() -> str:
    global _VERSIONS
    if _VERSIONS is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            mlx_lm = version("mlx-lm")
        except PackageNotFoundError:
            mlx_lm = "none"
        _VERSIONS = f"macmesh {__version__} mlx-lm {mlx_lm}"
    return _VERSIONS


class Memo:
    """The index, loaded once per listing and saved when it changed."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.records: dict[str, dict[str, Any]] = {}
        self.changed = False
        self.used: set[str] = set()

    @classmethod
    def load(cls) -> Memo:
        try:
            path = paths.cache_dir() / FILE_NAME
        except paths.FolderError:
            return cls(None)
        memo = cls(path)
        if not path.exists():
            return memo
        try:
            data = read_json(path, MEMO_CAP)
        except FileProblem as problem:  # a FIFO, a huge or damaged file: read anew
            log.warning("%s; the library's facts are read anew", problem)
            return memo
        except (OSError, ValueError):
            return memo
        if isinstance(data, dict) and data.get("version") == VERSION:
            records = data.get("folders")
            if isinstance(records, dict):
                memo.records = records
        return memo

    def get(self, folder: Path, sig: str) -> dict[str, Any] | None:
        record = self.records.get(str(folder))
        if not sig or not isinstance(record, dict) or record.get("signature") != sig:
            return None
        self.used.add(str(folder))
        return record

    def put(self, folder: Path, sig: str, record: dict[str, Any]) -> None:
        if sig:
            self.records[str(folder)] = {**record, "signature": sig}
            self.used.add(str(folder))
            self.changed = True

    def keep_others(self) -> None:
        """Keep on save the folders this memo did not look at (a partial pass)."""
        self.used |= set(self.records)

    def save(self) -> None:
        """Write the index with the folders seen in this listing (others are gone)."""
        if self.path is None or not (self.changed or set(self.records) - self.used):
            return
        kept = {key: value for key, value in self.records.items() if key in self.used}
        try:
            write_json_atomic(self.path, {"version": VERSION, "folders": kept})
        except OSError as error:
            log.debug("cannot save %s: %s", self.path, error)


def info_to_json(info: ModelInfo) -> dict[str, Any]:
    data = {f.name: getattr(info, f.name) for f in fields(info)}
    data["path"] = str(info.path)
    data["weight_files"] = [str(p) for p in info.weight_files]
    data["layer_bytes"] = list(info.layer_bytes)
    data["experts"] = {
        "total": info.experts.total,
        "per_token": info.experts.per_token,
        "layer_bytes": list(info.experts.layer_bytes),
        "note": info.experts.note,
    }
    return data


def info_from_json(data: dict[str, Any]) -> ModelInfo | None:
    try:
        values = dict(data)
        values["path"] = Path(values["path"])
        values["weight_files"] = tuple(Path(p) for p in values["weight_files"])
        values["layer_bytes"] = tuple(int(n) for n in values["layer_bytes"])
        values["tensor_whole_parts"] = tuple(str(p) for p in values["tensor_whole_parts"])
        experts = values["experts"]
        values["experts"] = Experts(
            int(experts["total"]),
            int(experts["per_token"]),
            tuple(int(n) for n in experts["layer_bytes"]),
            str(experts["note"]),
        )
        return ModelInfo(**values)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
