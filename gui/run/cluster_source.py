"""Where a plan's nodes are: the demo's simulated Macs (None) or real Macs (Targets).

The Run pane asks this when Start is pressed. The Cluster pane knows which it shows: the
demo cluster, or the scanner's nodes, whose ``Scanner.target(name)`` says how to reach
each. ``MACMESH_REMOTE_CACHE`` (as for ``macmesh run``; ``{host}`` is replaced by the
node's name) sets the folder on every node where models and the worker go.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from core.envvars import ENV_REMOTE_CACHE

if TYPE_CHECKING:
    from core.cluster.probe.facts import NodeFacts
    from core.remote.targets import Target


class ClusterSource(Protocol):
    def targets(self, names: Sequence[str]) -> list[Target] | None:
        """The nodes' targets, None for the demo's local ranks; ValueError if one is not
        ready (its message says why)."""
        ...

    def facts(self, names: Sequence[str]) -> list[NodeFacts]: ...


class PaneSource:
    """The Cluster pane's nodes (``gui.nodes.pane.ClusterPane``: ``is_demo``, ``scanner``)."""

    def __init__(self, pane: Any) -> None:
        self.pane = pane

    def targets(self, names: Sequence[str]) -> list[Target] | None:
        scanner = self.pane.scanner
        if self.pane.is_demo or scanner is None:
            return None
        root = os.environ.get(ENV_REMOTE_CACHE)
        targets = []
        for name in names:
            target = scanner.target(name)  # core.cluster.scanner.NodeNotReady (a ValueError)
            if root and not target.cache_root:
                target = replace(target, cache_root=root.replace("{host}", _safe(name)))
            targets.append(target)
        return targets

    def facts(self, names: Sequence[str]) -> list[NodeFacts]:
        from core.cluster.probe.facts import NodeFacts

        scanner = self.pane.scanner
        if scanner is None:
            return []
        nodes = [scanner.registry.get(name) for name in names]
        return [n.facts for n in nodes if n is not None and isinstance(n.facts, NodeFacts)]


def _safe(name: str) -> str:
    return name.replace("/", "_")
