"""Targets on the loopback sshd's simulated hosts, and what is left running there."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import psutil

from core.remote.targets import Target
from tests.helpers.sshd import ADDRESSES, SSHServer, session_processes


def loopback_targets(server: SSHServer, root: Path, count: int, **fields) -> list[Target]:
    """``count`` targets named node0, node1, ... on 127.0.0.2, .3, ... (``sshd_targets``)."""
    hosts = {address: f"node{i}" for i, address in enumerate(ADDRESSES[:count])}
    return sshd_targets(server, root, hosts, **fields)


def sshd_targets(server: SSHServer, root: Path, hosts: Mapping[str, str], **fields) -> list[Target]:
    """A target per ``{address: name}`` through ``server``, trusting its host key, each
    with its own cache folder under ``root`` (nothing is written into the real home)."""
    known_hosts = root / "known_hosts"
    if not known_hosts.exists():
        root.mkdir(parents=True, exist_ok=True)
        known_hosts.write_text(server.known_hosts_lines())
    return [
        Target(
            name=name,
            host=address,
            port=server.port,
            known_hosts=known_hosts,
            ssh_dir=server.client_dir,
            cache_root=str(root / f"{name}-cache"),
            **fields,
        )
        for address, name in hosts.items()
    ]


def workers(port: int, rank: int | None = None) -> list[psutil.Process]:
    """Worker processes started by the sshd on ``port`` (optionally one rank's)."""
    found = []
    for proc in session_processes(port):
        try:
            if "core.worker" not in proc.cmdline():
                continue
            if rank is None or proc.environ().get("MLX_RANK") == str(rank):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def wait_nothing_left(server: SSHServer, within: float = 10.0) -> list[psutil.Process]:
    """Poll until no process of the server's sessions runs; what is still there."""
    deadline = time.monotonic() + within
    left = server.leftovers()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = server.leftovers()
    return left
