"""What this worker is: its MacMesh version, its content hash and the versions under it.

``python -m core.worker --version`` prints this as one JSON line. The controller ships
the worker to a node under its content hash and calls ``--version`` there before
launching, so a rank never runs other code than this Mac's, nor on another mlx. Standard
library only, and no import of mlx or mlx-lm (mlx-lm takes seconds to import): versions
come from the installed packages' metadata, or the modules when there is none (a frozen
app).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from core.worker import ringwait
from core.worker.blas import find_openblas

# The files a worker is made of, relative to the folder holding the ``core`` package.
CORE_INIT = "core/__init__.py"
WORKER_GLOB = "core/worker/*.py"


def worker_files(root: Path) -> list[str]:
    """The worker's files under ``root`` (the folder holding ``core``), sorted."""
    names = [CORE_INIT] if (root / CORE_INIT).is_file() else []
    names += sorted(p.relative_to(root).as_posix() for p in root.glob(WORKER_GLOB))
    return names


def tree_hash(root: Path) -> str | None:
    """A digest of the worker's file names and bytes (None when its sources are not
    readable, as in a frozen app that ships bytecode only)."""
    names = worker_files(root)
    if not any(name.endswith("/main.py") for name in names):
        return None
    digest = hashlib.sha256()
    for name in names:
        data = (root / name).read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:16]


def package_version(distribution: str, module: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return str(getattr(importlib.import_module(module), "__version__", None) or "") or None
    except Exception:  # missing or broken: the controller says which
        return None


def version_info() -> dict[str, Any]:
    import core

    root = Path(core.__file__).resolve().parent.parent
    return {
        "macmesh": getattr(core, "__version__", None),
        "worker_hash": tree_hash(root),
        "python": platform.python_version(),
        "executable": sys.executable,
        "mlx": package_version("mlx", "mlx.core"),
        "mlx_lm": package_version("mlx-lm", "mlx_lm"),
        # What a CPU rank there needs (core.run.job.cpu): its system, cores and fast BLAS.
        "system": platform.system(),
        "cores": os.cpu_count(),
        "blas": find_openblas(),
        # Built here once, when a C compiler is: ring waits that sleep (Linux).
        "ring_wait": ringwait.library(),
    }


def print_version() -> int:
    print(json.dumps(version_info()), flush=True)
    return 0
