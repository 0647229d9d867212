"""The probe finds MacMesh.app on a node and asks its worker for its versions.

A fake app stands in for the frozen binary: like the real one (packaging/entry.py) it
runs ``-m core.worker ARGS`` as Python would, so ``--version`` here is the real worker's.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import core
from core.bundle import APP_BINARIES, app_binary, app_binary_candidates, bundle_dir, is_frozen
from core.cluster.probe.facts import local_runner, parse_probe
from core.cluster.probe.parsers import AppVersion, parse_app_version
from core.cluster.probe.script import build_probe_script
from core.cluster.probe.sections import Unknown

ROOT = Path(core.__file__).resolve().parent.parent


def fake_app(home: Path, body: str | None = None) -> Path:
    """``~/Applications/MacMesh.app/Contents/MacOS/MacMesh`` under ``home``."""
    binary = app_binary_candidates(home)[1]
    binary.parent.mkdir(parents=True)
    body = body or f'PYTHONPATH={ROOT} exec {sys.executable} "$@"'
    binary.write_text(f"#!/bin/sh\n{body}\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary


def probe(home: Path):
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "TMPDIR": str(home)}
    return parse_probe("peer", local_runner(env=env)(build_probe_script(sys.executable)))


def test_the_probe_finds_the_app_and_its_worker_version(tmp_path: Path) -> None:
    binary = fake_app(tmp_path)
    facts = probe(tmp_path)
    assert facts.macmesh_app == str(binary)
    assert facts.macmesh_app_version == core.__version__
    assert "macmesh_app" not in facts.unknowns


def test_no_app_is_a_fact_not_an_unknown(tmp_path: Path) -> None:
    facts = probe(tmp_path)
    assert (facts.macmesh_app, facts.macmesh_app_version) == (None, None)
    assert "macmesh_app" not in facts.unknowns and "macmesh_app_version" not in facts.unknowns


def test_a_broken_app_is_unknown_with_its_message(tmp_path: Path) -> None:
    fake_app(tmp_path, "echo 'dyld: Library not loaded: libmlx.dylib' >&2; exit 6")
    facts = probe(tmp_path)
    assert facts.macmesh_app is None
    assert (
        facts.unknowns["macmesh_app"]
        == "MacMesh.app: exit 6: dyld: Library not loaded: libmlx.dylib"
    )


def test_the_app_binary_paths_are_where_macs_install_apps() -> None:
    assert APP_BINARIES[0] == "/Applications/MacMesh.app/Contents/MacOS/MacMesh"
    assert app_binary_candidates("/Users/ana")[1] == Path(
        "/Users/ana/Applications/MacMesh.app/Contents/MacOS/MacMesh"
    )


def test_not_frozen_under_pytest() -> None:
    assert (is_frozen(), app_binary(), bundle_dir()) == (False, None, None)


def test_the_worker_version_line_is_what_the_parser_reads() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "core.worker", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    ).stdout
    parsed = parse_app_version(f"/Applications/MacMesh.app/Contents/MacOS/MacMesh\n{out}")
    data = json.loads(out)
    assert parsed == AppVersion(
        "/Applications/MacMesh.app/Contents/MacOS/MacMesh",
        data["macmesh"],
        data["mlx"],
        data["mlx_lm"],
    )


@pytest.mark.parametrize(
    "text",
    ["", "garbage", '{"python": "3.12"}', "/Applications/X\n{not json"],
)
def test_the_parser_never_raises(text: str) -> None:
    assert isinstance(parse_app_version(text), Unknown)
