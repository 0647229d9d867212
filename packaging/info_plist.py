"""MacMesh.app's Info.plist, generated from the code so it cannot drift from it.

``python packaging/info_plist.py OUT.plist`` writes it; the PyInstaller spec
passes ``info_plist()`` to its BUNDLE step. The Bonjour service types come from
``core.cluster.discovery`` (every type browsed or published): without them in
``NSBonjourServices``, macOS 15+ lets the app browse nothing, silently.

Not importable as ``packaging.*`` (that name belongs to the PyPA library):
load this file by path.
"""

from __future__ import annotations

import plistlib
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.cluster import discovery  # noqa: E402

APP_NAME = "MacMesh"
BUNDLE_ID = "app.macmesh.MacMesh"
ICON_FILE = "MacMesh.icns"
CATEGORY = "public.app-category.developer-tools"
#: macOS 14 (Sonoma) is the oldest release MLX supports. RDMA over Thunderbolt
#: needs 26.2, but a cluster of older Macs still runs pipeline jobs over TCP (the
#: ring backend), and the app itself tells a node's owner to update for RDMA: so
#: the app runs on what MLX runs on. A build whose mlx wheel is tagged for a newer
#: macOS raises it (see ``minimum_macos``).
MIN_MACOS = "14.0"

LOCAL_NETWORK_USAGE = (
    "MacMesh looks for the other Macs on your network and Thunderbolt cables "
    "(the ones with Remote Login on) so it can run one AI model across all of them. "
    "It only connects to the Macs you choose."
)


def version() -> str:
    """The version in pyproject.toml (the source of truth), else the installed one."""
    pyproject = ROOT / "pyproject.toml"
    if pyproject.is_file():
        return tomllib.loads(pyproject.read_text())["project"]["version"]
    return metadata.version("macmesh")


def bonjour_services() -> list[str]:
    """Every type MacMesh browses or publishes, as Info.plist spells them (``_ssh._tcp``)."""
    types = {*discovery.SERVICE_TYPES, discovery.MACMESH}
    return sorted(t.removesuffix(".").removesuffix(".local") for t in types)


def minimum_macos(default: str = MIN_MACOS, wheel: str | None = None) -> str:
    """``default``, or the macOS the bundled mlx wheel was built for when that is newer
    (``wheel``: the text of mlx's WHEEL metadata; read from the installed mlx if None)."""
    if wheel is None:
        try:
            wheel = metadata.distribution("mlx").read_text("WHEEL") or ""
        except metadata.PackageNotFoundError:
            wheel = ""
    found = [(int(a), int(b)) for a, b in re.findall(r"macosx_(\d+)_(\d+)_", wheel)]
    floor = tuple(int(n) for n in default.split("."))
    best = max([floor, *found])
    return f"{best[0]}.{best[1]}"


def info_plist() -> dict:
    """The Info.plist keys MacMesh.app needs (PyInstaller adds the executable's own)."""
    ver = version()
    return {
        "CFBundleName": APP_NAME,
        "CFBundleDisplayName": APP_NAME,
        "CFBundleIdentifier": BUNDLE_ID,
        "CFBundleExecutable": APP_NAME,
        "CFBundlePackageType": "APPL",
        "CFBundleInfoDictionaryVersion": "6.0",
        "NSPrincipalClass": "NSApplication",  # what Qt's Cocoa platform expects
        "CFBundleShortVersionString": ver,
        "CFBundleVersion": ver,
        "CFBundleIconFile": ICON_FILE,
        "CFBundleDevelopmentRegion": "en",
        "LSMinimumSystemVersion": minimum_macos(),
        "LSApplicationCategoryType": CATEGORY,
        "LSArchitecturePriority": ["arm64"],
        "NSHighResolutionCapable": True,
        "NSSupportsAutomaticGraphicsSwitching": True,
        "NSLocalNetworkUsageDescription": LOCAL_NETWORK_USAGE,
        "NSBonjourServices": bonjour_services(),
        "NSHumanReadableCopyright": "Apache-2.0",
    }


def write(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        plistlib.dump(info_plist(), f, sort_keys=True)
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python packaging/info_plist.py OUT.plist")
    print(write(Path(sys.argv[1])))
