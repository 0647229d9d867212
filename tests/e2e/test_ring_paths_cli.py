"""`macmesh run --show-launch` on simulated Macs without RDMA, cabled with the
Thunderbolt Bridge on one and not the other (tb-mixed): the ring hostfile is on the
Thunderbolt addresses, and the reason says so (issue 18)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.macos.make_bin import make_host_bins
from tests.helpers.remote import wait_nothing_left
from tests.helpers.sshd import SSHServer

pytestmark = pytest.mark.slow

HOSTS = {"127.0.0.2": "studio-s", "127.0.0.3": "studio-t"}


@pytest.fixture(scope="module")
def sshd_host_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_host_bins("tb-mixed", HOSTS, tmp_path_factory.mktemp("tb-mixed-bins"))


@pytest.fixture(scope="module")
def sshd_addresses() -> tuple[str, ...]:
    return tuple(HOSTS)


def _macmesh(args: list[str], server: SSHServer, tmp_path: Path) -> subprocess.CompletedProcess:
    ssh_dir = tmp_path / "ssh"
    ssh_dir.mkdir(mode=0o700)
    shutil.copy(server.client_key, ssh_dir / "id_ed25519")
    (ssh_dir / "known_hosts").write_text(server.known_hosts_lines())
    env = dict(
        os.environ,
        MACMESH_SSH_DIR=str(ssh_dir),
        MACMESH_REMOTE_CACHE=str(tmp_path / "nodes" / "{host}"),
        MACMESH_CACHE_DIR=str(tmp_path / "cache"),
        SSH_AUTH_SOCK="",
    )
    return subprocess.run(
        [sys.executable, "-m", "gui.cli", "run", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_show_launch_without_rdma_rings_over_the_thunderbolt_addresses(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    hosts = ",".join(f"{a}:{sshd.port}" for a in HOSTS)
    args = [str(tiny_models["llama"]), "--hosts", hosts, "--strategy", "pipeline"]
    run = _macmesh([*args, "--show-launch", "--json"], sshd, tmp_path)
    assert run.returncode == 0, run.stderr
    launch = json.loads(run.stdout)
    hostfile = launch["hostfile"]
    assert hostfile["backend"] == "ring"
    ips = {host["ssh"]: host["ips"] for host in hostfile["hosts"]}
    assert ips == {"127.0.0.2": ["169.254.124.124"], "127.0.0.3": ["169.254.141.142"]}
    assert "over Thunderbolt (bridge0)" in run.stderr and "over Thunderbolt (en2)" in run.stderr
    assert "RDMA is not used: RDMA over Thunderbolt is turned off" in run.stderr
    assert "Traceback" not in run.stderr
    assert wait_nothing_left(sshd) == []
