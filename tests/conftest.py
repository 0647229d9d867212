"""Shared fixtures. Every test runs with MacMesh's folders in a temporary home."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# a real sshd on loopback "hosts"; simulated Macs in network namespaces (issue 18)
pytest_plugins = ["tests.helpers.prereqs", "tests.helpers.sshd", "tests.helpers.netns"]

# Qt never needs a screen in tests; zeroconf is bound to loopback by each test.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings and logs of one test never reach the user's or another test's."""
    monkeypatch.setenv("MACMESH_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("MACMESH_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("MACMESH_DATA_DIR", str(tmp_path / "data"))


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real SmolLM2-135M-Instruct, converted once per test session."""
    from core.model.demo_model import ensure_demo_model

    return ensure_demo_model(tmp_path_factory.mktemp("demo-cache"))


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random-weight models, one per architecture the worker must shard."""
    from tests.helpers.tiny_models import make_tiny_model

    root = tmp_path_factory.mktemp("tiny-models")
    return {arch: make_tiny_model(root / arch, arch=arch) for arch in ("llama", "qwen3")}


@pytest.fixture(scope="session")
def tiny_adapter(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An mlx-lm LoRA adapter of the tiny llama model (its last 3 of 4 layers), trained
    by mlx-lm's own trainer until its greedy answer differs from the base's."""
    from tests.helpers.adapters import make_adapter

    root = tmp_path_factory.mktemp("tiny-adapter")
    return make_adapter(tiny_models["llama"], root / "mochi", num_layers=3, name="Mochi")
