"""Probe simulated Macs through a real sshd, each answering from its own fixtures,
then map their cables: the path the app takes from an address to a Thunderbolt map."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from core.cluster.probe.remote import probe_over_ssh
from core.cluster.rdma import node_verdict
from core.cluster.topology import build_topology, jaccl_devices
from core.remote import ssh
from tests.fixtures.macos.make_bin import make_bin
from tests.helpers.sshd import SSHServer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "macos"
HOSTS = {"127.0.0.2": "studio-a", "127.0.0.3": "studio-b", "127.0.0.4": "studio-c"}


@pytest.fixture(scope="module")
def sshd_host_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mesh-bins")
    return {
        address: make_bin(FIXTURES / "mesh4" / host, root / host) for address, host in HOSTS.items()
    }


def _connection(server: SSHServer, address: str, known_hosts: Path) -> ssh.Connection:
    return ssh.Connection(
        address, server.port, known_hosts=known_hosts, ssh_dir=server.client_dir, use_agent=False
    )


def test_three_macs_probed_over_ssh_give_their_facts_and_a_full_mesh(
    sshd: SSHServer, tmp_path: Path
) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(sshd.known_hosts_lines())
    facts = []
    for address, host in HOSTS.items():
        with _connection(sshd, address, known_hosts) as connection:
            facts.append(probe_over_ssh(connection, host, python="macmesh-python"))
    a = facts[0]
    assert a.name == "studio-a" and a.chip == "Apple M3 Ultra"
    assert a.memory_bytes == 512 * 1024**3 and a.macos_version == "26.2"
    assert node_verdict(a).state == "on"
    topology = build_topology(facts)
    assert topology.shape == "full mesh"
    assert len(topology.cables) == 3 and len(topology.stray) == 3  # the cables to studio-d
    matrix = jaccl_devices(topology)
    assert [matrix[i][i] for i in range(3)] == [None, None, None]
    assert all(isinstance(matrix[i][j], str) for i in range(3) for j in range(3) if i != j)
    # Each command's watchdog sleeps in one-second steps: what it leaves ends within a second.
    deadline = time.monotonic() + 3
    while sshd.leftovers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sshd.leftovers() == []


def test_a_mac_whose_probe_lacks_commands_still_reports_the_rest(
    sshd: SSHServer, tmp_path: Path
) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(sshd.known_hosts_lines())
    with _connection(sshd, "127.0.0.2", known_hosts) as connection:
        # A Python path that does not exist on the peer: versions unknown, the rest known.
        facts = probe_over_ssh(connection, "studio-a", python="/nonexistent/python3")
    assert facts.chip == "Apple M3 Ultra"
    assert facts.mlx_version is None and "mlx_version" in facts.unknowns
