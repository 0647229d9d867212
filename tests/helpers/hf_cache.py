"""Real Hugging Face cache layouts, built the way huggingface_hub writes them.

``models--org--name/blobs/<etag>`` holds each file's bytes, ``snapshots/<sha>/<file>`` is a
relative symlink into ``blobs/``, ``refs/main`` holds the commit sha. Faults are the ones
found in real caches: an interrupted download (the blob still ``<etag>.incomplete``, no
snapshot link), a snapshot link whose blob is gone, a GGUF-only repo.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path


def repo_sha(repo_id: str) -> str:
    return hashlib.sha1(repo_id.encode()).hexdigest()


def put_in_hf_cache(
    cache: Path,
    repo_id: str,
    source: Path,
    *,
    sha: str | None = None,
    interrupted: Sequence[str] = (),
    blob_missing: Sequence[str] = (),
    move: bool = False,
) -> Path:
    """Store ``source``'s files as ``repo_id`` in the cache at ``cache``; returns the
    snapshot folder. ``interrupted`` files are left half-written as ``.incomplete``
    blobs with no snapshot link; ``blob_missing`` files keep a link to a deleted blob."""
    sha = sha or repo_sha(repo_id)
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    blobs, snapshot = repo / "blobs", repo / "snapshots" / sha
    blobs.mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(sha)
    for file in sorted(source.iterdir()):
        length = file.stat().st_size
        if move:
            with file.open("rb") as handle:
                etag = hashlib.sha256(handle.read(1 << 16) + str(length).encode()).hexdigest()
        else:
            etag = hashlib.sha256(file.read_bytes()).hexdigest()
        blob = blobs / (f"{etag}.incomplete" if file.name in interrupted else etag)
        if move:
            shutil.move(file, blob)
        else:
            shutil.copyfile(file, blob)
        if file.name in interrupted:
            with blob.open("r+b") as handle:
                handle.truncate(length // 2)
            continue
        os.symlink(os.path.join("..", "..", "blobs", etag), snapshot / file.name)
        if file.name in blob_missing:
            (blobs / etag).unlink()
    return snapshot
