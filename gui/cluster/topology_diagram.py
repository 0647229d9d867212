"""What the Thunderbolt map shows, in words and states: Macs, cables (ports, speed, RDMA
state by ``core.cluster.rdma.cable_verdict``), the cables a full mesh still needs, the verdict.

Plain data, no Qt: ``cluster_diagram`` makes it from the nodes the Cluster pane shows
(the ready Macs' probed facts, or the demo Macs), ``topology_scene`` places it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from core import units
from core.cluster.probe.facts import NodeFacts, ThunderboltPort
from core.cluster.rdma import cable_verdict, node_verdict
from core.cluster.ringpath import ring_links
from core.cluster.ringpath import summary as ring_summary
from core.cluster.states import ProbeState
from core.cluster.topology import Topology, build_topology

if TYPE_CHECKING:
    from core.cluster.registry import Node

# cable state (core.cluster.rdma.State) → theme colour and legend words
STATE_COLORS = {"on": "success", "off": "warning", "unusable": "text3", "unknown": "text3"}
STATE_WORDS = {"on": "RDMA on", "off": "RDMA off", "unusable": "No RDMA", "unknown": "RDMA unknown"}
MISSING_COLOR = "text2"
SHAPE_WORDS = {
    "full mesh": "Full mesh",
    "ring": "Ring",
    "incomplete": "Incomplete",
    "single": "One Mac",
}
SHAPE_KINDS = {"full mesh": "success", "ring": "accent", "incomplete": "warning", "single": "muted"}


@dataclass(frozen=True)
class DiagramNode:
    name: str
    subtitle: str = ""  # "M3 Ultra · 512 GB"
    is_self: bool = False


@dataclass(frozen=True)
class DiagramCable:
    a: str
    b: str
    a_port: str  # "2"
    b_port: str
    speed: str  # "80 Gb/s"
    state: str  # core.cluster.rdma State: on, off, unusable, unknown
    reason: str = ""

    @property
    def label(self) -> str:
        return f"port {self.a_port} ↔ port {self.b_port} · {self.speed}"


@dataclass(frozen=True)
class DiagramMissing:
    a: str
    b: str
    a_port: str | None
    b_port: str | None
    text: str  # "connect ring-a port 4 to ring-c port 3"


@dataclass(frozen=True)
class Diagram:
    nodes: tuple[DiagramNode, ...]
    cables: tuple[DiagramCable, ...] = ()
    missing: tuple[DiagramMissing, ...] = ()
    shape: str = "incomplete"
    verdict: str = ""
    # Where cables do not all carry RDMA, how a ring job's links would run (issue 18):
    # "Ring over Thunderbolt (bridge0) on every link.", or one line per link.
    ring_paths: tuple[str, ...] = ()


def _port(port: ThunderboltPort) -> str:
    return str(port.receptacle) if port.receptacle is not None else port.bus


def _subtitle(facts: NodeFacts) -> str:
    chip = (facts.chip or facts.machine_name or "").removeprefix("Apple ")
    memory = units.size(facts.memory_bytes) if facts.memory_bytes else ""
    return " · ".join(part for part in (chip, memory) if part)


def diagram_from_topology(
    topology: Topology, facts: Mapping[str, NodeFacts], self_name: str | None = None
) -> Diagram:
    """The map of probed Macs: each cable coloured by ``core.cluster.rdma.cable_verdict``."""
    order = topology.ring if topology.shape == "ring" and topology.ring else topology.nodes
    nodes = tuple(
        DiagramNode(name, _subtitle(facts[name]) if name in facts else "", name == self_name)
        for name in order
    )
    cables = []
    for cable in topology.cables:
        verdict = cable_verdict(cable, facts)
        speed = f"{cable.speed_gbps} Gb/s" if cable.speed_gbps else "speed unknown"
        cables.append(
            DiagramCable(
                cable.a.node,
                cable.b.node,
                _port(cable.a.port),
                _port(cable.b.port),
                speed,
                verdict.state,
                verdict.reason,
            )
        )
    missing = tuple(
        DiagramMissing(
            m.a,
            m.b,
            None if m.a_port is None else str(m.a_port),
            None if m.b_port is None else str(m.b_port),
            str(m),
        )
        for m in topology.missing
    )
    paths: tuple[str, ...] = ()
    if not cables or any(cable.state != "on" for cable in cables):
        paths = ring_notes([facts[name] for name in order if name in facts])
    return Diagram(nodes, tuple(cables), missing, topology.shape, topology.verdict, paths)


def ring_notes(ordered: Sequence[NodeFacts]) -> tuple[str, ...]:
    """The ring's path per link, as probed (Start tries each before the job)."""
    links = ring_links(ordered)
    if len(links) < 2:
        return ()
    text = ring_summary(links)
    if not text.startswith("Ring: "):
        return (text,)
    return tuple(
        f"{link.dialer} → {link.listener}: {link.reason}."
        if link.chosen
        else f"{link.dialer} → {link.listener}: ring over the address each Mac is reached at."
        for link in links
    )


