"""Before Qt opens a window on Linux: the system libraries its xcb platform plugin needs.

Qt aborts the whole process with "could not load the Qt platform plugin xcb" when one of
them is missing, and names none. So ``macmesh`` asks the dynamic linker first (``ldd`` on
the plugin) and, when something is missing, says which Debian/Ubuntu packages bring it and
runs the headless demo instead. No Qt is imported here: the check runs before Qt loads.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$", re.M)
_SONAME = re.compile(r"^(lib.+)\.so\.(\d+)")


def xcb_plugin() -> Path | None:
    """PySide6's xcb platform plugin, found without importing Qt."""
    spec = importlib.util.find_spec("PySide6")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        plugin = Path(folder) / "Qt" / "plugins" / "platforms" / "libqxcb.so"
        if plugin.is_file():
            return plugin
    return None


def missing_libraries(ldd_output: str) -> list[str]:
    """The sonames ``ldd`` reports as ``not found``, once each, in its order."""
    return list(dict.fromkeys(_NOT_FOUND.findall(ldd_output)))


def debian_package(soname: str) -> str:
    """Debian's package for a soname by its naming policy: ``libfoo.so.N`` is in
    ``libfooN``, ``libfoo2.so.N`` (a name ending in a digit) in ``libfoo2-N``."""
    match = _SONAME.match(soname)
    if not match:
        return soname
    name, version = match.groups()
    return f"{name}-{version}" if name[-1].isdigit() else f"{name}{version}"


def uses_xcb(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether Qt will pick its xcb plugin here (X11 or XWayland; not macOS)."""
    if not sys.platform.startswith("linux"):
        return False
    platform = environ.get("QT_QPA_PLATFORM", "")
    if platform:
        return platform.split(":")[0] == "xcb"
    wayland = environ.get("XDG_SESSION_TYPE") == "wayland" and environ.get("WAYLAND_DISPLAY")
    return bool(environ.get("DISPLAY")) and not wayland


def xcb_problem() -> str | None:
    """One message naming what to install when Qt's xcb plugin cannot load; else None."""
    plugin = xcb_plugin()
    ldd = shutil.which("ldd")
    if plugin is None or ldd is None or not uses_xcb():
        return None
    try:
        out = subprocess.run(
            [ldd, str(plugin)], capture_output=True, text=True, timeout=20, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    missing = missing_libraries(out)
    if not missing:
        return None
    packages = " ".join(debian_package(name) for name in missing)
    return (
        f"MacMesh's window needs system libraries this machine lacks ({', '.join(missing)}). "
        f"Install them with: sudo apt-get install {packages}"
    )
