"""The two-network test (issue 18): two simulated Macs in network namespaces, a LAN
throttled by tc and an unthrottled "Thunderbolt" cable under a bridge. A 2-host ring
job through ``macmesh run`` picks the Thunderbolt addresses; with the cable pulled it
falls back to the LAN and says why. Everything made here is removed after."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.netns import SSH_PORT, TwoNetworks, namespaces_left, two_networks

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoNetworks]:
    with two_networks(tmp_path_factory.mktemp("netns")) as made:
        yield made
    assert namespaces_left() == []


def macmesh_run(
    network: TwoNetworks, args: list[str], tmp_path: Path
) -> subprocess.CompletedProcess:
    """``macmesh run`` in the controller's namespace, against the two Macs."""
    env = dict(
        os.environ,
        MACMESH_SSH_DIR=str(network.ssh_dir),
        MACMESH_REMOTE_CACHE=str(tmp_path / "nodes" / "{host}"),
        MACMESH_CACHE_DIR=str(tmp_path / "cache"),
        SSH_AUTH_SOCK="",
    )
    argv = [sys.executable, "-m", "gui.cli", "run", *args, "--hosts", network.hosts()]
    return network.run(network.ctl, argv, capture_output=True, text=True, timeout=600, env=env)


def wait_no_leftovers(network: TwoNetworks, within: float = 15.0) -> list[int]:
    deadline = time.monotonic() + within
    left = network.leftovers()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = network.leftovers()
    return left


def _summary(run: subprocess.CompletedProcess) -> dict:
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def _backend_check(summary: dict) -> str:
    return next(c["message"] for c in summary["preflight"] if c["name"] == "backend")


@pytest.mark.timeout(900)
def test_the_ring_runs_over_the_cable_and_falls_back_to_the_lan_when_it_is_pulled(
    network: TwoNetworks, tmp_path: Path, tiny_models
) -> None:
    args = [str(tiny_models["llama"]), "--strategy", "pipeline", "--max-tokens", "4", "--json"]
    first = macmesh_run(network, args, tmp_path)
    summary = _summary(first)
    assert summary["backend"] == "ring" and summary["generation_tokens"] == 4
    check = _backend_check(summary)
    assert "over Thunderbolt (bridge0)" in check, check
    assert "169.254.1.1" in check and "169.254.2.2" in check
    assert "RDMA is not used: RDMA over Thunderbolt is turned off" in check
    assert wait_no_leftovers(network) == []

    network.set_thunderbolt(up=False)
    try:
        cut = macmesh_run(network, args, tmp_path)
    finally:
        network.set_thunderbolt(up=True)
    summary = _summary(cut)
    assert summary["generation_tokens"] == 4 and summary["text"]
    check = _backend_check(summary)
    assert "over Ethernet (en0)" in check, check
    m1, m2 = (f"{mac.lan}:{SSH_PORT}" for mac in network.macs)
    fell_back = f"{m1} → {m2} over Ethernet (en0) (Thunderbolt (bridge0) 169.254.2.2 did not"
    assert f"{fell_back} answer from {m1}" in check, check
    assert "10.77.0.1" in check and "10.77.0.2" in check
    assert "Traceback" not in cut.stderr
    assert wait_no_leftovers(network) == []


def test_show_launch_prints_the_thunderbolt_hostfile(
    network: TwoNetworks, tmp_path: Path, tiny_models
) -> None:
    args = [str(tiny_models["llama"]), "--strategy", "pipeline", "--show-launch", "--json"]
    run = macmesh_run(network, args, tmp_path)
    assert run.returncode == 0, run.stderr
    hosts = json.loads(run.stdout)["hostfile"]["hosts"]
    assert [h["ips"] for h in hosts] == [["169.254.1.1"], ["169.254.2.2"]]
    assert [h["ssh"] for h in hosts] == ["10.77.0.1", "10.77.0.2"]