def demo_diagram(nodes: Sequence[Node]) -> Diagram:
    """The demo Macs' map: their simulated ports and cables (``core.run.demo``, the one
    description Check my Macs and ``doctor --demo`` read too), drawn as probed Macs' are,
    each cable by its RDMA verdict; under it, what the demo's ranks really run. Nodes
    without ports (a sketch of N Macs) get a plausible full mesh of Thunderbolt 5 cables,
    a cable with RDMA when both its Macs have it on."""
    facts_of = [getattr(n, "facts", None) for n in nodes]
    probed = [f for f in facts_of if isinstance(f, NodeFacts) and f.thunderbolt]
    if probed and len(probed) == len(nodes):
        from core.run.demo import BACKEND_NOTE

        drawn = diagram_from_topology(build_topology(probed), {f.name: f for f in probed})
        return replace(drawn, ring_paths=(BACKEND_NOTE,))
    names = [n.name for n in nodes]
    facts = {n.name: getattr(n, "facts", None) for n in nodes}  # none: drawn with RDMA on
    rdma_off = {
        name for name, f in facts.items() if f is not None and node_verdict(f).state == "off"
    }
    boxes = tuple(
        DiagramNode(
            n.name,
            " · ".join(
                p
                for p in (
                    n.chip.removeprefix("Apple "),
                    units.size(n.memory_bytes) if n.memory_bytes else "",
                )
                if p
            ),
        )
        for n in nodes
    )

    def port(me: str, other: str) -> str:
        return str([x for x in names if x != me].index(other) + 1)

    def cable(a: str, b: str) -> DiagramCable:
        off = [x for x in (a, b) if x in rdma_off]
        reason = "Simulated Thunderbolt 5 cable" + (
            f"; RDMA is off on {' and '.join(off)}" if off else ""
        )
        state = "off" if off else "on"
        return DiagramCable(a, b, port(a, b), port(b, a), "80 Gb/s", state, reason)

    cables = tuple(cable(a, b) for i, a in enumerate(names) for b in names[i + 1 :])
    count = len(cables)
    shape = "single" if len(names) == 1 else "full mesh"
    verdict = (
        "One Mac: no cables needed."
        if len(names) == 1
        else f"Full mesh: every Mac is cabled to every other ({count} cable{'s' * (count != 1)})."
    )
    return Diagram(boxes, cables, (), shape, verdict)


def cluster_diagram(nodes: Sequence[Node], demo: bool) -> Diagram | None:
    """The map of the nodes a pane shows: the demo's full mesh, or the cables among the
    ready Macs (a Linux host has no Thunderbolt link: it joins over IP). None with
    fewer than two."""
    if demo:
        return demo_diagram(nodes) if len(nodes) > 1 else None
    ready = [
        (n, n.facts)
        for n in nodes
        if n.probe_state is ProbeState.READY
        and n.facts is not None
        and n.facts.is_macos is not False
    ]
    if len(ready) < 2:
        return None
    facts = {f.name: f for _n, f in ready}
    self_name = next((f.name for n, f in ready if n.is_self), None)
    try:
        topology = build_topology(list(facts.values()))
    except ValueError:  # two nodes report the same name: no map rather than a wrong one
        return None
    return diagram_from_topology(topology, facts, self_name)
