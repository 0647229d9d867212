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

from tests.helpers.netns import (
    ADMIN_PASSWORD,
    SSH_PORT,
    TwoNetworks,
    namespaces_left,
    two_networks,
)

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


# Runs in the controller's namespace (only it reaches the Macs): `macmesh run
# --change-network`'s helper with a scripted password prompt, a wrong password first.
_APPLY = """
import io, json, sys
from pathlib import Path
from core.cli.netchange import change_network
from core.cluster.netchange import NetworkChange
from core.remote.targets import Target
from core.run.checks.netapply import apply_change

lan, port, ssh_dir, password, step = sys.argv[1:6]
change = NetworkChange(
    "m1", "gives the cable IPv4 addresses",
    ("ifconfig en2 inet 192.168.200.1 netmask 255.255.255.252 alias",),
    ("ifconfig en2 inet 192.168.200.1 -alias",),
)
target = Target("m1", lan, int(port), known_hosts=Path(ssh_dir) / "known_hosts",
                ssh_dir=Path(ssh_dir))
err, asked = io.StringIO(), []
if step == "undo":
    with target.connection() as connection:
        apply_change(connection, change, password, undo=True)
    made = []
else:
    def ask(prompt):
        asked.append(prompt)
        return password
    made = change_network([change], {"m1": target}, err, ask)
print(json.dumps({"made": len(made), "err": err.getvalue(), "asked": asked}))
"""


def _apply(network: TwoNetworks, password: str, step: str = "apply") -> dict:
    mac = network.macs[0]
    argv = [sys.executable, "-c", _APPLY, mac.lan, str(SSH_PORT), str(network.ssh_dir)]
    run = network.run(network.ctl, [*argv, password, step], capture_output=True, text=True,
                      timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_an_offered_change_is_applied_only_with_the_admin_password_and_undone(
    network: TwoNetworks,
) -> None:
    """Step 5: the change runs under sudo with the password on stdin, asked once; a wrong
    password changes nothing and says so; the undo puts things back."""
    mac = network.macs[0]

    def addresses() -> str:
        shown = network.run(mac.name, ["ip", "-4", "addr", "show", "dev", "en2"],
                            capture_output=True, text=True)  # fmt: skip
        return shown.stdout

    wrong = _apply(network, "wrong password")
    assert wrong["made"] == 0 and len(wrong["asked"]) == 1
    assert "Admin password for m1 (used once, not kept)" in wrong["asked"][0]
    assert "the admin password was not accepted" in wrong["err"]
    assert "To change on m1: On m1: `sudo ifconfig en2 inet 192.168.200.1" in wrong["err"]
    assert "192.168.200.1" not in addresses()
    right = _apply(network, ADMIN_PASSWORD)
    assert (
        right["made"] == 1
        and "To undo it: sudo ifconfig en2 inet 192.168.200.1 -alias" in (right["err"])
    )
    assert "inet 192.168.200.1/30" in addresses()
    _apply(network, ADMIN_PASSWORD, "undo")
    assert "192.168.200.1" not in addresses()
    log = (network.root / mac.name / "m1-files" / "sudo.log").read_text()
    assert log.count("-S -p  /bin/sh -c ifconfig en2 inet 192.168.200.1") == 3
    assert ADMIN_PASSWORD not in log and "wrong password" not in log
