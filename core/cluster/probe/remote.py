"""Probe a peer over SSH: the same script as ``run_local_probe``, in one round trip.

The script goes to the peer's ``/bin/sh`` on stdin, so nothing is installed or
written there. SSH failures (Remote Login off, key refused, unreachable, host
key unknown or changed, the session lost mid-probe) are raised as
``core.remote.ssh.SSHError`` for the caller to show; everything that goes wrong on the
peer itself becomes an unknown in the returned facts. Output with no section at
all is no probe (a broken shell, a login shell that swallows stdin): ``ProbeFailed``.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.cluster.probe.facts import NodeFacts, parse_probe
from core.cluster.probe.script import build_probe_script
from core.cluster.probe.sections import first_line, probe_failure, split_sections
from core.remote.ssh import Connection, SSHError

PROBE_TIMEOUT_S = 180.0  # system_profiler can take a while on a Mac with many buses


class ProbeFailed(SSHError):
    """The host answered over SSH, but the probe script printed nothing MacMesh can read."""


def probe_over_ssh(
    connection: Connection,
    name: str,
    python: str | Sequence[str] = "python3",
    timeout: float = PROBE_TIMEOUT_S,
) -> NodeFacts:
    """``name``'s facts, gathered through an open (or openable) ``connection``."""
    connection.connect()
    result = connection.run(
        "/bin/sh -s", timeout=timeout, stdin=build_probe_script(python).encode()
    )
    if not split_sections(result.stdout) and probe_failure(result.stdout) is None:
        said = first_line(result.stderr) or f"exit status {result.rc}"
        raise ProbeFailed(
            connection.host,
            f"{connection.host} accepted the connection, but its shell did not run the probe "
            f"({said}). Check that /bin/sh works for that user.",
        )
    return parse_probe(name, result.stdout)
