"""Where a job's ranks run: one ``Target`` per node, and how to reach it over SSH.

A target is what preflight, the model copy and the remote launcher need to know of a
node, whether it came from Bonjour, a hand-added host or ``macmesh run --hosts``. It
holds no connection: ``connection()`` makes one (tests pass their own ``known_hosts``
and ``ssh_dir``; the app uses the person's ``~/.ssh``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from core.remote.ssh import DEFAULT_TIMEOUT, Connection


@dataclass(frozen=True)
class Target:
    """One node of a job.

    ``host``: what SSH connects to (host name or address). ``address``: the IP the ranks
    use to reach this node (ring hostfile, JACCL coordinator); defaults to ``host``. When
    set, SSH opens its socket there too, and still checks the host key under ``host``.
    ``python``: the interpreter that runs the worker there; None means the same path as
    this machine's (as ``mlx.launch`` does). ``local``: run on this machine without SSH.
    ``cache_root``: the folder on the node where MacMesh keeps copied models and the
    shipped worker; None means the node user's cache (``~/Library/Caches/MacMesh`` on
    macOS, ``~/.cache/macmesh`` elsewhere). Tests give each simulated host its own.
    """

    name: str
    host: str
    port: int = 22
    user: str | None = None
    python: str | None = None
    address: str | None = None
    local: bool = False
    cache_root: str | None = None
    known_hosts: Path | None = None
    ssh_dir: Path | None = None
    timeout: float = DEFAULT_TIMEOUT

    @property
    def rank_address(self) -> str:
        return self.address or self.host

    @property
    def interpreter(self) -> str:
        return self.python or sys.executable

    def connection(self) -> Connection:
        """A new, unopened SSH connection to this node."""
        return Connection(
            self.host,
            self.port,
            self.user,
            known_hosts=self.known_hosts,
            ssh_dir=self.ssh_dir,
            timeout=self.timeout,
            address=self.address,
        )
