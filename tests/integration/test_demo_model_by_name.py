"""The demo model found by name (issue 35): ``demo`` (or its own name) in ``plan``,
``models`` and ``run``, converted into the cache folder when it is not yet."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from core.library.resolve import resolve_model
from core.model.demo_model import FOLDER_NAME


@pytest.fixture
def demo_cache(demo_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder holding the converted demo model (copied: no conversion per test)."""
    cache = tmp_path / "cache"
    shutil.copytree(demo_model, cache / "models" / FOLDER_NAME)
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(cache))
    return cache


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gui.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_demo_names_the_demo_model(demo_cache: Path) -> None:
    for name in ("demo", "Demo", FOLDER_NAME, "SmolLM2-135M-Instruct"):
        info = resolve_model(name, to_run=True)
        assert info.path == demo_cache / "models" / FOLDER_NAME, name
        assert info.layers == 30


def test_plan_demo_plans_it_and_models_lists_it(demo_cache: Path) -> None:
    planned = _cli("plan", "demo", "--node", "a:16", "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert plan["verdict"] == "fits" and plan["model"] == FOLDER_NAME
    assert plan["ranks"][0]["node"] == "a" and plan["ranks"][0]["layers"] == 30
    listed = _cli("models")
    assert listed.returncode == 0, listed.stderr
    assert f"{FOLDER_NAME} · llama · 135M params" in listed.stdout
    assert "`demo` names it" in listed.stdout
    entries = json.loads(_cli("models", "--json").stdout)
    assert [e["source"] for e in entries if e["name"] == FOLDER_NAME] == ["demo"]


def test_models_says_how_to_get_the_demo_model_before_it_is_converted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "empty-cache"))
    listed = _cli("models")
    assert listed.returncode == 0, listed.stderr
    assert "not converted yet; `macmesh plan demo`" in listed.stdout
