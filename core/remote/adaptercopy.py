"""Put an adapter on a node: its few files, by the model copy's own machinery.

An adapter is small (megabytes): ``adapter_config.json``, ``adapters.safetensors`` and
MacMesh's ``macmesh.json``; its checkpoints stay on this Mac. It travels like a model
(``core.remote.modelcopy``: hashed on the node, resumable, atomic), into its own folder
under the node's cache root, named after its content, so two adapters never share one
and an adapter already there is not sent again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from core.model.manifest import FileEntry, Manifest, ManifestError, sha256_file
from core.remote.modelcheck import check, remote_model_dir
from core.remote.modelcopy import Cancel, CopyProgress, copy_model
from core.remote.targets import Target
from core.remote.transport import ModelCopyError


def adapter_manifest(folder: Path, files: Sequence[str]) -> Manifest:
    """The manifest of ``files`` in ``folder`` (only those: checkpoints are left out)."""
    try:
        entries = [
            FileEntry(name, (folder / name).stat().st_size, sha256_file(folder / name))
            for name in files
        ]
    except OSError as error:
        raise ManifestError(f"cannot read the adapter {folder}: {error}") from error
    return Manifest(f"adapter-{folder.name}", tuple(entries))


def adapter_folder(target: Target, folder: Path, files: Sequence[str]) -> str:
    """Where the adapter is (or will be) on ``target``, without copying anything."""
    if target.local:
        return str(folder)
    return remote_model_dir(target, adapter_manifest(folder, files))


def put_adapter(
    target: Target,
    folder: Path,
    files: Sequence[str],
    progress: Callable[[CopyProgress], None] | None = None,
    cancel: Cancel = None,
) -> str:
    """The adapter's folder on ``target`` (this Mac's own for a local target), copied
    there first when the node lacks it. Raises as ``copy_model`` does, and
    ``ManifestError`` when the adapter's files cannot be read here."""
    if target.local:
        return str(folder)
    manifest = adapter_manifest(folder, files)
    result = check(target, manifest)
    if result.status == "different":
        # A folder named after this content holds other files: never ours to overwrite.
        raise ModelCopyError(result.reason)
    if result.status != "present":
        copy_model(target, manifest, folder, progress, cancel, damaged=result.damaged)
    return remote_model_dir(target, manifest)
