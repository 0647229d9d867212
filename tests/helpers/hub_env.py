"""A fake Hub and an environment pointing the real huggingface_hub at it.

``hub`` (a pytest fixture) starts ``FakeHub`` on 127.0.0.1, moves HF_HOME into the
test's folder, turns offline mode off (the Makefile turns it on for every test) both in
the environment, for subprocesses, and in huggingface_hub's constants, which it reads at
import. ``hub_subprocess_env`` is the environment for ``macmesh`` run as a subprocess.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.fake_hub import FakeHub

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    from huggingface_hub import constants

    fake = FakeHub().start()
    hf_home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", fake.url)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "macmesh-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf_home / "hub"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(hf_home / "token"))
    try:
        yield fake
    finally:
        fake.stop()


def hub_subprocess_env(hub: FakeHub, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "0",
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp_path / "hf-home"),
        "MACMESH_CACHE_DIR": str(tmp_path / "macmesh-cache"),
        "MACMESH_CONFIG_DIR": str(tmp_path / "config"),
        **extra,
    }
    for name in ("HF_HUB_CACHE", "HF_TOKEN"):
        if name not in extra:
            env.pop(name, None)
    return env
