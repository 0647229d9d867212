"""Which addresses a ring job uses between each pair of neighbours (issue 18).

MLX's ring backend has rank i listen on its hostfile entry and rank i-1 connect there
(checked: ``MLX_RING_VERBOSE=1`` shows "Rank i connecting to i+1"). So for each rank
the question is: at which of its addresses does its left neighbour reach it fastest?
In order: a Thunderbolt cable between the two (the Thunderbolt Bridge's self-assigned
``169.254`` address, or an IPv4 address on the cable's own interface), then a wired
Ethernet both are on, then Wi-Fi, then the address MacMesh reached the node at. Every
choice carries its reason, in words a person can act on.

MLX's ring is IPv4 only (mlx 0.32.4: the hostfile's ``ip:port`` is split at the first
colon and its sockets are AF_INET; see the reference's "ifconfig -a" section), so a
cable that carries only IPv6 link-local addresses (the bridge off) is no path: the
reason says so and ``network_change`` offers the per-cable addresses that make it one.

Pure functions over NodeFacts: nothing is connected to or changed here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from core.cluster.probe.facts import NodeFacts
from core.cluster.probe.ifconfig import IfAddress, NetInterface
from core.cluster.topology import Cable, Topology, build_topology

PathKind = Literal["thunderbolt", "ethernet", "wifi", "address"]
SPEED_ORDER: tuple[PathKind, ...] = ("thunderbolt", "ethernet", "wifi", "address")
_NAMES = {"thunderbolt": "Thunderbolt", "ethernet": "Ethernet", "wifi": "Wi-Fi"}
_OWN = "the address MacMesh reaches it at"
IPV4_ONLY = "MLX's ring backend takes IPv4 only"


@dataclass(frozen=True)
class Path:
    """One way for ``dialer`` to reach ``listener``: the listener's ``address`` on its
    ``interface`` (None for the address it was reached at)."""

    kind: PathKind
    address: str
    interface: str | None = None
    dialer_interface: str | None = None

    @property
    def label(self) -> str:
        """ "Thunderbolt (bridge0)", "Wi-Fi (en1)", "its address 10.0.0.5"."""
        if self.kind == "address":
            return f"{_OWN} ({self.address})"
        return f"{_NAMES[self.kind]} ({self.interface})"


@dataclass(frozen=True)
class RingLink:
    """Rank ``listener`` listens, its left neighbour ``dialer`` connects: the paths
    between them, fastest first (``paths[0]`` is the choice until a check says it does
    not answer), and why each faster kind of path is missing."""

    dialer: str
    listener: str
    paths: tuple[Path, ...]
    skipped: tuple[str, ...] = ()  # why a faster path is not used, fastest first
    failed: tuple[str, ...] = field(default=(), compare=False)  # paths a check found dead

    @property
    def chosen(self) -> Path | None:
        return self.paths[0] if self.paths else None

    @property
    def why(self) -> str:
        """Why faster paths are not used ("" when the fastest kind is)."""
        return "; ".join([*self.failed, *self.skipped])

    @property
    def reason(self) -> str:
        """ "ring over Thunderbolt (bridge0)", or "ring over Wi-Fi (en1): no Thunderbolt
        path between mini-a and mini-c (no cable)"."""
        path = self.chosen
        if path is None:
            return f"no path from {self.dialer} to {self.listener}"
        return f"ring over {path.label}: {self.why}" if self.why else f"ring over {path.label}"

    def without_first(self, why: str) -> RingLink:
        """The next path, once the first did not answer (``why`` says how)."""
        first = self.paths[0]
        note = f"{first.label} {first.address} did not answer from {self.dialer} ({why})"
        return RingLink(
            self.dialer, self.listener, self.paths[1:], self.skipped, (*self.failed, note)
        )


def _carrying_ipv4(interface: NetInterface | None) -> tuple[IfAddress, ...]:
    if interface is None or not interface.carries:
        return ()
    return interface.ipv4


def cable_addresses(facts: NodeFacts, interface: str | None) -> tuple[str, tuple[IfAddress, ...]]:
    """Where a node has IPv4 addresses on the cable at ``interface``: the bridge's when
    the interface is a member of an active bridge (its addresses are on the bridge),
    else the interface's own. Returns (the interface holding them, the addresses)."""
    if interface is None:
        return "?", ()
    bridge = facts.interface("bridge0")
    if bridge is not None and interface in bridge.members and bridge.carries:
        member = facts.interface(interface)
        if member is not None and member.status == "inactive":
            return "bridge0", ()
        return "bridge0", _carrying_ipv4(bridge)
    return interface, _carrying_ipv4(facts.interface(interface))


def _down(facts: NodeFacts, interface: str | None) -> bool:
    found = facts.interface(interface) if interface else None
    return found is not None and not found.carries


def _ipv6_only(facts: NodeFacts, interface: str | None) -> bool:
    found = facts.interface(interface) if interface else None
    return found is not None and bool(found.ipv6) and not found.ipv4


