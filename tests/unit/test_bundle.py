"""core.bundle.worker_python and the frozen entry point's python-like modes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from core import bundle
from core.cluster.probe.facts import NodeFacts

APP = "/Applications/MacMesh.app/Contents/MacOS/MacMesh"
ENTRY = Path(__file__).resolve().parents[2] / "packaging" / "entry.py"


def facts(mlx: str | None, app: str | None) -> NodeFacts:
    return NodeFacts(
        "studio-b", python_executable="/usr/bin/python3", mlx_version=mlx, macmesh_app=app
    )


def test_the_persons_python_wins() -> None:
    assert bundle.worker_python("/opt/py/bin/python3", facts(None, APP)) == "/opt/py/bin/python3"


def test_a_python_with_mlx_runs_the_worker_when_this_is_not_the_app() -> None:
    assert bundle.worker_python(None, facts("0.32.4", APP)) == "/usr/bin/python3"
    assert bundle.worker_python(None, facts("0.32.4", None)) == "/usr/bin/python3"


def test_the_nodes_app_runs_the_worker_when_its_python_has_no_mlx() -> None:
    assert bundle.worker_python(None, facts(None, APP)) == APP
    assert bundle.worker_python(None, facts(None, None)) == "/usr/bin/python3"  # preflight says


def test_inside_the_app_every_node_uses_its_app(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert bundle.worker_python(None, facts("0.32.4", APP)) == APP


def _entry():
    spec = importlib.util.spec_from_file_location("macmesh_entry", ENTRY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_entry_point_runs_code_like_python_c(capsys: pytest.CaptureFixture[str]) -> None:
    argv = sys.argv
    try:
        assert _entry().main(["-c", "import sys; print(__name__, sys.argv)", "x"]) == 0
    finally:
        sys.argv = argv
    assert capsys.readouterr().out == "__main__ ['-c', 'x']\n"


def test_the_entry_point_refuses_other_modules(capsys: pytest.CaptureFixture[str]) -> None:
    assert _entry().main(["-m", "json.tool"]) == 2
    assert "only '-m core.worker'" in capsys.readouterr().err
