"""The environment variables MacMesh reads, by name: one home for them.

Standard library only and light to import, so the GUI, the command line and the core
use these names instead of spelling them again. The worker's own variable stays in
``core.worker.protocol`` (the worker travels alone to every node); it is named here too.
"""

from __future__ import annotations

from core.worker.hubblob import ENV_CONNECT_TIMEOUT, ENV_DEADLINE, ENV_MIN_RATE, ENV_READ_TIMEOUT
from core.worker.protocol import ENV_TELEMETRY

ENV_CACHE_DIR = "MACMESH_CACHE_DIR"  # this machine's cache: demo model, run logs, hashes
ENV_CONFIG_DIR = "MACMESH_CONFIG_DIR"  # settings and known hosts
ENV_LOG_DIR = "MACMESH_LOG_DIR"  # per-run folders with each rank's log
ENV_DATA_DIR = "MACMESH_DATA_DIR"  # what the person made: run history, API keys (and adapters)
ENV_SSH_DIR = "MACMESH_SSH_DIR"  # instead of ~/.ssh: keys and known_hosts
ENV_REMOTE_CACHE = "MACMESH_REMOTE_CACHE"  # the nodes' cache folder; ``{host}`` is replaced
# "0": CPU ranks (Linux) keep MLX's bundled reference BLAS and their quantized weights, to
# compare with the fast path (a preloaded OpenBLAS, float32 weights) or to step around it.
ENV_CPU_FAST = "MACMESH_CPU_FAST"

# The Hub's bounds (connect and read timeouts, a deadline, a minimum rate for a body)
# are named in ``core.worker.hubblob``, which travels to the nodes alone.

__all__ = [
    "ENV_CACHE_DIR",
    "ENV_CONFIG_DIR",
    "ENV_CONNECT_TIMEOUT",
    "ENV_CPU_FAST",
    "ENV_DATA_DIR",
    "ENV_DEADLINE",
    "ENV_LOG_DIR",
    "ENV_MIN_RATE",
    "ENV_READ_TIMEOUT",
    "ENV_REMOTE_CACHE",
    "ENV_SSH_DIR",
    "ENV_TELEMETRY",
]
