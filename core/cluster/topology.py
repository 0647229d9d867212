"""The Thunderbolt graph of a set of Macs, and what MLX needs from it.
(docs/design.md: Flow, Launching.)

A cable is identified the way ``mlx.distributed_config`` and exo identify it: the peer
domain UUID one Mac sees on a bus equals the domain UUID of a bus on the other Mac.
From the cables follow the shape (full mesh, ring, incomplete, with the exact cables a
full mesh still needs), the JACCL device matrix and the ring hostfile. Pure functions
over NodeFacts: no SSH, no settings changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Literal

from core.cluster.probe.facts import NodeFacts, ThunderboltPort

Shape = Literal["single", "full mesh", "ring", "incomplete"]
MLX_RING_PORT = 32323  # mlx.launch's default --starting-port


@dataclass(frozen=True)
class CableEnd:
    node: str
    port: ThunderboltPort

    def describe(self) -> str:
        return f"{self.node} {self.port.label}"


@dataclass(frozen=True)
class Cable:
    a: CableEnd
    b: CableEnd

    @property
    def nodes(self) -> tuple[str, str]:
        return self.a.node, self.b.node

    @property
    def speed_gbps(self) -> int | None:
        """The slower end's live speed (both ends normally agree)."""
        speeds = [s for s in (self.a.port.speed_gbps, self.b.port.speed_gbps) if s is not None]
        return min(speeds) if speeds else None

    @property
    def via(self) -> tuple[str, ...]:
        return self.a.port.via or self.b.port.via

    def end(self, node: str) -> CableEnd:
        return self.a if self.a.node == node else self.b

    def describe(self) -> str:
        via = f" through {', '.join(self.via)}" if self.via else ""
        speed = f", {self.speed_gbps} Gb/s" if self.speed_gbps else ""
        return f"{self.a.describe()} ↔ {self.b.describe()}{via}{speed}"


@dataclass(frozen=True)
class StrayCable:
    """A cable from one of our Macs to a Mac outside the set (or one not probed)."""

    node: str
    port: ThunderboltPort

    def describe(self) -> str:
        peer = self.port.peer_name or self.port.peer_model or "another Mac"
        return f"{self.node} {self.port.label} is cabled to a {peer} that is not in this cluster"


@dataclass(frozen=True)
class MissingCable:
    """A cable a full mesh still needs, with free ports chosen on both Macs (None: none)."""

    a: str
    a_port: int | None
    b: str
    b_port: int | None
    notes: tuple[str, ...] = ()  # why a port could not be chosen

    def __str__(self) -> str:
        a = f"{self.a} port {self.a_port}" if self.a_port is not None else self.a
        b = f"{self.b} port {self.b_port}" if self.b_port is not None else self.b
        note = f" ({'; '.join(self.notes)})" if self.notes else ""
        return f"connect {a} to {b}{note}"


@dataclass(frozen=True)
class Topology:
    nodes: tuple[str, ...]  # in the order given: rank order unless told otherwise
    cables: tuple[Cable, ...]
    shape: Shape
    ring: tuple[str, ...] | None  # an order of all nodes in which neighbours are cabled
    missing: tuple[MissingCable, ...]  # what a full mesh still needs
    stray: tuple[StrayCable, ...] = ()
    notes: tuple[str, ...] = ()  # oddities worth showing (ends that disagree)

    def between(self, a: str, b: str) -> tuple[Cable, ...]:
        """The cables joining a and b, in one fixed order whichever way round it is asked."""
        first = min(a, b, key=self.nodes.index)
        found = [cable for cable in self.cables if set(cable.nodes) == {a, b}]
        return tuple(sorted(found, key=lambda c: _port_key(c.end(first).port)))

    @property
    def verdict(self) -> str:
        """One sentence for people."""
        count = len(self.cables)
        cables = f"{count} cable{'s' if count != 1 else ''}"
        todo = "; ".join(str(m) for m in self.missing)
        if self.shape == "single":
            return "One Mac: no cables needed."
        if self.shape == "full mesh":
            return f"Full mesh: every Mac is cabled to every other ({cables})."
        if self.shape == "ring" and self.ring:
            loop = " – ".join(self.ring)
            return f"Ring: {loop} – back to {self.ring[0]} ({cables}). For a full mesh: {todo}."
        return f"Incomplete ({cables}). For a full mesh: {todo}."


def _port_key(port: ThunderboltPort) -> tuple[int, str, str]:
    return (
        port.receptacle if port.receptacle is not None else 1 << 30,
        port.interface or "",
        port.bus,
    )


def _find_ring(nodes: Sequence[str], linked: set[frozenset[str]]) -> tuple[str, ...] | None:
    """A cycle through every node (the given order if it is one), by backtracking."""
    n = len(nodes)
    if n < 2:
        return None
    if n == 2:
        return tuple(nodes) if frozenset(nodes) in linked else None
    if all(frozenset((nodes[i], nodes[i - 1])) in linked for i in range(n)):
        return tuple(nodes)

    def extend(path: list[str]) -> list[str] | None:
        if len(path) == n:
            return path if frozenset((path[-1], path[0])) in linked else None
        for node in nodes:
            if node not in path and frozenset((path[-1], node)) in linked:
                found = extend([*path, node])
                if found:
                    return found
        return None

    found = extend([nodes[0]])
    return tuple(found) if found else None


