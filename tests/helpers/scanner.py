"""A real ``core.cluster.scanner.Scanner`` for the loopback sshd's simulated hosts, which tests
add by hand. Bonjour is left out (``NoBonjour``): other programs on this machine publish
on loopback, and their records are not what these tests are about
(tests/integration/test_scanner.py covers discovery)."""

from __future__ import annotations

from pathlib import Path

from psygnal import Signal

from core.cluster.hosts import HostList
from core.cluster.scanner import Scanner
from tests.helpers.sshd import SSHServer


class NoBonjour:
    """``core.cluster.discovery.Discovery``'s surface, finding nothing."""

    added = Signal(object)
    updated = Signal(object)
    removed = Signal(str)

    def start(self) -> None: ...

    def close(self) -> None: ...

    def peers(self) -> list:
        return []


def hand_added_scanner(server: SSHServer, root: Path, known_hosts: Path, **options) -> Scanner:
    """A scanner reaching ``server``'s hosts with its client key (no agent), its host list
    under ``root``, publishing nothing; ``options`` go to ``Scanner``."""
    return Scanner(
        interfaces=["127.0.0.1"],
        host_list=HostList(root / "hosts.json"),
        known_hosts=known_hosts,
        ssh_dir=server.client_dir,
        publish=False,
        use_agent=False,
        max_workers=2,
        discovery=NoBonjour(),  # type: ignore[arg-type]
        **options,
    )
