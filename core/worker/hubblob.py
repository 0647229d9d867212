"""One weight file from the Hugging Face Hub into a Hugging Face cache, resumable across runs.

``hf_hub_download`` (huggingface_hub 2.4) writes to a temporary name unique to the call
and deletes it on any failure, so a download stopped half way (a cancel, a cut that
outlasts the library's own retries, a killed process) starts again from zero. Here the
file is fetched with the library's own pieces (``get_hf_file_metadata`` for the etag and
the CDN location, ``http_get`` with ``resume_size``, the cache's ``WeakFileLock``) into
the blob ``hf_hub_download`` would have written, through ``blobs/<etag>.incomplete``,
which the next run continues with a range request. ``hf_hub_download`` then finds the
blob, links the snapshot and records the ref. Xet-stored files (with ``hf_xet``
installed) are left to ``hf_hub_download``: Xet keeps its own chunk cache.

Shared by this Mac's downloads (``core.library.download``) and a node's own download of
its shard (``core.remote.hubfetch`` sends this file's source to the node's Python, which
has huggingface_hub as mlx-lm's dependency). So: the standard library at the top,
huggingface_hub imported where used, and nothing else of MacMesh.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# Files above this are fetched resumably; smaller ones are not worth a second request.
RESUMABLE_BYTES = 1 << 20


def fetch_blob(
    repo_id: str,
    filename: str,
    revision: str,
    cache_dir: str | Path,
    *,
    endpoint: str | None = None,
    tqdm_class: Any = None,
) -> None:
    """Fill ``blobs/<etag>`` of ``repo_id`` in ``cache_dir`` from ``blobs/<etag>.incomplete``,
    resuming what an earlier run left there. Nothing when the blob is there already or
    the file is Xet-stored with ``hf_xet`` installed, or a node's huggingface_hub is too
    old for these pieces (``hf_hub_download`` then fetches it, resuming only within its
    call). huggingface_hub's exceptions pass through; what arrived stays in the
    ``.incomplete`` file."""
    import inspect
    from urllib.parse import urlparse

    try:
        from huggingface_hub import get_hf_file_metadata, hf_hub_url
        from huggingface_hub.file_download import http_get, repo_folder_name
        from huggingface_hub.utils import WeakFileLock, build_hf_headers  # type: ignore[attr-defined]
        from huggingface_hub.utils._runtime import is_xet_available
    except ImportError:
        return
    if "tqdm_class" not in inspect.signature(http_get).parameters:
        return

    url = hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint)
    meta = get_hf_file_metadata(url)
    xet = getattr(meta, "xet_file_data", None) is not None and is_xet_available()
    if meta.etag is None or xet:
        return
    folder = repo_folder_name(repo_id=repo_id, repo_type="model")
    blob = Path(cache_dir) / folder / "blobs" / meta.etag
    if blob.exists():
        return
    partial = blob.with_name(blob.name + ".incomplete")
    lock = Path(cache_dir) / ".locks" / folder / f"{meta.etag}.lock"
    blob.parent.mkdir(parents=True, exist_ok=True)
    lock.parent.mkdir(parents=True, exist_ok=True)
    headers = build_hf_headers()
    if urlparse(meta.location).netloc != urlparse(url).netloc:
        headers.pop("authorization", None)  # a signed CDN address: no token to a third party
    with WeakFileLock(str(lock)):
        if blob.exists():
            return
        if meta.size is not None and partial.exists() and partial.stat().st_size > meta.size:
            partial.unlink()  # not a prefix of this file: start again
        with partial.open("ab") as out:
            http_get(
                meta.location,
                out,
                resume_size=out.tell(),
                headers=headers,
                expected_size=meta.size,
                displayed_filename=filename,
                tqdm_class=tqdm_class,
            )
        os.replace(partial, blob)
