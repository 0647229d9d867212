"""A folder of this Mac's on a node, and a node's folder back here.

A fine-tune's data goes out with the model (``copy_model``: only what the node lacks,
verified, resumable); the adapter rank 0 writes on its node comes back as a tar stream
over the node's SSH connection (base64 in the text channel: no second transport).
"""

from __future__ import annotations

import base64
import io
import shlex
import tarfile
from collections.abc import Callable
from pathlib import Path

from core.model.manifest import build_manifest
from core.remote.modelcopy import Cancel, CopyProgress, copy_model
from core.remote.targets import Target

FETCH_WITHIN_S = 60.0


def put_folder(
    target: Target,
    folder: Path,
    progress: Callable[[CopyProgress], None] | None = None,
    cancel: Cancel = None,
) -> str:
    """``folder`` on ``target`` (this Mac's own path for a local target): where it is
    there. Raises as ``copy_model`` does."""
    if target.local:
        return str(folder)
    return copy_model(target, build_manifest(folder), folder, progress, cancel).folder


def fetch_folder(target: Target, remote: str, into: Path) -> None:
    """The files of ``remote`` on ``target`` into ``into``, then ``remote`` removed there.
    OSError (or ``SSHError``, ``tarfile.TarError``) naming the node when it fails."""
    q = shlex.quote(remote)
    with target.connection() as connection:
        # Read to the end of the stream (``run`` may return at the exit status with the
        # last bytes of a long output still in flight).
        process = connection.start(f"cd {q} && tar -cf - . | base64")
        text = "".join(process.stdout_lines())
        errors = "".join(process.stderr_lines()).strip()
        if process.wait(FETCH_WITHIN_S) != 0:
            raise OSError(f"could not read {remote} on {target.name}: {errors or 'tar failed'}")
        try:
            raw = base64.b64decode("".join(text.split()), validate=True)
        except ValueError as exc:
            raise OSError(f"{remote} on {target.name} came back damaged: {exc}") from exc
        with tarfile.open(fileobj=io.BytesIO(raw)) as archive:
            archive.extractall(into, filter="data")
        connection.run(f"rm -rf {q}", timeout=FETCH_WITHIN_S)
