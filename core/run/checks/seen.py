"""One node as ``macmesh doctor`` sees it (``core.run.checks.doctor``)."""

from __future__ import annotations

from dataclasses import dataclass

from core.cluster.probe.facts import NodeFacts
from core.cluster.registry import Node, ProbeState
from core.remote.ssh import SSHError
from core.remote.targets import Target


@dataclass(frozen=True)
class Seen:
    """One node as the scanner left it: the registry's node, the SSH failure of its last
    probe (its kind says the fix) and, once ready, where a job would reach it."""

    node: Node
    error: SSHError | None = None
    target: Target | None = None

    @property
    def facts(self) -> NodeFacts | None:
        ready = self.node.probe_state is ProbeState.READY
        return self.node.facts if ready and isinstance(self.node.facts, NodeFacts) else None
