"""The observable set of known nodes: Bonjour peers, hosts added by hand, demo Macs, facts.

The registry keeps its inputs (what discovery sees, the manual host list, the demo
cluster, each node's probed facts) and derives the nodes from them with ``merge``, a pure
function; after every change it compares the new nodes with the old and emits the
difference. So a manual host that turns out to be a Bonjour peer becomes one node, and
comes back as a manual node when the peer leaves.

Signals: ``added(node)``, ``updated(node)``, ``removed(name)``. Nodes are keyed by
``name``. They fire on the thread that made the change (zeroconf's browser thread for
Bonjour, the caller's for the rest), with the registry's lock held so every slot sees
changes in the order they happened; slots must be quick and must not wait on another
thread that uses the registry (the GUI's bridge only queues). Removals are emitted
first, so a node that changes its key never shows twice.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from psygnal import Signal

from core.cluster.discovery import BonjourPeer
from core.cluster.hosts import ManualHost
from core.cluster.probe.facts import NodeFacts
from core.cluster.rdma import node_verdict
from core.cluster.states import ProbeState as ProbeState  # re-exported: its old home
from core.cluster.states import Source as Source

if TYPE_CHECKING:
    from core.cluster.discovery import Discovery
    from core.cluster.hosts import HostList


@dataclass(frozen=True)
class Node:
    """One machine MacMesh knows of. ``is_mac`` None: not known yet (a manual host before
    its probe). ``facts`` is what the probe found (``core.cluster.probe``), None until then;
    a demo Mac carries the facts a probe of it would give."""

    name: str
    hostname: str | None = None
    addresses: tuple[str, ...] = ()
    ssh_port: int | None = 22
    user: str | None = None
    is_mac: bool | None = None
    model_id: str | None = None
    darwin: int | None = None
    sources: frozenset[Source] = frozenset()
    is_self: bool = False
    macmesh_version: str | None = None
    facts: NodeFacts | None = None
    probe_state: ProbeState = ProbeState.NEW
    probe_message: str = ""

    @property
    def source(self) -> Source:
        """The main source, for display: Bonjour, else manual, else demo."""
        return next((s for s in Source if s in self.sources), Source.MANUAL)

    @property
    def ssh_host(self) -> str:
        """What to connect to: the host name, else the first address, else the name."""
        return self.hostname or (self.addresses[0] if self.addresses else self.name)

    @property
    def can_ssh(self) -> bool:
        return self.ssh_port is not None

    # What a node row shows (gui/cluster/table_model.NodeRecord); the probe's facts fill it.

    @property
    def chip(self) -> str:
        return (self.facts.chip if self.facts else None) or ""

    @property
    def memory_bytes(self) -> int:
        return (self.facts.memory_bytes if self.facts else None) or 0

    @property
    def macos(self) -> str:
        """The probed macOS version, else the major version Bonjour's Darwin number implies."""
        if self.facts is not None and self.facts.macos_version:
            return self.facts.macos_version
        return str(macos_major(self.darwin)) if self.darwin else ""

    @property
    def rdma(self) -> bool | None:
        """RDMA over Thunderbolt on, by ``core.cluster.rdma.node_verdict`` (None while it
        cannot tell, or before the probe)."""
        if self.facts is None:
            return None
        state = node_verdict(self.facts).state
        return None if state == "unknown" else state == "on"

    @property
    def kind(self) -> str:
        """ "Mac", "Linux" (or another system's name), or "" while not known."""
        if self.is_mac:
            return "Mac"
        return (self.facts.os_name if self.facts else None) or ""


def macos_major(darwin: int) -> int | None:
    """macOS major version from Darwin's (``osxvers``): 20-24 are macOS 11-15, 25 is 26."""
    if darwin >= 25:
        return darwin + 1
    if darwin >= 20:
        return darwin - 9
    return None  # 10.x: older than any Apple silicon Mac runs


def manual_name(host: ManualHost) -> str:
    return host.host if host.port == 22 else f"{host.host}:{host.port}"


def merge(
    peers: Iterable[BonjourPeer],
    manual: Iterable[ManualHost],
    demo: Iterable[Node] = (),
    facts: Mapping[str, NodeFacts] | None = None,
    probes: Mapping[str, tuple[ProbeState, str]] | None = None,
) -> dict[str, Node]:
    """The nodes, by name. A manual host naming a peer (its host name, address or instance
    name) joins that peer's node, and its port and user win (the person knows). Demo
    nodes whose name a real node has are dropped."""
    facts = facts or {}
    nodes: dict[str, Node] = {}
    peer_nodes = [_from_peer(p) for p in peers]
    for node in peer_nodes:
        nodes[node.name] = node
    for host in manual:
        match = next((n for n in peer_nodes if _names_peer(host, n)), None)
        if match is not None:
            node = replace(
                nodes[match.name],
                ssh_port=host.port,
                user=host.user,
                sources=nodes[match.name].sources | {Source.MANUAL},
            )
            nodes[match.name] = node
            continue
        name = manual_name(host)
        if name not in nodes:
            nodes[name] = _from_manual(host, name)
    for node in demo:
        if node.name not in nodes:
            nodes[node.name] = replace(node, sources=node.sources | {Source.DEMO})
    probes = probes or {}
    merged = {}
    for name, node in nodes.items():
        found = facts.get(name, node.facts)  # a demo Mac comes with its facts
        known = (ProbeState.READY, "") if found is not None else None
        state, message = probes.get(name) or known or (node.probe_state, node.probe_message)
        # The probe is the truth about the system; Bonjour's model is only a hint.
        is_macos = found.is_macos if found is not None else None
        merged[name] = replace(
            node,
            facts=found,
            probe_state=ProbeState(state),
            probe_message=message,
            is_mac=node.is_mac if is_macos is None else is_macos,
        )
    return merged


