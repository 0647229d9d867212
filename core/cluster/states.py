"""Where a node's probe stands, and where a node was found: the cluster's vocabulary.

Standard library only and light to import (``core.cluster.registry`` pulls in zeroconf
through discovery), so the GUI imports these at the top instead of copying their values.
The values are what the registry stores; the words people read are the GUI's.
"""

from __future__ import annotations

from enum import StrEnum


class Source(StrEnum):
    BONJOUR = "bonjour"
    MANUAL = "manual"
    DEMO = "demo"


class ProbeState(StrEnum):
    """Where a node's probe stands; ``Node.probe_message`` says why when it is not ready."""

    NEW = "new"  # not probed yet
    PROBING = "probing"
    READY = "ready"  # facts attached
    UNREACHABLE = "unreachable"  # Remote Login off, no route, timeout, sshd gone ...
    NEEDS_HOST_KEY = "needs-host-key"  # an unknown host key waits for the person's yes
    NEEDS_ACCESS = "needs-access"  # our key is refused: "set up access" with a password
    HOST_KEY_CHANGED = "host-key-changed"  # refused loudly, never connected

    @property
    def busy(self) -> bool:
        """Not settled yet: the probe has not run or is running."""
        return self in (ProbeState.NEW, ProbeState.PROBING)
