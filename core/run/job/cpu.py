"""Ranks on MLX's CPU backend (Linux): which BLAS they preload, how many threads, and
the ring-wait library that makes their ring waits sleep (``core.worker.ringwait``).

mlx[cpu] links the reference BLAS; ``core.run.job.mlxenv.cpu_rank_env`` turns a node's fast
BLAS, its cores and the ranks sharing it into a rank's environment. This module finds
those facts: for this machine directly, for a remote node from what its worker's
``--version`` said (``core.remote.ship.NodeSetup.versions``). On a Mac nothing is added:
MLX runs on Metal there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from functools import cache
from typing import Any

from core.envvars import ENV_CPU_FAST
from core.run.job import mlxenv
from core.worker import ringwait
from core.worker.blas import find_openblas


def fast_path(environ: Mapping[str, str] | None = None) -> bool:
    """Whether CPU ranks take the fast path (``MACMESH_CPU_FAST`` is not "0")."""
    value = (os.environ if environ is None else environ).get(ENV_CPU_FAST, "1")
    return value.strip().lower() not in ("0", "false", "no", "off")


@cache
def local_blas() -> dict[str, str] | None:
    """This machine's fast BLAS (``{"path", "source"}``), looked up once."""
    return find_openblas()


@cache
def local_ring_wait() -> dict[str, str]:
    """This machine's ring-wait library (``{"path"}`` or ``{"missing": why}``), built
    once (``core.worker.ringwait``)."""
    return ringwait.library()


def local_cores() -> int:
    """The cores this process may run on (a container's or taskset's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def spare_cores() -> int:
    """The cores no other work holds now: this process's cores less the machine's load
    (its 1-minute average, rounded), at least one. OpenBLAS's threads wait for each
    other by spinning: given more threads than the cores free, a rank slows down by
    several times (measured on this project's 2-core machine with two busy processes:
    a one-rank demo's prompt at 10 tokens/s on 2 BLAS threads, 92 on one)."""
    cores = local_cores()
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available: trust the cores
        return cores
    return max(1, min(cores, cores - round(load)))


def local_cpu_env(local_ranks: int, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The CPU environment of a rank on this machine, one of ``local_ranks`` here: its
    share of the cores that are spare now."""
    if not sys.platform.startswith("linux"):
        return {}
    fast = fast_path()
    blas = local_blas() if fast else None
    ring_wait = local_ring_wait().get("path") if fast else None
    environ = os.environ if base is None else base
    return mlxenv.cpu_rank_env(
        blas["path"] if blas else None,
        spare_cores(),
        local_ranks,
        environ.get("LD_PRELOAD"),
        ring_wait,
        huge_pages=fast,
        tunables=environ.get("GLIBC_TUNABLES"),
    )


def node_cpu_env(versions: Mapping[str, Any], local_ranks: int) -> dict[str, str]:
    """The CPU environment of a rank on a remote node, from its worker's ``--version``."""
    if versions.get("system") != "Linux":
        return {}
    fast = fast_path()
    blas = (versions.get("blas") or {}) if fast else {}
    ring_wait = (versions.get("ring_wait") or {}) if fast else {}
    cores = versions.get("cores") or 1
    return mlxenv.cpu_rank_env(
        blas.get("path"), int(cores), local_ranks, ring_wait=ring_wait.get("path"), huge_pages=fast
    )