class Registry:
    """The known nodes; feed it with ``follow(discovery)``, ``follow_hosts(host_list)``,
    ``set_demo_nodes`` and ``set_facts``. Thread-safe; see the module doc for threads."""

    added = Signal(Node)
    updated = Signal(Node)
    removed = Signal(str)

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._peers: dict[str, BonjourPeer] = {}
        self._manual: list[ManualHost] = []
        self._demo: list[Node] = []
        self._facts: dict[str, NodeFacts] = {}
        self._probes: dict[str, tuple[ProbeState, str]] = {}
        self._nodes: dict[str, Node] = {}

    def nodes(self) -> list[Node]:
        with self._lock:
            return list(self._nodes.values())

    def get(self, name: str) -> Node | None:
        with self._lock:
            return self._nodes.get(name)

    # -- inputs --------------------------------------------------------------------------

    def peer_seen(self, peer: BonjourPeer) -> None:
        with self._lock:
            self._peers[peer.name.lower()] = peer
            self._refresh()

    def peer_gone(self, name: str) -> None:
        with self._lock:
            if self._peers.pop(name.lower(), None) is not None:
                self._refresh()

    def set_manual_hosts(self, hosts: Iterable[ManualHost]) -> None:
        with self._lock:
            self._manual = list(hosts)
            self._refresh()

    def set_demo_nodes(self, nodes: Iterable[Node]) -> None:
        with self._lock:
            self._demo = list(nodes)
            self._refresh()

    def set_facts(self, name: str, facts: NodeFacts) -> None:
        """Attach a probe's result to the node ``name`` (ignored if it is gone)."""
        with self._lock:
            if name in self._nodes:
                self._facts[name] = facts
                self._refresh()

    def set_probe_state(self, name: str, state: ProbeState, message: str = "") -> None:
        """Say where the probe of ``name`` stands (ignored if the node is gone)."""
        with self._lock:
            if name in self._nodes:
                self._probes[name] = (ProbeState(state), message)
                self._refresh()

    def set_probe_result(
        self, name: str, state: ProbeState, message: str = "", facts: NodeFacts | None = None
    ) -> None:
        """A probe's outcome in one change: its state and its facts (None drops older ones,
        so a node that stops answering shows no stale facts). Ignored if ``name`` is gone."""
        with self._lock:
            if name in self._nodes:
                self._probes[name] = (ProbeState(state), message)
                if facts is None:
                    self._facts.pop(name, None)
                else:
                    self._facts[name] = facts
                self._refresh()

    def follow(self, discovery: Discovery) -> None:
        """Take the peers ``discovery`` knows now, and every change after (call it before
        ``discovery.start()``, so no change can slip between the two)."""
        discovery.added.connect(self.peer_seen)
        discovery.updated.connect(self.peer_seen)
        discovery.removed.connect(self.peer_gone)
        for peer in discovery.peers():
            self.peer_seen(peer)

    def follow_hosts(self, host_list: HostList) -> None:
        host_list.changed.connect(self.set_manual_hosts)
        self.set_manual_hosts(host_list.hosts())

    # -- the difference ------------------------------------------------------------------

    def _refresh(self) -> None:
        new = merge(self._peers.values(), self._manual, self._demo, self._facts, self._probes)
        old, self._nodes = self._nodes, new
        self._facts = {name: f for name, f in self._facts.items() if name in new}
        self._probes = {name: s for name, s in self._probes.items() if name in new}
        for name in sorted(old.keys() - new.keys()):
            self.removed.emit(name)
        for name, node in new.items():
            if name not in old:
                self.added.emit(node)
            elif old[name] != node:
                self.updated.emit(node)


def _from_peer(peer: BonjourPeer) -> Node:
    return Node(
        name=peer.name,
        hostname=peer.hostname,
        addresses=peer.addresses,
        ssh_port=peer.ssh_port,
        is_mac=peer.is_mac,
        model_id=peer.model,
        darwin=peer.osxvers,
        sources=frozenset({Source.BONJOUR}),
        is_self=peer.is_self,
        macmesh_version=peer.macmesh_version,
    )


def _from_manual(host: ManualHost, name: str) -> Node:
    is_address = _is_address(host.host)
    return Node(
        name=name,
        hostname=None if is_address else host.host,
        addresses=(host.host,) if is_address else (),
        ssh_port=host.port,
        user=host.user,
        sources=frozenset({Source.MANUAL}),
    )


def names_node(host: ManualHost, node: Node) -> bool:
    """Does the hand-added ``host`` stand for ``node``: its own node, or the Bonjour node it
    joined (named by its instance name, address or host name)?"""
    if manual_name(host) == node.name:
        return True
    return Source.BONJOUR in node.sources and _names_peer(host, node)


def _names_peer(host: ManualHost, node: Node) -> bool:
    wanted = host.host.lower().rstrip(".")
    if wanted == node.name.lower() or wanted in {a.lower() for a in node.addresses}:
        return True
    hostname = (node.hostname or "").lower().rstrip(".")
    return bool(hostname) and (wanted == hostname or wanted == hostname.removesuffix(".local"))


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
