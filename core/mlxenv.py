"""MLX's environment contract for a rank, as pure data (DESIGN.md section 7).

What ``mlx.launch`` would set up, built here so MacMesh can start ranks
itself, keep each one's status and log, and stop them all.
"""

from __future__ import annotations

import json
import os
import socket
import threading

_handed_out: set[int] = set()
_handed_lock = threading.Lock()


def ring_hostfile(addresses: list[tuple[str, int]]) -> str:
    """The ring backend's hostfile: one entry per rank, each a list of "ip:port"."""
    return json.dumps([[f"{host}:{port}"] for host, port in addresses])


def rank_env(
    rank: int,
    backend: str,
    hostfile: str | None = None,
    base: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment of one rank: the caller's, plus MLX's variables.

    ``MLX_METAL_FAST_SYNCH`` is removed on purpose: MLX's docs warn it can
    deadlock and wedge the GPU.
    """
    env = dict(os.environ if base is None else base)
    env.pop("MLX_METAL_FAST_SYNCH", None)
    env["MLX_RANK"] = str(rank)
    env["PYTHONUNBUFFERED"] = "1"
    if backend == "ring":
        if hostfile is None:
            raise ValueError("the ring backend needs a hostfile")
        env["MLX_HOSTFILE"] = hostfile
    env.update(extra or {})
    return env


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that are free on ``host`` right now.

    The kernel picks them (port 0), all sockets held open together so they
    differ, and a port is never handed out twice by this process, so two jobs
    started by one controller cannot collide. Another program may still take
    a port before the rank binds it: the launcher retries with new ports when
    a rank reports it could not bind.
    """
    sockets = []
    ports: list[int] = []
    try:
        with _handed_lock:
            while len(ports) < count:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind((host, 0))
                port = sock.getsockname()[1]
                if port not in _handed_out:
                    _handed_out.add(port)
                    ports.append(port)
    finally:
        for sock in sockets:
            sock.close()
    return ports
