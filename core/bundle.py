"""MacMesh.app as a place code runs from: this process, or a peer Mac's install.

A frozen app's binary also runs the worker (``MacMesh -m core.worker ...``,
``packaging/entry.py``), so a peer Mac with MacMesh.app installed needs no
Python of its own: its app binary is that node's "python" for the launcher.
The probe looks for the app where people install it (``APP_BINARIES``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

APP_NAME = "MacMesh"
#: The executable inside the bundle, relative to the folder holding MacMesh.app.
BINARY_IN_APP = f"{APP_NAME}.app/Contents/MacOS/{APP_NAME}"
#: Where the app binary is on a Mac, in the order the probe tries them. ``$HOME`` is
#: left for the node's shell to expand: it is that Mac's home, not ours.
APP_BINARIES: tuple[str, ...] = (
    f"/Applications/{BINARY_IN_APP}",
    f"$HOME/Applications/{BINARY_IN_APP}",
)


def is_frozen() -> bool:
    """True inside the packaged app (PyInstaller sets ``sys.frozen``)."""
    return bool(getattr(sys, "frozen", False))


def bundle_dir() -> Path | None:
    """The folder holding the frozen app's code and resources (read-only), or None."""
    meipass = getattr(sys, "_MEIPASS", None)
    return Path(meipass) if is_frozen() and meipass else None


def app_binary() -> Path | None:
    """This app's own binary when frozen (what ranks started here run), else None."""
    return Path(sys.executable) if is_frozen() else None


def app_binary_candidates(home: str | Path) -> list[Path]:
    """``APP_BINARIES`` with ``$HOME`` as ``home``: where a Mac with that home has the app."""
    return [Path(p.replace("$HOME", str(home))) for p in APP_BINARIES]


def worker_python(configured: str | None, facts: Any) -> str | None:
    """The interpreter that runs the worker on a node whose probe gave ``facts``.

    The person's choice first. Then the node's MacMesh.app when this machine runs the
    app too (the same software everywhere) or when the node's Python has no mlx (peers
    then need nothing but the app). Else the Python the probe found (the same path as
    this machine's when the node has it, as ``mlx.launch`` assumes), None when unknown.
    """
    if configured:
        return configured
    app: str | None = getattr(facts, "macmesh_app", None)
    if app and (is_frozen() or not getattr(facts, "mlx_version", None)):
        return app
    python: str | None = getattr(facts, "python_executable", None)
    return python
