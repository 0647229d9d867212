"""What a model folder is, byte for byte: file names, sizes and SHA-256, and a stable id.

A ``Manifest`` is what the model copy sends and what preflight checks on every node. Its
``id`` is the SHA-256 of its canonical JSON (names, sizes, hashes; not the folder's name),
so the same files always give the same id and any changed byte gives another. A node that
runs one pipeline stage needs only some files: ``node_manifest`` is that subset, and it
keeps the whole model's ``model_id`` so every node files its part under the same folder.

Hashing a 100+ GB model takes minutes, so local hashes are cached in ``hashes.json``
under ``core.paths.cache_dir()``, keyed by (absolute path, size, mtime_ns). Trusted: a file
whose path, size and nanosecond mtime are unchanged has unchanged content. Every write
moves the mtime, so only a deliberate ``touch`` back to the old time after an edit of the
same length could fool it; the files on the *nodes* are never trusted this way (their
hashes are computed there, see ``core.remote.modelcheck``).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core import paths
from core.jsonfile import FileProblem, read_json, write_json_atomic
from core.worker.shardfiles import INDEX_NAME, files_for_layers

MARKER = ".macmesh-manifest.json"  # written last in a copied folder: "this copy is complete"
HASH_CACHE_NAME = "hashes.json"
HASH_CACHE_CAP = 64 << 20  # the hashes of every file of every model kept
INDEX_CAP = 64 << 20  # a weight index names every tensor once
WEIGHT_SUFFIXES = (".safetensors",)
_CHUNK = 8 << 20


class ManifestError(ValueError):
    """The folder cannot be described (missing, unreadable, odd file names)."""


@dataclass(frozen=True, order=True)
class FileEntry:
    name: str  # relative, "/"-separated
    size: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class Manifest:
    """The files of a model (or of the part one node needs), sorted by name.

    ``model_id`` is the id of the whole model's manifest; for the whole model it equals
    ``id``. The remote folder is named after it, so shards of one model share a folder
    and two different models never do.
    """

    name: str
    files: tuple[FileEntry, ...]
    model_id: str = ""
    id: str = field(init=False)

    def __post_init__(self) -> None:
        files = tuple(sorted(self.files))
        names = [entry.name for entry in files]
        if len(set(names)) != len(names):
            raise ManifestError(f"the manifest lists a file twice: {names}")
        for name in names:
            _check_name(name)
        object.__setattr__(self, "files", files)
        object.__setattr__(self, "id", manifest_id(files))
        if not self.model_id:
            object.__setattr__(self, "model_id", self.id)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(entry.name for entry in self.files)

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.files)

    @property
    def is_whole(self) -> bool:
        return self.id == self.model_id

    def entry(self, name: str) -> FileEntry | None:
        return next((entry for entry in self.files if entry.name == name), None)

    def subset(self, names: Iterable[str]) -> Manifest:
        """The listed files only, still filed under this model's id."""
        wanted = set(names)
        unknown = wanted - set(self.names)
        if unknown:
            raise ManifestError(f"not in the model {self.name}: {', '.join(sorted(unknown))}")
        files = tuple(entry for entry in self.files if entry.name in wanted)
        return Manifest(self.name, files, self.model_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "id": self.id,
            "model_id": self.model_id,
            "files": [entry.to_dict() for entry in self.files],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Manifest:
        """Raises ManifestError on anything malformed, or when the stored id disagrees
        with the files (a manifest edited by hand)."""
        try:
            files = tuple(
                FileEntry(str(f["name"]), int(f["size"]), str(f["sha256"]).lower())
                for f in data["files"]
            )
            manifest = cls(str(data["name"]), files, str(data.get("model_id") or ""))
        except (KeyError, TypeError, ValueError) as error:
            raise ManifestError(f"not a MacMesh manifest: {error}") from error
        if data.get("id") not in (None, manifest.id):
            raise ManifestError("the manifest's id does not match its files")
        return manifest

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ManifestError(f"not a MacMesh manifest: {error}") from error
        except RecursionError:
            raise ManifestError("not a MacMesh manifest: nested too deeply") from None
        if not isinstance(data, dict):
            raise ManifestError("not a MacMesh manifest: not a JSON object")
        return cls.from_dict(data)


def manifest_id(files: Iterable[FileEntry]) -> str:
    """SHA-256 of the canonical JSON of ``files`` (sorted by name)."""
    canonical = json.dumps(
        [[e.name, e.size, e.sha256] for e in sorted(files)], separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _check_name(name: str) -> None:
    parts = name.split("/")
    if (
        not name
        or name.startswith("/")
        or any(part in ("", ".", "..") for part in parts)
        or any(ch in name for ch in "\n\r\\\t")
    ):
        raise ManifestError(
            f"the file name {name!r} cannot be copied safely (rename it without "
            "newlines, tabs, backslashes or '..')"
        )


# -- local hashing, cached --------------------------------------------------------------


class HashCache:
    """(path, size, mtime_ns) → sha256, in a JSON file; safe to share between threads."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or paths.cache_dir() / HASH_CACHE_NAME
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, Any]] | None = None

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._entries is None:
            try:  # a FIFO or a huge file is refused at once (FileProblem): hashed anew
                data = read_json(self.path, HASH_CACHE_CAP) if self.path.exists() else {}
                self._entries = data if isinstance(data, dict) else {}
            except (OSError, ValueError):
                self._entries = {}
        return self._entries

    def get(self, path: Path, stat: os.stat_result) -> str | None:
        with self._lock:
            entry = self._load().get(str(path))
        if (
            isinstance(entry, dict)
            and entry.get("size") == stat.st_size
            and entry.get("mtime_ns") == stat.st_mtime_ns
        ):
            digest = entry.get("sha256")
            return digest if isinstance(digest, str) else None
        return None

    def put_many(self, items: Iterable[tuple[Path, os.stat_result, str]]) -> None:
        with self._lock:
            entries = self._load()
            for path, stat, digest in items:
                entries[str(path)] = {
                    "size": stat.st_size,
                    "mtime_ns": stat.st_mtime_ns,
                    "sha256": digest,
                }
            write_json_atomic(self.path, entries)


def sha256_file(path: Path, on_bytes: Callable[[int], None] | None = None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)  # hashlib releases the GIL on large updates
            if on_bytes is not None:
                on_bytes(len(chunk))
    return digest.hexdigest()


def model_files(model_dir: Path) -> list[str]:
    """Every regular file under the folder, relative, hidden ones (".DS_Store", our
    marker, ".cache") left out."""
    found = []
    for root, dirs, files in os.walk(model_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            path = Path(root, name)
            if name.startswith(".") or not path.is_file():
                continue
            found.append(path.relative_to(model_dir).as_posix())
    return sorted(found)


def build_manifest(
    model_dir: Path | str,
    cache: HashCache | None = None,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 2,
) -> Manifest:
    """The manifest of a whole model folder. ``progress(hashed, total)`` reports bytes
    hashed (files already in the cache count at once). Raises ManifestError."""
    folder = Path(model_dir).expanduser()
    if not folder.is_dir():
        raise ManifestError(f"{folder} is not a folder")
    cache = cache or HashCache()
    try:
        names = model_files(folder)
        stats = {name: (folder / name).stat() for name in names}
    except OSError as error:
        raise ManifestError(f"cannot read {folder}: {error}") from error
    if not names:
        raise ManifestError(f"{folder} is empty")
    total = sum(s.st_size for s in stats.values())
    done = 0
    lock = threading.Lock()

    def add(count: int) -> None:
        nonlocal done
        with lock:
            done += count
            if progress is not None:
                progress(done, total)

    digests: dict[str, str] = {}
    todo = []
    for name in names:
        path = (folder / name).resolve()
        cached = cache.get(path, stats[name])
        if cached is None:
            todo.append(name)
        else:
            digests[name] = cached
            add(stats[name].st_size)

    def work(name: str) -> str:
        return sha256_file(folder / name, add)

    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for name, digest in zip(todo, pool.map(work, todo), strict=True):
                digests[name] = digest
    except OSError as error:
        raise ManifestError(f"cannot read {folder}: {error}") from error
    if todo:
        cache.put_many(((folder / n).resolve(), stats[n], digests[n]) for n in todo)
    entries = tuple(FileEntry(n, stats[n].st_size, digests[n]) for n in names)
    return Manifest(folder.name, entries)


# -- which files a node needs ------------------------------------------------------------


def is_weight_file(name: str, weight_files: Collection[str] = ()) -> bool:
    return name in weight_files or name.endswith(WEIGHT_SUFFIXES)


def needed_files(
    names: Iterable[str],
    weight_map: Mapping[str, str] | None,
    layers: tuple[int, int] | None,
) -> set[str]:
    """Every non-weight file (config, tokenizer, index...) plus the weight files holding
    layers [start, end) and the shared tensors. ``layers`` None (tensor, single) or no
    index (one weight file): every weight file."""
    names = set(names)
    weights = set(weight_map.values()) if weight_map else set()
    keep = {name for name in names if not is_weight_file(name, weights)}
    if layers is None or not weight_map:
        return names
    return keep | (files_for_layers(dict(weight_map), *layers) & names)


def node_manifest(
    model_dir: Path | str,
    layers: tuple[int, int] | None,
    manifest: Manifest | None = None,
    cache: HashCache | None = None,
) -> Manifest:
    """What a rank holding ``layers`` (``Plan.layers_of``) needs from the model: a
    pipeline stage its layers' files, tensor and single ranks (None) everything. Pass
    ``manifest`` to skip re-reading."""
    folder = Path(model_dir).expanduser()
    whole = manifest or build_manifest(folder, cache)
    weight_map = None
    if layers is not None and INDEX_NAME in whole.names:
        try:
            weight_map = read_json(folder / INDEX_NAME, INDEX_CAP)["weight_map"]
        except FileProblem as problem:
            raise ManifestError(f"cannot read {problem}") from None
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ManifestError(f"cannot read {folder / INDEX_NAME}: {error}") from error
    return whole.subset(needed_files(whole.names, weight_map, layers))
