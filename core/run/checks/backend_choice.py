"""Which backend a job runs on, and for ring, over which path between each pair of
neighbours (docs/design.md, Launching; issue 18).

jaccl when every pair of ranks is cabled with RDMA on, jaccl-ring when each rank and the
next are, else ring: over the fastest path between each rank and its left neighbour
(``core.cluster.ringpath``), with the reason said plainly and, where a setting stands
between the ring and a faster path, the change offered (``core.cluster.netchange``:
shown with its undo, applied only when the person asks). Pure: preflight
(``core.run.checks.preflight``) calls it on probed facts and tries the chosen paths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from core.cluster.netchange import NetworkChange, bridge_off_changes, cable_address_changes
from core.cluster.probe.facts import NodeFacts
from core.cluster.rdma import GUIDES, cable_verdict, node_verdict
from core.cluster.ringpath import RingLink, link_dict, ring_addresses, ring_links
from core.cluster.ringpath import summary as path_summary
from core.cluster.topology import build_topology, jaccl_devices
from core.worker.vocab import Backend

Matrix = list[list[str | list[str] | None]]


@dataclass(frozen=True)
class BackendChoice:
    """What the job runs on. ``devices``: jaccl's device matrix in rank order."""

    name: Backend  # jaccl, jaccl-ring or ring
    reason: str
    devices: Matrix | None = None
    problem: str | None = None  # why RDMA is not used (None when it is, or not needed)
    guide: str | None = None  # core.cluster.rdma.GUIDES key that fixes the problem
    # ring: how each rank's left neighbour reaches it (rank order), fastest path first.
    links: tuple[RingLink, ...] = ()
    # Settings a person may change for a faster path (shown, applied only when asked).
    offers: tuple[NetworkChange, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", Backend(self.name))  # a name read from JSON too

    @property
    def addresses(self) -> list[str] | None:
        """ring: the address each rank listens on (rank order); None: each node's own."""
        return ring_addresses(self.links) if self.links else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name.value,
            "reason": self.reason,
            "devices": self.devices,
            "problem": self.problem,
            "guide": self.guide,
            "paths": [link_dict(link) for link in self.links],
            "offers": [offer.to_dict() for offer in self.offers],
        }


def choose_backend(
    nodes: Sequence[NodeFacts],
    requested: Backend | str = Backend.AUTO,
    fallback: Mapping[str, str] | None = None,
) -> BackendChoice:
    """The backend for ranks on ``nodes`` (rank order). jaccl needs a cable with RDMA on
    between every pair of ranks; jaccl-ring between each rank and the next (the ranks'
    order must follow the cabling); otherwise ring, over the fastest path between each
    rank and its left neighbour (``core.cluster.ringpath``: Thunderbolt, Ethernet,
    Wi-Fi, then ``fallback[name]``, the address the node was reached at).
    A requested jaccl that cannot run comes back with ``problem`` set."""
    requested = Backend(requested)
    names = [f.name for f in nodes]
    if len(nodes) < 2:
        return BackendChoice(Backend.RING, "One node: no distributed backend is needed.")
    if requested is Backend.RING:
        links = tuple(ring_links(nodes, fallback))
        offers = tuple(cable_address_changes(links, nodes))
        return BackendChoice(
            Backend.RING, ring_reason(links, asked=True), links=links, offers=offers
        )
    verdicts = [node_verdict(f) for f in nodes]
    off = [v for v in verdicts if not v.on]
    problem, guide, devices = None, None, None
    wanted: Backend | None = None
    if off:
        problem, guide = " ".join(v.reason for v in off), off[0].guide
    else:
        topology = build_topology(nodes)
        by_name = {f.name: f for f in nodes}
        if requested is Backend.AUTO:
            wanted = {"full mesh": Backend.JACCL, "ring": Backend.JACCL_RING}.get(topology.shape)
        else:
            wanted = requested
        if wanted is None:
            problem = (
                f"the Thunderbolt cables form neither a full mesh nor a ring ({topology.verdict})"
            )
        else:
            n = len(names)
            pairs = (
                [(i, j) for i in range(n) for j in range(i + 1, n)]
                if wanted is Backend.JACCL
                else [(i, (i + 1) % n) for i in range(n if n > 2 else 1)]
            )
            for i, j in pairs:
                cables = topology.between(names[i], names[j])
                if not cables:
                    how = (
                        "every pair of Macs" if wanted is Backend.JACCL else "each Mac and the next"
                    )
                    problem = (
                        f"{wanted} needs a Thunderbolt cable between {how}, and none joins "
                        f"{names[i]} and {names[j]}"
                    )
                    break
                verdicts = [cable_verdict(c, by_name) for c in cables]
                if not any(v.on for v in verdicts):
                    problem, guide = verdicts[0].reason, verdicts[0].guide
                    break
            if problem is None:
                try:
                    devices = jaccl_devices(topology, names)
                except ValueError as error:
                    problem = str(error)
    if problem is None and wanted is not None:
        how = "every pair cabled" if wanted is Backend.JACCL else "each Mac cabled to the next"
        return BackendChoice(wanted, f"{wanted}: RDMA over Thunderbolt, {how}.", devices)
    assert problem is not None  # every way here without a backend says why
    problem = problem.rstrip(".")
    see = f" See “{GUIDES[guide]}”." if guide in GUIDES else ""
    if requested is Backend.AUTO:
        links = tuple(ring_links(nodes, fallback))
        reason = f"{ring_reason(links, asked=False)} RDMA is not used: {problem}.{see}"
        changes = cable_address_changes(links, nodes)
        if guide == "thunderbolt-bridge":
            changes += bridge_off_changes(nodes)
        return BackendChoice(Backend.RING, reason, None, problem, guide, links, tuple(changes))
    return BackendChoice(
        requested, f"{requested} cannot run: {problem}.{see}", None, problem, guide
    )


def ring_reason(links: Sequence[RingLink], asked: bool) -> str:
    """ "Ring over Thunderbolt (bridge0) on every link (ring, as asked)." """
    said = path_summary(links) if links else "Ring over each node's network address."
    return f"{said[:-1]} (ring, as asked)." if asked else said


def with_links(choice: BackendChoice, links: tuple[RingLink, ...]) -> BackendChoice:
    """A ring choice with its links replaced (after a check), its reason said again."""
    if choice.problem is None:
        return replace(choice, links=links, reason=ring_reason(links, asked=True))
    see = f" See “{GUIDES[choice.guide]}”." if choice.guide in GUIDES else ""
    reason = f"{ring_reason(links, asked=False)} RDMA is not used: {choice.problem}.{see}"
    return replace(choice, links=links, reason=reason)
