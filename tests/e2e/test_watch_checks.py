"""Every command watches its sessions one way (``core.cli.steps.follow``): a check that
fails on a real Mac is printed with its fix by ``macmesh compare`` and ``macmesh
finetune`` as ``macmesh run`` prints it. The Macs are mesh4's studio-a and studio-b
behind a real sshd; on studio-b the nodes' Python (``--python mm-py``) sees no mlx (it
runs with ``-S``: no site-packages), as on a Mac where mlx was never installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.macos.make_bin import make_host_bins
from tests.helpers.remote import wait_nothing_left
from tests.helpers.sshd import SSHServer
from tests.helpers.tune_data import write_chat_data

pytestmark = pytest.mark.slow

HOSTS = {"127.0.0.2": "studio-a", "127.0.0.3": "studio-b"}
NO_MLX = "127.0.0.3"  # also the Mac compare's one-Mac run picks (equal memory: the last name)
PYTHON = "mm-py"


@pytest.fixture(scope="module")
def sshd_host_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    bins = make_host_bins("mesh4", HOSTS, tmp_path_factory.mktemp("mesh-bins"))
    for address, folder in bins.items():
        flags = " -S" if address == NO_MLX else ""
        script = folder / PYTHON
        script.write_text(f'#!/bin/sh\nexec {sys.executable}{flags} "$@"\n')
        script.chmod(0o755)
    return bins


def _macmesh(command: list[str], server: SSHServer, tmp_path: Path) -> subprocess.CompletedProcess:
    ssh_dir = tmp_path / "ssh"
    if not ssh_dir.exists():
        ssh_dir.mkdir(mode=0o700)
        shutil.copy(server.client_key, ssh_dir / "id_ed25519")
        (ssh_dir / "known_hosts").write_text(server.known_hosts_lines())
    env = dict(
        os.environ,
        MACMESH_SSH_DIR=str(ssh_dir),
        MACMESH_CACHE_DIR=str(tmp_path / "cache"),
        MACMESH_DATA_DIR=str(tmp_path / "home"),
        MACMESH_LOG_DIR=str(tmp_path / "logs"),
        HF_HUB_OFFLINE="1",
        SSH_AUTH_SOCK="",
    )
    hosts = ",".join(f"{a}:{server.port}" for a in HOSTS)
    where = ["--hosts", hosts, "--python", PYTHON, "--cache-root", str(tmp_path / "nodes")]
    return subprocess.run(
        [sys.executable, "-m", "gui.cli", *command, *where],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def _says_the_failed_check(run: subprocess.CompletedProcess, port: int) -> None:
    node = f"{NO_MLX}:{port}"
    err = run.stderr
    assert "Traceback" not in err, err
    assert "Probing 2 host(s)…" in err and "Checking the nodes…" in err
    assert f"[FAIL] {node}'s Python" in err and "has no mlx or mlx-lm" in err, err
    assert f"→ On {node} run `{PYTHON} -m pip install mlx mlx-lm`" in err, err  # its fix
    assert "Not ready: 1 check failed." in err
    assert f"macmesh: A check failed ({node}: {node}'s Python" in err  # the session's detail
    assert "Copying the model to" not in err and "Starting" not in err


@pytest.mark.timeout(600)
def test_compare_prints_the_failed_check_and_its_fix(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    run = _macmesh(["compare", str(tiny_models["llama"]), "--max-tokens", "4"], sshd, tmp_path)
    assert run.returncode == 2, run.stderr
    _says_the_failed_check(run, sshd.port)
    assert f"On one Mac ({NO_MLX}:{sshd.port})…" in run.stderr  # the run named as it began
    assert run.stdout == ""
    assert wait_nothing_left(sshd) == []


@pytest.mark.timeout(600)
def test_finetune_prints_the_failed_check_and_its_fix(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    data = write_chat_data(tmp_path / "data")
    command = ["finetune", str(tiny_models["llama"]), "--data", str(data), "--iters", "2"]
    run = _macmesh(command, sshd, tmp_path)
    assert run.returncode == 1, run.stderr
    _says_the_failed_check(run, sshd.port)
    assert "Training on" not in run.stderr
    assert not list((tmp_path / "home").rglob("*.safetensors"))  # no adapter left behind
    assert wait_nothing_left(sshd) == []
