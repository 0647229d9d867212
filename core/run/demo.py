"""The demo cluster: simulated Macs whose ranks run as processes on this machine.

Everything but the Macs is real: the model, the MLX distributed job on the ring backend
over loopback (127.0.0.1, distinct ports, so it works on a Mac too), the planner's
split, the events and the telemetry. Each simulated Mac is the ``NodeFacts`` a probe of
such a Mac would give, so the window, the planner and a Start treat it like any other
node. The fourth has RDMA over Thunderbolt off, as a Mac fresh out of its box does, so a
presenter can show the RDMA guide (its badge opens it) and what the planner says of it.

This module is the one description of the demo's simulated hardware (issue 35): the
chips and memory (``DEMO_MACS``), the Thunderbolt 5 ports and the cables of a full mesh
among the Macs shown, with RDMA per port (``demo_facts``: the ports as a probe reads
them, so the cable map, Check my Macs, ``doctor --demo``, Presentation and the estimate
all read the same facts), and the backend (``DEMO_BACKEND``: what runs here, and what
the real Macs would run). ``rdma=False`` is the "demo without RDMA" variant: every Mac
with RDMA off, for showing the RDMA guide.
``core.run.session.Session`` runs its ranks locally and skips what needs SSH (probe,
checks, copy).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.cluster.probe.facts import NodeFacts, ThunderboltPort
from core.settings import MAX_DEMO_NODES
from core.units import GIB

if TYPE_CHECKING:
    from core.cluster.registry import Node


def _mac(name: str, model_id: str, chip: str, memory_gib: int, rdma: bool = True) -> NodeFacts:
    """A Mac Studio on macOS 26.2 with RDMA over Thunderbolt on (or off: ``rdma_ctl``
    says disabled and no ``rdma_*`` device is listed), as its probe reads."""
    return NodeFacts(
        name,
        model_id=model_id,
        machine_name="Mac Studio",
        chip=chip,
        memory_bytes=memory_gib * GIB,
        macos_version="26.2",
        macos_major=26,
        macos_minor=2,
        os_name="Darwin",
        rdma_ctl="enabled" if rdma else "disabled",
        ibv_stack=True,
        rdma_devices=tuple(f"rdma_en{n + 1}" for n in range(1, 5)) if rdma else (),
        simulated=True,
    )


DEMO_MACS = (
    _mac("Studio A", "Mac15,14", "Apple M3 Ultra", 96),
    _mac("Studio B", "Mac16,9", "Apple M4 Max", 64),
    _mac("Studio C", "Mac15,14", "Apple M3 Ultra", 96),
    _mac("Studio D", "Mac16,9", "Apple M4 Max", 64, rdma=False),
)
assert len(DEMO_MACS) == MAX_DEMO_NODES


PORTS_PER_MAC = 4  # a Mac Studio's Thunderbolt 5 ports (the M3 Ultra's rear four)
PORT_GBPS = 80  # a Thunderbolt 5 cable's link
# What the demo's ranks run: MLX's ring over loopback (no Thunderbolt here), whatever the
# simulated Macs' cables would run (``core.run.checks.backend_choice`` on their facts).
DEMO_BACKEND = "ring"
BACKEND_NOTE = (
    "The demo's ranks run MLX's ring backend over this machine's loopback (it has no "
    "Thunderbolt); the backend above is the one the real Macs it simulates would run."
)


def demo_facts(count: int, *, rdma: bool = True) -> list[NodeFacts]:
    """The first ``count`` simulated Macs, cabled as a full mesh of Thunderbolt 5 cables
    (each Mac's ports numbered in its peers' order, the rest free), RDMA per port as a
    probe reads it: a port is active when the Macs at both ends have RDMA on.
    ``rdma=False``: the demo without RDMA (every Mac's off). ValueError outside
    1..MAX_DEMO_NODES."""
    if not 1 <= count <= MAX_DEMO_NODES:
        raise ValueError(f"the demo cluster has 1 to {MAX_DEMO_NODES} Macs, not {count}")
    macs = list(DEMO_MACS[:count])
    if not rdma:
        macs = [replace(m, rdma_ctl="disabled", rdma_devices=()) for m in macs]
    on = {m.name: m.rdma_ctl == "enabled" for m in macs}
    names = [m.name for m in macs]

    def uuid(mac: str, receptacle: int) -> str:
        return f"demo-{names.index(mac) + 1}-port-{receptacle}"

    def receptacle(mac: str, peer: str) -> int:
        return [n for n in names if n != mac].index(peer) + 1

    cabled = []
    for mac in macs:
        ports = []
        for number in range(1, PORTS_PER_MAC + 1):
            peers = [n for n in names if n != mac.name]
            peer = peers[number - 1] if number <= len(peers) else None
            interface = f"en{number + 1}"
            device = f"rdma_{interface}" if on[mac.name] else None
            both = peer is not None and on[mac.name] and on[peer]
            ports.append(
                ThunderboltPort(
                    receptacle=number,
                    bus=f"Thunderbolt bus {number - 1}",
                    domain_uuid=uuid(mac.name, number),
                    interface=interface,
                    rdma_device=device,
                    connected=peer is not None,
                    speed_gbps=PORT_GBPS if peer is not None else None,
                    max_gbps=PORT_GBPS,
                    peer_domain_uuid=uuid(peer, receptacle(peer, mac.name)) if peer else None,
                    peer_model="Mac Studio" if peer else None,
                    peer_name=peer,
                    port_state=None if device is None else "PORT_ACTIVE" if both else "PORT_DOWN",
                )
            )
        cabled.append(
            replace(mac, thunderbolt=tuple(ports), bridge_exists=False, bridge_active=False)
        )
    return cabled


def demo_nodes(count: int, *, rdma: bool = True) -> list[Node]:
    """The simulated Macs as registry nodes (source demo, ready, their facts attached)."""
    from core.cluster.registry import Node, ProbeState, Source

    return [
        Node(
            facts.name,
            is_mac=True,
            model_id=facts.model_id,
            sources=frozenset({Source.DEMO}),
            facts=facts,
            probe_state=ProbeState.READY,
        )
        for facts in demo_facts(count, rdma=rdma)
    ]


def replay_nodes(capture: Path) -> list[Node]:
    """A capture's Macs (``macmesh doctor --capture``) as the demo shows its simulated
    ones: a registry node per captured node, by alias, in the capture's order, its facts
    read back from what its probe printed, in the state the capture found it (a node that
    was not ready says why). Their ranks run on this machine, as the demo's.
    ``core.cluster.capture.CaptureError`` (one line) for a file that is not a capture."""
    from core.cluster.capture import CaptureError, probe_output, read_capture
    from core.cluster.probe.facts import parse_probe
    from core.cluster.registry import Node, ProbeState, Source

    read = read_capture(capture)
    nodes = []
    for said in read.manifest.get("nodes") or []:
        alias = str(said.get("alias", "")) if isinstance(said, dict) else ""
        if not alias:
            raise CaptureError(f"{capture}: a node of its manifest has no alias")
        sections = read.nodes.get(alias)
        facts = parse_probe(alias, probe_output(sections)) if sections else None
        try:
            state = ProbeState(said.get("state"))
        except ValueError:
            state = ProbeState.UNREACHABLE
        if state is ProbeState.READY and facts is None:
            state = ProbeState.UNREACHABLE
        message = str(said.get("message") or "")
        nodes.append(
            Node(
                alias,
                is_mac=None if facts is None else facts.is_macos is not False,
                model_id=facts.model_id if facts is not None else None,
                sources=frozenset({Source.DEMO}),
                facts=replace(facts, simulated=True) if facts is not None else None,
                probe_state=state,
                probe_message=message if state is not ProbeState.READY else "",
            )
        )
    if not nodes:
        raise CaptureError(f"{capture} holds no node")
    return nodes


def demo_model() -> Path:
    """The demo model's folder, converted once into the cache (a few seconds the first
    time: ``needs_preparing`` says whether it will)."""
    from core.model.demo_model import ensure_demo_model

    return ensure_demo_model()


def needs_preparing() -> bool:
    from core.model.demo_model import demo_model_dir, is_complete

    return not is_complete(demo_model_dir())


@dataclass(frozen=True)
class Cabling:
    """The simulated Macs' cables as every view says them (the Cluster pane's map, its
    Presentation copy, Check my Macs, ``doctor --demo``, the History record)."""

    shape: str  # "full mesh", "ring", "incomplete", "single"
    cables: int
    rdma_cables: int  # cables whose both ends have RDMA on

    def words(self) -> str:
        """ "6 cables · RDMA on 3 of 6", as the cable map's summary says it."""
        parts = [f"{self.cables} cable{'s' * (self.cables != 1)}"]
        if self.cables:
            parts.append(
                "RDMA on every cable"
                if self.rdma_cables == self.cables
                else f"RDMA on {self.rdma_cables} of {self.cables}"
                if self.rdma_cables
                else "no RDMA"
            )
        return " · ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "cables": self.cables,
            "rdma_cables": self.rdma_cables,
            "summary": self.words(),
            "ran": f"{DEMO_BACKEND} over loopback",
        }


def cabling(facts: Sequence[NodeFacts]) -> Cabling:
    """The cables among ``facts`` (the demo's, ``demo_facts``), each with its RDMA
    verdict (``core.cluster.rdma.cable_verdict``, as the map colours it)."""
    from core.cluster.rdma import cable_verdict
    from core.cluster.topology import build_topology

    topology = build_topology(list(facts))
    by_name = {f.name: f for f in facts}
    on = sum(cable_verdict(cable, by_name).on for cable in topology.cables)
    return Cabling(topology.shape, len(topology.cables), on)
