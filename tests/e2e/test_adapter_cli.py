"""`macmesh demo --headless --adapter` and `macmesh run ... --adapter`: base + adapter on
the ranks answers as mlx-lm's own ``load(adapter_path=...)``; a wrong folder gets one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_cli_run import (
    HOSTS,
    _hosts,
    sshd_host_bins,  # noqa: F401 (the sshd's fixture bins)
)
from tests.e2e.test_cli_run import _macmesh as _run_macmesh
from tests.helpers.adapters import QUESTION, mlx_lm_answer
from tests.helpers.remote import wait_nothing_left
from tests.helpers.sshd import SSHServer

pytestmark = pytest.mark.slow


def _demo(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, MACMESH_CACHE_DIR=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "gui.cli", "demo", "--headless", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.fixture(scope="module")
def expected(tiny_models, tiny_adapter: Path) -> str:
    text = mlx_lm_answer(tiny_models["llama"], tiny_adapter, QUESTION)[1]
    assert text != mlx_lm_answer(tiny_models["llama"], None, QUESTION)[1]
    return text


def test_the_demo_answers_with_the_adapter(
    tiny_models, tiny_adapter: Path, expected: str, tmp_path: Path
) -> None:
    args = ["--model", str(tiny_models["llama"]), "--adapter", str(tiny_adapter)]
    run = _demo([*args, "--prompt", QUESTION, "--max-tokens", "12", "--json"], tmp_path)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["text"] == expected
    assert summary["adapter"] == "Mochi" and summary["adapter_path"] == str(tiny_adapter)
    assert f"With the adapter Mochi ({tiny_adapter})." in run.stderr


def test_the_demo_refuses_a_wrong_folder_in_one_line(tiny_models, tmp_path: Path) -> None:
    run = _demo(["--model", str(tiny_models["llama"]), "--adapter", str(tmp_path)], tmp_path)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == (
        f"macmesh: {tmp_path} is not an adapter folder: it has no adapter_config.json"
    )
    assert "Traceback" not in run.stderr and "Starting" not in run.stderr


@pytest.mark.timeout(900)
def test_run_copies_the_adapter_to_each_node_and_answers_with_it(
    sshd: SSHServer, tmp_path: Path, tiny_models, tiny_adapter: Path, expected: str
) -> None:
    args = [str(tiny_models["llama"]), "--hosts", _hosts(sshd, 2), "--strategy", "tensor"]
    args += ["--backend", "ring", "--adapter", str(tiny_adapter)]
    shown = _run_macmesh([*args, "--show-launch", "--json"], sshd, tmp_path)
    assert shown.returncode == 0, shown.stderr
    command = json.loads(shown.stdout)["command"]
    node_folder = command[command.index("--adapter") + 1]  # rank 0's, on its node
    assert "/models/adapter-mochi-" in node_folder
    run = _run_macmesh(
        [*args, "--prompt", QUESTION, "--max-tokens", "12", "--json"], sshd, tmp_path
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["text"] == expected and summary["adapter"] == "Mochi"
    for address in list(HOSTS)[:2]:
        models = tmp_path / "nodes" / f"{address}:{sshd.port}" / "models"
        [adapter] = [f for f in models.iterdir() if f.name.startswith("adapter-mochi-")]
        assert sorted(p.name for p in adapter.iterdir() if not p.name.startswith(".")) == [
            "adapter_config.json", "adapters.safetensors", "macmesh.json",
        ]  # fmt: skip
    assert node_folder.endswith(adapter.name)
    assert wait_nothing_left(sshd) == []
