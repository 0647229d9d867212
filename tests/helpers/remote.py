"""Targets on the loopback sshd's simulated hosts, and what is left running there."""

from __future__ import annotations

import time
from pathlib import Path

import psutil

from core.targets import Target
from tests.helpers.sshd import ADDRESSES, SSHServer


def loopback_targets(server: SSHServer, root: Path, count: int, **fields) -> list[Target]:
    """``count`` targets on 127.0.0.2, .3, ... through ``server``, each with its own cache
    folder under ``root`` (nothing is written into the real home)."""
    known_hosts = root / "known_hosts"
    if not known_hosts.exists():
        root.mkdir(parents=True, exist_ok=True)
        known_hosts.write_text(server.known_hosts_lines())
    return [
        Target(
            name=f"node{i}",
            host=address,
            port=server.port,
            known_hosts=known_hosts,
            ssh_dir=server.client_dir,
            cache_root=str(root / f"node{i}-cache"),
            **fields,
        )
        for i, address in enumerate(ADDRESSES[:count])
    ]


def workers(port: int, rank: int | None = None) -> list[psutil.Process]:
    """Worker processes started by the sshd on ``port`` (optionally one rank's)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "core.worker" not in (proc.info["cmdline"] or []):
                continue
            env = proc.environ()
            if env.get("SSH_CONNECTION", "").split()[-1:] != [str(port)]:
                continue
            if rank is None or env.get("MLX_RANK") == str(rank):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return [p for p in found if _alive(p)]


def wait_nothing_left(server: SSHServer, within: float = 10.0) -> list[psutil.Process]:
    """Poll until no process of the server's sessions runs; what is still there."""
    deadline = time.monotonic() + within
    left = server.leftovers()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = server.leftovers()
    return left


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
