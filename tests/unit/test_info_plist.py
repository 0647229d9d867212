"""MacMesh.app's Info.plist carries what macOS demands, taken from the code.

Without ``NSBonjourServices`` listing every type browsed or published (and
``NSLocalNetworkUsageDescription``), Bonjour on macOS 15+ silently finds nothing.
The types are read from ``core.cluster.discovery`` and from every service-type literal in
the code, never from a copied list.
"""

from __future__ import annotations

import importlib.util
import plistlib
import re
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from core.cluster import discovery

ROOT = Path(__file__).resolve().parents[2]
# A DNS-SD service type as the code writes it: "_name._tcp" (or udp), ".local." or not.
SERVICE_LITERAL = re.compile(r"""["'](_[a-z0-9-]+\._(?:tcp|udp))(?:\.local\.)?["']""")


def _load(name: str) -> ModuleType:
    """packaging/NAME.py by path (``packaging`` is the PyPA library's name)."""
    spec = importlib.util.spec_from_file_location(
        f"macmesh_{name}", ROOT / "packaging" / f"{name}.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def plist(tmp_path_factory: pytest.TempPathFactory) -> dict:
    path = _load("info_plist").write(tmp_path_factory.mktemp("plist") / "Info.plist")
    with path.open("rb") as f:
        return plistlib.load(f)


def _bare(service_type: str) -> str:
    return service_type.removesuffix(".").removesuffix(".local")


def test_every_service_type_discovery_uses_is_declared(plist: dict) -> None:
    used = {_bare(t) for t in (*discovery.SERVICE_TYPES, discovery.MACMESH)}
    assert used <= set(plist["NSBonjourServices"])
    assert "_macmesh._tcp" in plist["NSBonjourServices"]  # the one the app publishes


def test_every_service_type_written_in_the_code_is_declared(plist: dict) -> None:
    found = {
        match
        for folder in ("core", "gui")
        for path in (ROOT / folder).rglob("*.py")
        for match in SERVICE_LITERAL.findall(path.read_text())
    }
    assert found >= {"_ssh._tcp", "_device-info._tcp"}  # the scan does see the code
    assert found <= set(plist["NSBonjourServices"])


def test_the_required_keys(plist: dict) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert plist["CFBundleIdentifier"] == "app.macmesh.MacMesh"
    assert plist["CFBundleShortVersionString"] == plist["CFBundleVersion"] == version
    assert plist["CFBundleExecutable"] == plist["CFBundleName"] == "MacMesh"
    assert plist["CFBundlePackageType"] == "APPL"
    assert plist["CFBundleIconFile"].endswith(".icns")
    assert plist["LSApplicationCategoryType"] == "public.app-category.developer-tools"
    assert plist["NSHighResolutionCapable"] is True
    assert re.fullmatch(r"\d+\.\d+", plist["LSMinimumSystemVersion"])
    assert float(plist["LSMinimumSystemVersion"]) >= 14.0  # MLX's oldest macOS
    description = plist["NSLocalNetworkUsageDescription"]
    assert "Macs" in description and len(description) > 40


@pytest.mark.parametrize(
    ("wheel", "expected"),
    [
        ("Tag: cp311-cp311-manylinux_2_35_x86_64\n", "14.0"),
        ("Tag: cp311-cp311-macosx_13_0_arm64\n", "14.0"),
        ("Tag: cp311-cp311-macosx_15_0_arm64\n", "15.0"),
        ("Tag: cp312-cp312-macosx_26_0_arm64\n", "26.0"),
    ],
)
def test_the_minimum_macos_follows_the_mlx_wheel(wheel: str, expected: str) -> None:
    assert _load("info_plist").minimum_macos("14.0", wheel) == expected