def _thunderbolt(
    dialer: NodeFacts, listener: NodeFacts, cables: Sequence[Cable]
) -> tuple[list[Path], str | None]:
    """Paths over the cables between the two, and why there are none."""
    if not cables:
        if not dialer.thunderbolt or not listener.thunderbolt:
            who = dialer.name if not dialer.thunderbolt else listener.name
            return [], f"{who}'s Thunderbolt ports are unknown"
        return [], f"no Thunderbolt path between {dialer.name} and {listener.name} (no cable)"
    paths: list[Path] = []
    problems: list[str] = []
    for cable in cables:
        mine, theirs = cable.end(dialer.name).port, cable.end(listener.name).port
        held_by, addresses = cable_addresses(listener, theirs.interface)
        dial_on, dial_addresses = cable_addresses(dialer, mine.interface)
        shared = [a for a in addresses if any(a.same_subnet(d) for d in dial_addresses)]
        if shared:
            paths += [Path("thunderbolt", a.ip, held_by, dial_on) for a in shared]
            continue
        down = [
            (facts.name, port.interface)
            for facts, port in ((listener, theirs), (dialer, mine))
            if _down(facts, port.interface)
        ]
        if down:
            who, interface = down[0]
            problem = f"the Thunderbolt cable is down at {who}'s end ({interface} inactive)"
        elif _ipv6_only(listener, theirs.interface) or _ipv6_only(dialer, mine.interface):
            problem = f"the Thunderbolt cable carries only IPv6 link-local addresses ({IPV4_ONLY})"
        elif not addresses or not dial_addresses:
            who = listener.name if not addresses else dialer.name
            problem = f"the Thunderbolt cable has no IPv4 address on {who}'s side"
        else:
            problem = "the Thunderbolt cable's two ends have addresses in different subnets"
        if problem not in problems:
            problems.append(problem)
    return paths, (None if paths else "; ".join(problems))


def _lan(dialer: NodeFacts, listener: NodeFacts) -> list[Path]:
    """Wired Ethernet both are on (the same subnet), then Wi-Fi (either end on it)."""
    found: list[Path] = []
    for theirs in listener.interfaces:
        if theirs.kind not in ("ethernet", "wifi"):
            continue
        for address in _carrying_ipv4(theirs):
            if address.link_local:
                continue
            for mine in dialer.interfaces:
                if mine.kind not in ("ethernet", "wifi"):
                    continue
                if any(address.same_subnet(d) for d in _carrying_ipv4(mine)):
                    kind: PathKind = "wifi" if "wifi" in (theirs.kind, mine.kind) else "ethernet"
                    found.append(Path(kind, address.ip, theirs.name, mine.name))
                    break
    found.sort(key=lambda p: SPEED_ORDER.index(p.kind))
    return found


def link_paths(
    dialer: NodeFacts,
    listener: NodeFacts,
    topology: Topology,
    fallback: str | None = None,
) -> RingLink:
    """Every path from ``dialer`` to ``listener``, fastest first; ``fallback``: the
    address the listener was reached at, last (unless a path already uses it)."""
    tb, tb_problem = _thunderbolt(dialer, listener, topology.between(dialer.name, listener.name))
    lan = _lan(dialer, listener)
    paths = [*tb, *lan]
    skipped = []
    if not tb and tb_problem:
        skipped.append(tb_problem)
    if not tb and not any(p.kind == "ethernet" for p in lan):
        skipped.append(f"no wired Ethernet shared by {dialer.name} and {listener.name}")
    if fallback and all(p.address != fallback for p in paths):
        paths.append(Path("address", fallback))
    unique: list[Path] = []
    for path in paths:
        if all(path.address != p.address for p in unique):
            unique.append(path)
    return RingLink(dialer.name, listener.name, tuple(unique), tuple(skipped))


def ring_links(
    nodes: Sequence[NodeFacts],
    fallback: Mapping[str, str] | None = None,
) -> list[RingLink]:
    """One link per rank, rank order (``nodes``): ``links[i]`` is how rank i-1 reaches
    rank i, so rank i listens on ``links[i].chosen.address``."""
    if len(nodes) < 2:
        return []
    topology = build_topology(nodes)
    fallback = fallback or {}
    return [
        link_paths(nodes[i - 1], nodes[i], topology, fallback.get(nodes[i].name))
        for i in range(len(nodes))
    ]


def ring_addresses(links: Sequence[RingLink]) -> list[str] | None:
    """Each rank's listening address (rank order), or None when a link has no path."""
    chosen = [link.chosen for link in links]
    if any(path is None for path in chosen):
        return None
    return [path.address for path in chosen if path is not None]


def link_dict(link: RingLink) -> dict[str, Any]:
    """A link as JSON: who dials whom, the chosen path and the reason."""
    path = link.chosen
    return {
        "from": link.dialer,
        "to": link.listener,
        "address": path.address if path else None,
        "kind": path.kind if path else None,
        "interface": path.interface if path else None,
        "reason": link.reason,
    }


def summary(links: Sequence[RingLink]) -> str:
    """One sentence for all links: "Ring over Thunderbolt (bridge0) on every link." when
    they agree, else "Ring: a → b over Wi-Fi (en1) (why); b → c over ..."."""
    if not links:
        return "One node: no ring."
    first = links[0]
    if len({(link.chosen, link.why) for link in links}) == 1 or (
        len({(link.chosen.label if link.chosen else None, link.why) for link in links}) == 1
    ):
        label = first.chosen.label if first.chosen else _OWN
        return f"Ring over {label} on every link" + (f": {first.why}." if first.why else ".")
    clauses = []
    for link in links:
        label = link.chosen.label if link.chosen else _OWN
        clauses.append(
            f"{link.dialer} → {link.listener} over {label}" + (f" ({link.why})" if link.why else "")
        )
    return "Ring: " + "; ".join(clauses) + "."