def _free_ports(facts: NodeFacts) -> list[int]:
    """Unused receptacles, Thunderbolt 5 ones first, then by number."""
    free = [
        (not (p.max_gbps or 0) > 40, p.receptacle)
        for p in facts.thunderbolt
        if not p.connected and p.receptacle is not None
    ]
    return [receptacle for _, receptacle in sorted(free)]


def build_topology(nodes: Sequence[NodeFacts]) -> Topology:
    """All cables among ``nodes`` (matched by domain UUID), the shape, and what is missing."""
    names = [facts.name for facts in nodes]
    if len(set(names)) != len(names):
        raise ValueError(f"two nodes share a name: {names}")
    owner = {port.domain_uuid: (f.name, port) for f in nodes for port in f.thunderbolt}
    cables: list[Cable] = []
    stray: list[StrayCable] = []
    notes: list[str] = []
    seen: set[frozenset[str]] = set()
    for facts in nodes:
        for port in facts.thunderbolt:
            peer = port.peer_domain_uuid
            if peer is None:
                continue
            if peer not in owner:
                stray.append(StrayCable(facts.name, port))
                continue
            other, other_port = owner[peer]
            key = frozenset((port.domain_uuid, peer))
            if other == facts.name or key in seen:
                continue
            seen.add(key)
            back = other_port.peer_domain_uuid
            if back is not None and back != port.domain_uuid:
                notes.append(
                    f"{facts.name} {port.label} sees {other} {other_port.label}, "
                    f"but that port sees another Mac"
                )
            cables.append(Cable(CableEnd(facts.name, port), CableEnd(other, other_port)))

    linked = {frozenset(cable.nodes) for cable in cables}
    pairs = [pair for pair in combinations(names, 2) if frozenset(pair) not in linked]
    free = {facts.name: _free_ports(facts) for facts in nodes}
    known = {facts.name: bool(facts.thunderbolt) for facts in nodes}
    missing = []
    for a, b in pairs:
        ports: list[int | None] = []
        why: list[str] = []
        for node in (a, b):
            ports.append(free[node].pop(0) if free[node] else None)
            if ports[-1] is None:
                why.append(
                    f"{node} has no free Thunderbolt port"
                    if known[node]
                    else f"{node}'s Thunderbolt ports are unknown"
                )
        missing.append(MissingCable(a, ports[0], b, ports[1], tuple(why)))

    ring = _find_ring(names, linked)
    shape: Shape
    if len(names) == 1:
        shape = "single"
    elif not missing:
        shape = "full mesh"
    elif ring is not None:
        shape = "ring"
    else:
        shape = "incomplete"
    return Topology(
        nodes=tuple(names),
        cables=tuple(cables),
        shape=shape,
        ring=ring,
        missing=tuple(missing),
        stray=tuple(stray),
        notes=tuple(notes),
    )


def _device(end: CableEnd) -> str:
    if end.port.rdma_device is None:
        raise ValueError(
            f"{end.describe()}: networksetup names no interface for it, so its RDMA device "
            "is unknown"
        )
    return end.port.rdma_device


def jaccl_devices(
    topology: Topology, order: Sequence[str] | None = None
) -> list[list[str | list[str] | None]]:
    """``MLX_IBV_DEVICES``: entry [i][j] is the RDMA device on rank i cabled to rank j (a
    list when several cables join them, in the same cable order on both sides), None on
    the diagonal and where no cable exists. Raises ValueError for an unknown device."""
    ranks = list(order or topology.nodes)
    matrix: list[list[str | list[str] | None]] = []
    for me in ranks:
        row: list[str | list[str] | None] = []
        for other in ranks:
            cables = topology.between(me, other) if me != other else ()
            devices = [_device(cable.end(me)) for cable in cables]
            row.append(None if not devices else devices[0] if len(devices) == 1 else devices)
        matrix.append(row)
    return matrix


def ring_hostfile(
    topology: Topology,
    ips: Mapping[tuple[str, str], str],
    order: Sequence[str] | None = None,
    base_port: int = MLX_RING_PORT,
) -> list[list[str]]:
    """``MLX_HOSTFILE`` for the ring backend over Thunderbolt IP: per rank, the
    "ip:port" of its interfaces on the cables to its left neighbour (rank - 1), which is
    where that neighbour connects; ports count up per rank and address, as mlx.launch
    does. ``ips`` maps (node, interface) → that interface's IPv4 address. As many
    connections per rank as the thinnest link of the ring has cables."""
    ranks = list(order or topology.ring or topology.nodes)
    n = len(ranks)
    if n < 2:
        raise ValueError("a ring needs at least two Macs")
    links = [topology.between(ranks[i], ranks[i - 1]) for i in range(n)]
    if not all(links):
        gap = next(i for i in range(n) if not links[i])
        raise ValueError(f"no cable between {ranks[gap - 1]} and {ranks[gap]}: not a ring")
    width = min(len(cables) for cables in links)
    hostfile = []
    port = base_port
    for rank, cables in zip(ranks, links, strict=True):
        entry = []
        for cable in cables[:width]:
            interface = cable.end(rank).port.interface
            ip = ips.get((rank, interface or ""))
            if ip is None:
                raise ValueError(
                    f"no IP address for {rank} {interface or cable.end(rank).port.label}"
                )
            entry.append(f"{ip}:{port}")
            port += 1
        hostfile.append(entry)
    return hostfile
