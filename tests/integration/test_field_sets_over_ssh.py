"""The first-contact fixture sets (issue 27 item 4) probed through a real sshd: a hub seen
from one side only, and two crossed cables between one pair, give the same cable map and
RDMA verdicts over SSH as from their files."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from core.cluster.probe.facts import NodeFacts
from core.cluster.probe.remote import probe_over_ssh
from core.cluster.rdma import cable_verdict
from core.cluster.topology import build_topology, jaccl_devices
from core.remote import ssh
from tests.fixtures.macos.make_bin import make_bin
from tests.helpers.sshd import SSHServer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "macos"
HOSTS = {
    "127.0.0.2": ("tb-hub", "studio-ha"),
    "127.0.0.3": ("tb-hub", "studio-hb"),
    "127.0.0.4": ("two-cables", "studio-y"),
    "127.0.0.5": ("two-cables", "studio-z"),
}


@pytest.fixture(scope="module")
def sshd_addresses() -> tuple[str, ...]:
    return tuple(HOSTS)


@pytest.fixture(scope="module")
def sshd_host_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("field-bins")
    return {
        address: make_bin(FIXTURES / fixture_set / host, root / host)
        for address, (fixture_set, host) in HOSTS.items()
    }


def _probe_all(server: SSHServer, known_hosts: Path) -> dict[str, NodeFacts]:
    facts = {}
    for address, (_, host) in HOSTS.items():
        with ssh.Connection(
            address,
            server.port,
            known_hosts=known_hosts,
            ssh_dir=server.client_dir,
            use_agent=False,
        ) as connection:
            facts[host] = probe_over_ssh(connection, host, python="macmesh-python")
    return facts


def test_a_hub_and_two_crossed_cables_map_the_same_over_ssh(
    sshd: SSHServer, tmp_path: Path
) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(sshd.known_hosts_lines())
    facts = _probe_all(sshd, known_hosts)
    assert all(f.unknowns == {} for f in facts.values()), {n: f.unknowns for n, f in facts.items()}

    hub = build_topology([facts["studio-ha"], facts["studio-hb"]])
    (cable,) = hub.cables
    assert (
        cable.describe() == "studio-ha port 1 ↔ studio-hb port 1 through Thunderbolt Hub, 40 Gb/s"
    )
    verdict = cable_verdict(cable, facts)
    assert verdict.state == "unusable" and verdict.reason.endswith(
        "Fix: take out Thunderbolt Hub: plug a Thunderbolt 5 cable from studio-ha port 1 "
        "straight into studio-hb port 1."
    )

    pair = build_topology([facts["studio-y"], facts["studio-z"]])
    assert [c.describe() for c in pair.cables] == [
        "studio-y port 1 ↔ studio-z port 2, 80 Gb/s",
        "studio-y port 2 ↔ studio-z port 1, 80 Gb/s",
    ]
    assert [cable_verdict(c, facts).state for c in pair.cables] == ["on", "on"]
    assert jaccl_devices(pair) == [
        [None, ["rdma_en2", "rdma_en3"]],
        [["rdma_en3", "rdma_en2"], None],
    ]
    deadline = time.monotonic() + 3
    while sshd.leftovers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sshd.leftovers() == []
