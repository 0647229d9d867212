"""Probe a peer over SSH: the same script as ``run_local_probe``, in one round trip.

The script goes to the peer's ``/bin/sh`` on stdin, so nothing is installed or
written there. SSH failures (Remote Login off, key refused, unreachable, host
key unknown or changed) are raised as ``core.ssh.SSHError`` for the caller to
show; everything that goes wrong on the peer itself becomes an unknown in the
returned facts.
"""

from __future__ import annotations

from core.probe.facts import NodeFacts, parse_probe
from core.probe.script import build_probe_script
from core.ssh import Connection

PROBE_TIMEOUT_S = 180.0  # system_profiler can take a while on a Mac with many buses


def probe_over_ssh(
    connection: Connection, name: str, python: str = "python3", timeout: float = PROBE_TIMEOUT_S
) -> NodeFacts:
    """``name``'s facts, gathered through an open (or openable) ``connection``."""
    connection.connect()
    result = connection.run(
        "/bin/sh -s", timeout=timeout, stdin=build_probe_script(python).encode()
    )
    return parse_probe(name, result.stdout)
