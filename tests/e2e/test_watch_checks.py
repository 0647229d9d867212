"""Every command watches its sessions one way (``core.cli.steps.follow``): a check that
fails on a real Mac is printed with its fix by ``macmesh compare`` and ``macmesh
finetune`` as ``macmesh run`` prints it. The Macs are mesh4's studio-a and studio-b
behind a real sshd; on studio-b the nodes' Python (``--python mm-py``) sees no mlx (it
runs with ``-S``: no site-packages), as on a Mac where mlx was never installed
(``tests.helpers.no_mlx``, shared with the window's tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.no_mlx import (  # noqa: F401 (the module's sshd: these Macs)
    NoMlxMacs,
    no_mlx_macs,
    sshd_addresses,
    sshd_host_bins,
)
from tests.helpers.remote import wait_nothing_left
from tests.helpers.sshd import SSHServer
from tests.helpers.tune_data import write_chat_data

pytestmark = pytest.mark.slow


def _macmesh(command: list[str], server: SSHServer, tmp_path: Path) -> subprocess.CompletedProcess:
    macs = no_mlx_macs(server, tmp_path)
    return subprocess.run(
        [sys.executable, "-m", "gui.cli", *command, *macs.cli_arguments()],
        capture_output=True,
        text=True,
        timeout=300,
        env=macs.subprocess_env(tmp_path),
    )


def _says_the_failed_check(run: subprocess.CompletedProcess, macs: NoMlxMacs) -> None:
    node = macs.node
    err = run.stderr
    assert "Traceback" not in err, err
    assert "Probing 2 host(s)…" in err and "Checking the nodes…" in err
    assert f"[FAIL] {node}'s Python" in err and macs.problem in err, err
    assert f"→ {macs.fix}" in err, err  # its fix
    assert "Not ready: 1 check failed." in err
    assert "Copying the model to" not in err and "Starting" not in err


@pytest.mark.timeout(600)
def test_run_prints_the_failed_check_and_its_fix(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    """What compare and finetune are held to: ``macmesh run`` on the same Macs."""
    run = _macmesh(["run", str(tiny_models["llama"]), "--max-tokens", "4"], sshd, tmp_path)
    assert run.returncode == 2, run.stderr
    _says_the_failed_check(run, no_mlx_macs(sshd, tmp_path))
    assert run.stderr.endswith("macmesh: the checks above failed; nothing was started\n")
    assert run.stdout == ""
    assert wait_nothing_left(sshd) == []


@pytest.mark.timeout(600)
def test_compare_prints_the_failed_check_and_its_fix(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    run = _macmesh(["compare", str(tiny_models["llama"]), "--max-tokens", "4"], sshd, tmp_path)
    assert run.returncode == 2, run.stderr
    macs = no_mlx_macs(sshd, tmp_path)
    _says_the_failed_check(run, macs)
    assert f"On one Mac ({macs.node})…" in run.stderr  # the run named as it began
    assert f"macmesh: A check failed ({macs.node}: {macs.node}'s Python" in run.stderr
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
    macs = no_mlx_macs(sshd, tmp_path)
    _says_the_failed_check(run, macs)
    assert f"macmesh: A check failed ({macs.node}: {macs.node}'s Python" in run.stderr
    assert "Training on" not in run.stderr
    assert not list((tmp_path / "home").rglob("*.safetensors"))  # no adapter left behind
    assert wait_nothing_left(sshd) == []
