"""`macmesh run MODEL --hosts ...`: probe, plan, launch over SSH, answer, stop — as a user
runs it, against simulated Macs (mesh4's studio-a/b/c) behind a real sshd."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.macos.make_bin import make_host_bins
from tests.helpers.ctrlc import interrupt_at
from tests.helpers.remote import wait_nothing_left
from tests.helpers.sshd import SSHServer

pytestmark = pytest.mark.slow

HOSTS = {"127.0.0.2": "studio-a", "127.0.0.3": "studio-b", "127.0.0.4": "studio-c"}


@pytest.fixture(scope="module")
def sshd_host_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_host_bins("mesh4", HOSTS, tmp_path_factory.mktemp("mesh-bins"))


def _env(server: SSHServer, tmp_path: Path) -> dict[str, str]:
    ssh_dir = tmp_path / "ssh"
    if not ssh_dir.exists():
        ssh_dir.mkdir(mode=0o700)
        shutil.copy(server.client_key, ssh_dir / "id_ed25519")
        (ssh_dir / "known_hosts").write_text(server.known_hosts_lines())
    return dict(
        os.environ,
        MACMESH_SSH_DIR=str(ssh_dir),
        MACMESH_REMOTE_CACHE=str(tmp_path / "nodes" / "{host}"),
        MACMESH_CACHE_DIR=str(tmp_path / "cache"),  # this Mac's (the manifest's hash cache)
        SSH_AUTH_SOCK="",
    )


def _macmesh(args: list[str], server: SSHServer, tmp_path: Path) -> subprocess.CompletedProcess:
    env = _env(server, tmp_path)
    return subprocess.run(
        [sys.executable, "-m", "gui.cli", "run", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def _hosts(server: SSHServer, count: int) -> str:
    return ",".join(f"{a}:{server.port}" for a in list(HOSTS)[:count])


@pytest.mark.timeout(900)  # three runs of the command; slow when the 2 cores are shared
def test_run_on_two_hosts_streams_the_answer_and_ends_with_a_summary(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    args = [str(tiny_models["llama"]), "--hosts", _hosts(sshd, 2), "--strategy", "pipeline"]
    run = _macmesh([*args, "--backend", "ring", "--max-tokens", "6", "--json"], sshd, tmp_path)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["nodes"] == 2 and summary["backend"] == "ring"
    assert sorted(summary["hosts"]) == [f"127.0.0.2:{sshd.port}", f"127.0.0.3:{sshd.port}"]
    assert summary["generation_tokens"] == 6 and summary["text"]
    assert summary["text"] in run.stdout.strip().splitlines()[0]  # streamed first
    assert "(ring, as asked)." in run.stderr  # the paths tried: fixture addresses fell back
    for address in ("127.0.0.2", "127.0.0.3"):  # each node got its part, in its own folder
        node = tmp_path / "nodes" / f"{address}:{sshd.port}"
        assert (node / "worker").is_dir()
        [model] = (node / "models").iterdir()
        assert (model / "config.json").is_file() and (model / ".macmesh-manifest.json").is_file()
        assert f"Copying the model to {address}:{sshd.port}: verified" in run.stderr
    assert wait_nothing_left(sshd) == []
    again = _macmesh([*args, "--backend", "ring", "--max-tokens", "6", "--json"], sshd, tmp_path)
    assert again.returncode == 0, again.stderr
    assert "Copying" not in again.stderr  # the nodes have it now
    assert json.loads(again.stdout.strip().splitlines()[-1])["text"] == summary["text"]
    # Someone changed the model on one node: refused, named, never overwritten.
    [model] = (tmp_path / "nodes" / f"127.0.0.3:{sshd.port}" / "models").iterdir()
    with open(model / "config.json", "a") as config:
        config.write(" ")
    changed = (model / "config.json").read_bytes()
    third = _macmesh([*args, "--backend", "ring", "--json"], sshd, tmp_path)
    assert third.returncode == 2
    assert f"on 127.0.0.3:{sshd.port} does not match this model" in third.stderr
    assert "the checks above failed; nothing was started" in third.stderr
    assert "Starting" not in third.stderr and "Traceback" not in third.stderr
    assert (model / "config.json").read_bytes() == changed


def test_auto_picks_jaccl_on_a_full_mesh_and_shows_the_mlx_launch_equivalent(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    args = [str(tiny_models["llama"]), "--hosts", _hosts(sshd, 3), "--strategy", "pipeline"]
    run = _macmesh([*args, "--show-launch", "--json"], sshd, tmp_path)
    assert run.returncode == 0, run.stderr
    launch = json.loads(run.stdout)
    assert launch["command"][:3] == ["mlx.launch", "--hostfile", "hostfile.json"]
    assert launch["command"][5:8] == ["--", "-m", "core.worker"]
    hostfile = launch["hostfile"]
    assert hostfile["backend"] == "jaccl"
    rdma = [host["rdma"] for host in hostfile["hosts"]]
    assert [rdma[i][i] for i in range(3)] == [None] * 3
    assert all(rdma[i][j] for i in range(3) for j in range(3) if i != j)
    assert [bool(host["ips"]) for host in hostfile["hosts"]] == [True, False, False]
    assert "jaccl: RDMA over Thunderbolt, every pair cabled" in run.stderr
    assert wait_nothing_left(sshd) == []  # the probes' watchdogs end within a second


def test_an_unreachable_host_is_named_and_nothing_starts(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    hosts = f"127.0.0.2:{sshd.port},127.0.0.3:1"
    run = _macmesh([str(tiny_models["llama"]), "--hosts", hosts], sshd, tmp_path)
    assert run.returncode == 2
    assert "No SSH server answers on 127.0.0.3 port 1." in run.stderr
    assert "Traceback" not in run.stderr and "Starting" not in run.stderr


# -- Ctrl-C ----------------------------------------------------------------------------------

STAGES = {
    "probe": "probing the hosts",
    "plan": "planning",
    "preflight": "checking the nodes",
    "copy": "copying the model",
    "loading": "loading the model",
    "generation": "generating the answer",
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("hold", list(STAGES))
def test_ctrl_c_at_every_stage_says_one_line_stops_everything_and_exits_130(
    sshd: SSHServer, tmp_path: Path, tiny_models, hold: str
) -> None:
    args = [str(tiny_models["llama"]), "--hosts", _hosts(sshd, 2), "--strategy", "pipeline"]
    args += ["--backend", "ring", "--max-tokens", "100000"]
    run = interrupt_at(hold, ["run", *args], _env(sshd, tmp_path))
    assert run.returncode == 130, run.stderr
    assert "Traceback" not in run.stderr
    [line] = run.macmesh_lines
    assert line.startswith(f"macmesh: interrupted while {STAGES[hold]}; "), run.stderr
    stopped = {"copy": "every copy stopped", "loading": "every rank stopped"}
    stopped["generation"] = stopped["loading"]
    assert stopped.get(hold, "nothing was started") in line
    assert wait_nothing_left(sshd) == []  # no rank, no copy receiver, no probe
    nodes = [tmp_path / "nodes" / f"{address}:{sshd.port}" for address in list(HOSTS)[:2]]
    assert not [d for node in nodes if (node / "jobs").is_dir() for d in (node / "jobs").iterdir()]
    if hold == "copy":  # the copy stopped mid-way: no node has the whole model
        for node in nodes:
            models = node / "models"
            assert not models.is_dir() or all(m.name.endswith(".partial") for m in models.iterdir())
