"""The demo cluster: simulated Macs whose ranks run as processes on this machine.

Everything but the Macs is real: the model, the MLX distributed job on the ring backend
over loopback (127.0.0.1, distinct ports, so it works on a Mac too), the planner's
split, the events and the telemetry. Each simulated Mac is the ``NodeFacts`` a probe of
such a Mac would give, so the window, the planner and a Start treat it like any other
node. The fourth has RDMA over Thunderbolt off, as a Mac fresh out of its box does, so a
presenter can show the RDMA guide (its badge opens it) and what the planner says of it.
``core.run.session.Session`` runs its ranks locally and skips what needs SSH (probe,
checks, copy).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from core.cluster.probe.facts import NodeFacts
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
        rdma_devices=("rdma_en2", "rdma_en3", "rdma_en4") if rdma else (),
        simulated=True,
    )


DEMO_MACS = (
    _mac("Studio A", "Mac15,14", "Apple M3 Ultra", 96),
    _mac("Studio B", "Mac16,9", "Apple M4 Max", 64),
    _mac("Studio C", "Mac15,14", "Apple M3 Ultra", 96),
    _mac("Studio D", "Mac16,9", "Apple M4 Max", 64, rdma=False),
)
assert len(DEMO_MACS) == MAX_DEMO_NODES


def demo_facts(count: int) -> list[NodeFacts]:
    """The first ``count`` simulated Macs; ValueError outside 1..MAX_DEMO_NODES."""
    if not 1 <= count <= MAX_DEMO_NODES:
        raise ValueError(f"the demo cluster has 1 to {MAX_DEMO_NODES} Macs, not {count}")
    return list(DEMO_MACS[:count])


def demo_nodes(count: int) -> list[Node]:
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
        for facts in demo_facts(count)
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
