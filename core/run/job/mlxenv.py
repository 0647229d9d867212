"""MLX's environment contract for a rank, as pure data (docs/design.md, Launching).

What ``mlx.launch`` would set up, built here so MacMesh can start ranks
itself, keep each one's status and log, and stop them all.
"""

from __future__ import annotations

import json
import os
import random
import socket
import threading
from typing import Any

from core.worker.vocab import Backend

_handed_out: set[int] = set()
_handed_lock = threading.Lock()


def ring_hostfile(addresses: list[tuple[str, int]]) -> str:
    """The ring backend's hostfile: one entry per rank, each a list of "ip:port"."""
    return json.dumps([[f"{host}:{port}"] for host, port in addresses])


def jaccl_devices_file(matrix: list[list[str | list[str] | None]]) -> str:
    """``MLX_IBV_DEVICES``'s file: the N x N matrix of RDMA device names (null on the
    diagonal and where no cable joins two nodes)."""
    size = len(matrix)
    if any(len(row) != size for row in matrix) or any(matrix[i][i] for i in range(size)):
        raise ValueError("the device matrix must be square with nothing on its diagonal")
    return json.dumps(matrix)


def rank_env(
    rank: int,
    backend: Backend | str,
    hostfile: str | None = None,
    base: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
    *,
    devices: str | None = None,
    coordinator: str | None = None,
) -> dict[str, str]:
    """The environment of one rank: the caller's, plus MLX's variables.

    ring: ``MLX_HOSTFILE`` (a file of "ip:port" lists). jaccl and jaccl-ring:
    ``MLX_IBV_DEVICES`` (the device matrix file) and ``MLX_JACCL_COORDINATOR``
    (rank 0's "ip:port" on a network every node reaches: Ethernet or Wi-Fi is
    fine), plus ``MLX_JACCL_RING=1`` for jaccl-ring. ``MLX_METAL_FAST_SYNCH``
    is removed on purpose: MLX's docs warn it can deadlock and wedge the GPU.
    """
    env = dict(os.environ if base is None else base)
    for name in ("MLX_METAL_FAST_SYNCH", "MLX_HOSTFILE", "MLX_IBV_DEVICES", "MLX_JACCL_RING"):
        env.pop(name, None)
    env["MLX_RANK"] = str(rank)
    env["PYTHONUNBUFFERED"] = "1"
    backend = Backend(backend)
    if backend is Backend.RING:
        if hostfile is None:
            raise ValueError("the ring backend needs a hostfile")
        env["MLX_HOSTFILE"] = hostfile
    elif backend.is_jaccl:
        if devices is None or coordinator is None:
            raise ValueError("jaccl needs the device matrix and rank 0's coordinator address")
        env["MLX_IBV_DEVICES"] = devices
        env["MLX_JACCL_COORDINATOR"] = coordinator
        if backend is Backend.JACCL_RING:
            env["MLX_JACCL_RING"] = "1"
    env.update(extra or {})
    return env


# glibc >= 2.35: malloc'd memory in transparent huge pages (older glibc ignores it).
HUGE_PAGES_KEY = "glibc.malloc.hugetlb"


def cpu_rank_env(
    blas_path: str | None,
    cores: int,
    local_ranks: int,
    preload: str | None = None,
    ring_wait: str | None = None,
    huge_pages: bool = False,
    tunables: str | None = None,
) -> dict[str, str]:
    """What a rank on MLX's CPU backend (Linux) adds to its environment.

    ``LD_PRELOAD`` of a fast BLAS (``blas_path``; before any ``preload`` already set)
    replaces the reference BLAS that mlx[cpu] links, and the ring-wait library
    (``ring_wait``: ``core.worker.ringwait``) makes the ring's waits sleep; BLAS threads
    are the node's ``cores`` shared among its ``local_ranks``, at least one each, so
    ranks sharing a machine do not oversubscribe it. ``huge_pages`` has glibc's malloc
    ask for transparent huge pages (``GLIBC_TUNABLES``, after the ``tunables`` already
    set): a received message lands in a fresh buffer, and faulting it in 4 KiB pages
    (16,384 for 64 MiB) cost the ring a quarter of its bandwidth on loopback here. On a
    Mac (Metal) the launcher adds none of this.
    """
    threads = str(max(1, cores // max(1, local_ranks)))
    env = {"OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}
    ours = [path for path in (blas_path, ring_wait) if path]
    if ours:
        others = [path for path in (preload or "").split(":") if path and path not in ours]
        env["LD_PRELOAD"] = ":".join([*ours, *others])
    if huge_pages:
        kept = [t for t in (tunables or "").split(":") if t and not t.startswith(HUGE_PAGES_KEY)]
        env["GLIBC_TUNABLES"] = ":".join([*kept, f"{HUGE_PAGES_KEY}=1"])
    return env


def launch_hostfile(
    backend: Backend | str,
    ssh_names: list[str],
    ips: list[list[str]],
    rdma: list[list[str | list[str] | None]] | None = None,
    envs: list[str] | None = None,
) -> dict[str, Any]:
    """The same cluster as ``mlx.launch --hostfile`` reads it, for people who want to
    run a job by hand: ``{"backend", "envs", "hosts": [{"ssh", "ips", "rdma"}]}``."""
    if len(ssh_names) != len(ips) or (rdma is not None and len(rdma) != len(ssh_names)):
        raise ValueError("one ssh name, one list of IPs (and one rdma row) per host")
    hosts = []
    for rank, name in enumerate(ssh_names):
        host: dict[str, Any] = {"ssh": name, "ips": list(ips[rank])}
        if rdma is not None:
            host["rdma"] = list(rdma[rank])
        hosts.append(host)
    return {"backend": Backend(backend).value, "envs": list(envs or []), "hosts": hosts}


def launch_command(hostfile_path: str, python: str, worker_args: list[str]) -> list[str]:
    """The ``mlx.launch`` line equivalent to a MacMesh job (``--`` keeps the worker's
    flags away from mlx.launch, which would otherwise take them for its own)."""
    return [
        "mlx.launch", "--hostfile", hostfile_path, "--python", python, "--",
        "-m", "core.worker", *worker_args,
    ]  # fmt: skip


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


def rank_ports(addresses: list[str]) -> list[int]:
    """One port per rank, for the rank listening on ``addresses[i]``.

    On an address of this machine (the demo, loopback test hosts) the kernel picks a
    free one, as ``free_ports``. A peer's address cannot be tried from here: it gets an
    unused port from the dynamic range, and a rank that cannot bind it makes the
    launcher retry with new ports."""
    ports: list[int] = []
    for address in addresses:
        try:
            ports += free_ports(1, address)
        except OSError:  # not an address of this machine
            ports.append(_unused_dynamic_port())
    return ports


def _unused_dynamic_port() -> int:
    with _handed_lock:
        while True:
            port = random.randint(49152, 65000)
            if port not in _handed_out:
                _handed_out.add(port)
                return port
