"""Where a plan's nodes are: the demo's simulated Macs or real Macs, as session hosts.

The Run pane asks this when Start is pressed. The Cluster pane knows which it shows: the
demo cluster, or the scanner's nodes, whose ``Scanner.target(name)`` says how to reach
each and whose registry holds the facts the scanner probed (a Start reuses them while
they are fresh). ``MACMESH_REMOTE_CACHE`` (as for ``macmesh run``; ``{host}`` is
replaced by the node's name) sets the folder on every node where models and the worker
go.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from core.envvars import ENV_REMOTE_CACHE

if TYPE_CHECKING:
    from core.run.session import Host
    from gui.cluster.pane import ClusterPane


class ClusterSource(Protocol):
    def hosts(self, names: Sequence[str]) -> list[Host]:
        """The nodes called ``names``: simulated Macs for the demo, else real Macs with
        their targets and known facts; ValueError if one is not ready (its message says
        why)."""
        ...


class PaneSource:
    """The Cluster pane's nodes (``gui.cluster.pane.ClusterPane``: ``is_demo``, ``scanner``,
    ``registry``)."""

    def __init__(self, pane: ClusterPane) -> None:
        self.pane = pane

    def hosts(self, names: Sequence[str]) -> list[Host]:
        from core.run.session import Host

        scanner = self.pane.scanner
        nodes = {name: self.pane.registry.get(name) for name in names}
        facts = {name: node.facts if node is not None else None for name, node in nodes.items()}
        if self.pane.is_demo or scanner is None:
            return [Host(name, None, facts[name]) for name in names]
        root = os.environ.get(ENV_REMOTE_CACHE)
        hosts = []
        for name in names:
            target = scanner.target(name)  # core.cluster.scanner.NodeNotReady (a ValueError)
            if root and not target.cache_root:
                target = replace(target, cache_root=root.replace("{host}", _safe(name)))
            hosts.append(Host(name, target, facts[name]))
        return hosts


def _safe(name: str) -> str:
    return name.replace("/", "_")
