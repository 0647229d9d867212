"""Put this Mac's worker on a node, once, and check what will run it there.

A rank on a peer runs exactly this Mac's worker: ``core/__init__.py`` and
``core/worker/*.py`` (mlx, mlx-lm and the standard library only) are shipped to
``<cache_root>/worker/<content hash>/`` on the node, extracted into a temporary
folder and renamed into place, so a folder under its hash is always complete and
a second job finds it there. Then ``<python> -m core.worker --version`` runs from
that folder: its content hash proves the code is ours, and it reports the mlx and
mlx-lm versions of the Python the ranks will use. One SSH round trip per node. A
node's Python may be a MacMesh.app binary: it runs the worker frozen inside it, which
has no sources to hash, and is accepted when it is the same MacMesh version.
"""

from __future__ import annotations

import io
import json
import shlex
import tarfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import core
from core.remote.ssh import Connection, SSHError
from core.worker.version import tree_hash, worker_files

SOURCE_ROOT = Path(core.__file__).resolve().parent.parent
_VERSION = core.__version__
_ROOT_MARK = "MACMESH-CACHE-ROOT"

# $1 cache root ("" → the node's default), $2 content hash, $3 Python. The tarball
# comes on stdin; it is read only when the worker is not there yet.
_SCRIPT = r"""
root=$1
if [ -z "$root" ]; then
  if [ "$(uname)" = Darwin ]; then root="$HOME/Library/Caches/MacMesh"
  else root="${XDG_CACHE_HOME:-$HOME/.cache}/macmesh"; fi
fi
dir="$root/worker/$2"
if [ ! -f "$dir/core/worker/main.py" ]; then
  mkdir -p "$root/worker" || exit 90
  tmp=$(mktemp -d "$root/worker/.incoming.XXXXXX") || exit 90
  if ! tar -xzf - -C "$tmp"; then rm -rf "$tmp"; exit 91; fi
  if [ -e "$dir" ]; then rm -rf "$tmp"; else mv "$tmp" "$dir" || exit 90; fi
else
  cat >/dev/null
fi
echo "MACMESH-CACHE-ROOT $root"
cd "$dir" || exit 90
PYTHONPATH="$dir" exec "$3" -m core.worker --version
"""


class WorkerError(SSHError):
    """The worker cannot run on a node as shipped; the message says why and what to do."""


@dataclass(frozen=True)
class NodeSetup:
    """What a node offers a rank: where MacMesh's cache is there, where the shipped
    worker is, and what ``--version`` said from it."""

    host: str
    python: str
    cache_root: str
    worker_dir: str
    versions: dict[str, Any]

    @property
    def mlx(self) -> str | None:
        return self.versions.get("mlx")

    @property
    def mlx_lm(self) -> str | None:
        return self.versions.get("mlx_lm")


@cache
def worker_bundle() -> tuple[str, bytes]:
    """This Mac's worker: its content hash and a gzipped tarball of its files."""
    digest = tree_hash(SOURCE_ROOT)
    if digest is None:
        raise RuntimeError("this MacMesh has no worker sources to ship")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in worker_files(SOURCE_ROOT):
            data = (SOURCE_ROOT / name).read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return digest, buffer.getvalue()


def prepare_node(
    connection: Connection, python: str, cache_root: str | None = None, timeout: float = 60.0
) -> NodeSetup:
    """Ship the worker to the node behind ``connection`` (if not there yet) and check it
    with ``python``. Raises ``WorkerError`` (or another ``SSHError``) with what to do."""
    digest, tarball = worker_bundle()
    host = connection.host
    connection.connect()
    argv = ["/bin/sh", "-c", _SCRIPT, "sh", cache_root or "", digest, python]
    result = connection.run(shlex.join(argv), timeout=timeout, stdin=tarball)
    said = (result.stderr.strip().splitlines() or [""])[-1]
    if result.rc in (90, 91):
        where = cache_root or "its MacMesh cache folder"
        raise WorkerError(
            host, f"Could not put MacMesh's worker in {where} on {host} ({said}). Check that "
            "the folder is writable and the disk is not full.",
        )  # fmt: skip
    if result.rc in (126, 127):
        raise WorkerError(
            host, f"There is no Python at {python} on {host} ({said}). Install Python with "
            "mlx and mlx-lm there, or set that node's Python.",
        )  # fmt: skip
    root, versions = _parse(result.stdout)
    if result.rc != 0 or root is None or versions is None:
        raise WorkerError(
            host, f"{python} on {host} could not run MacMesh's worker "
            f"({said or f'exit status {result.rc}'}). Check that it is Python 3.11 or newer.",
        )  # fmt: skip
    frozen_same = versions.get("worker_hash") is None and versions.get("macmesh") == _VERSION
    if versions.get("worker_hash") != digest and not frozen_same:  # an app: its own worker
        raise WorkerError(
            host, f"{python} on {host} ran another worker ({versions.get('worker_hash')}) than "
            f"this Mac's ({digest}). If that Python is an older MacMesh app, update it.",
        )  # fmt: skip
    for key, name in (("mlx", "mlx"), ("mlx_lm", "mlx-lm")):
        if not versions.get(key):
            raise WorkerError(
                host, f"{name} is not installed for {python} on {host}: "
                f"`{python} -m pip install mlx mlx-lm` there, or set that node's Python.",
            )  # fmt: skip
    worker_dir = f"{root}/worker/{digest}"
    return NodeSetup(host, python, root, worker_dir, versions)


def version_skew(setups: list[NodeSetup]) -> str | None:
    """A sentence naming the nodes whose mlx or mlx-lm differs, or None when all agree."""
    for attr, name in (("mlx", "mlx"), ("mlx_lm", "mlx-lm")):
        seen: dict[str, list[str]] = {}
        for setup in setups:
            seen.setdefault(getattr(setup, attr), []).append(setup.host)
        if len(seen) > 1:
            listed = "; ".join(f"{v} on {', '.join(hosts)}" for v, hosts in seen.items())
            return (
                f"Every node must run the same {name}, but they differ: {listed}. Install the "
                f"same version everywhere (`python -m pip install {name}==<version>`)."
            )
    return None


def _parse(stdout: str) -> tuple[str | None, dict[str, Any] | None]:
    root = versions = None
    for line in stdout.splitlines():
        if line.startswith(_ROOT_MARK + " "):
            root = line[len(_ROOT_MARK) + 1 :].strip()
        elif line.startswith("{"):
            try:
                versions = json.loads(line)
            except (ValueError, RecursionError):
                continue
    return root, versions if isinstance(versions, dict) else None
