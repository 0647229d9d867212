"""Is RDMA over Thunderbolt usable, per node and per cable (docs/design.md, Probing)?

No single signal is trusted: a node is "on" only when ``rdma_ctl`` says enabled AND
``ibv_devices`` lists rdma_* devices (and no active Thunderbolt Bridge breaks
connection setup); a cable is "on" only when both ends are, it runs at Thunderbolt 5
speed, and ``ibv_devinfo`` shows both ends' ports PORT_ACTIVE. Every verdict that is
not "on" names the guide page (``resources/guides/<id>.md``) that fixes it. RDMA can
only ever be turned on at the Mac itself: MacMesh explains, it never tries remotely.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from core.cluster.probe.facts import NodeFacts, ThunderboltPort
from core.cluster.topology import Cable

State = Literal["on", "off", "unusable", "unknown"]
RDMA_MIN_GBPS = 80  # Thunderbolt 5; Thunderbolt 4 links run at 40 Gb/s and carry no RDMA

GUIDES: dict[str, str] = {
    "rdma-macos27": "Turn on RDMA in System Settings (macOS 27 and later)",
    "rdma-recovery": "Turn on RDMA from Recovery (macOS 26.2 to 26.x)",
    "rdma-update-macos": "Update macOS before turning on RDMA",
    "rdma-restart": "Restart the Mac so RDMA can start",
    "thunderbolt-bridge": "Turn off the Thunderbolt Bridge",
    "thunderbolt4": "Thunderbolt 4 cannot carry RDMA",
}


def guide_resource(guide: str) -> str:
    """The guide's path under resources/ (``gui.resources.resource_path`` opens it)."""
    if guide not in GUIDES:
        raise KeyError(f"no such guide: {guide}")
    return f"guides/{guide}.md"


@dataclass(frozen=True)
class RdmaVerdict:
    state: State
    reason: str  # one sentence a person can act on
    guide: str | None = None  # a key of GUIDES

    @property
    def on(self) -> bool:
        return self.state == "on"


_SEVERITY = {"unusable": 0, "off": 1, "unknown": 2, "on": 3}


def enable_guide(facts: NodeFacts) -> str | None:
    """How to turn RDMA on for this node's macOS: 27+ System Settings, 26.2–26.x
    Recovery, earlier: update first. None when the macOS version is unknown."""
    major, minor = facts.macos_major, facts.macos_minor or 0
    if major is None:
        return None
    if major >= 27:
        return "rdma-macos27"
    if (major, minor) >= (26, 2):
        return "rdma-recovery"
    return "rdma-update-macos"


def _too_old(facts: NodeFacts) -> bool:
    return facts.macos_major is not None and (facts.macos_major, facts.macos_minor or 0) < (26, 2)


def node_verdict(facts: NodeFacts) -> RdmaVerdict:
    """RDMA on one node, from rdma_ctl, ibv_devices, its ports and its bridge."""
    name = facts.name
    if facts.is_macos is False:
        return RdmaVerdict(
            "unusable",
            f"{name} runs {facts.os_name}, not macOS: no RDMA over Thunderbolt; it can join "
            "ring jobs over the network.",
        )
    if facts.thunderbolt_generation == 4:
        return RdmaVerdict(
            "unusable",
            f"{name} has only Thunderbolt 4 ports: RDMA needs Thunderbolt 5, so turning it "
            "on would not help (no need to visit Recovery).",
            "thunderbolt4",
        )
    version = f"macOS {facts.macos_version}" if facts.macos_version else "an older macOS"
    if _too_old(facts) or (facts.rdma_ctl == "absent" and facts.macos_major is None):
        return RdmaVerdict(
            "off",
            f"{name} runs {version}: RDMA over Thunderbolt needs macOS 26.2 or later.",
            "rdma-update-macos",
        )
    if facts.rdma_ctl == "absent":
        return RdmaVerdict("unknown", f"{name} runs {version} but has no rdma_ctl command.")
    if facts.rdma_ctl == "disabled":
        extra = " (a restart may be pending)" if facts.rdma_devices else ""
        return RdmaVerdict(
            "off",
            f"RDMA over Thunderbolt is turned off on {name}{extra}; it can only be turned on "
            "at that Mac.",
            enable_guide(facts),
        )
    if facts.rdma_ctl == "unknown":
        why = facts.unknowns.get("rdma_ctl", "rdma_ctl status could not be read")
        return RdmaVerdict("unknown", f"Cannot tell whether {name} has RDMA on: {why}.")
    if not facts.rdma_devices:
        if facts.ibv_stack is None:
            why = facts.unknowns.get("rdma_devices", "ibv_devices could not be read")
            return RdmaVerdict("unknown", f"RDMA is enabled on {name}, but {why}.")
        if facts.thunderbolt_generation == 5:
            return RdmaVerdict(
                "unusable",
                f"RDMA is enabled on {name} but it lists no RDMA devices: restart it.",
                "rdma-restart",
            )
        return RdmaVerdict(
            "unusable",
            f"RDMA is enabled on {name} but unusable: no RDMA devices (a Thunderbolt 4 Mac, "
            "or a restart is needed).",
            "rdma-restart",
        )
    members = facts.bridge_thunderbolt_members
    if facts.bridge_active and members:
        return RdmaVerdict(
            "unusable",
            f"The Thunderbolt Bridge is active on {name} ({', '.join(members)}): it makes "
            "RDMA connection setup fail (errno 22); turn it off.",
            "thunderbolt-bridge",
        )
    count = len(facts.rdma_devices)
    return RdmaVerdict("on", f"{name} has RDMA over Thunderbolt on ({count} RDMA devices).")


def _worst(verdicts: Sequence[RdmaVerdict]) -> RdmaVerdict:
    return min(verdicts, key=lambda v: _SEVERITY[v.state])


def _slow_link_fix(
    a: NodeFacts, a_port: ThunderboltPort, b: NodeFacts, b_port: ThunderboltPort
) -> str:
    """What to do about a link below Thunderbolt 5 speed, from what is slow: a Mac with
    only Thunderbolt 4 ports (nothing to buy: the ring runs over the cable), a hub or
    dock in between, or, between two Thunderbolt 5 Macs, the cable itself (exo #1636,
    oMLX #3037: Thunderbolt 4 links must not be sent to Recovery)."""
    old = [f.name for f in (a, b) if f.thunderbolt_generation == 4]
    if old:
        macs = " and ".join(old)
        have = "has" if len(old) == 1 else "have"
        return (
            f"Fix: nothing to change: {macs} {have} only Thunderbolt 4 ports, so jobs use the "
            "ring backend over this cable."
        )
    hubs = a_port.via or b_port.via
    plug = f"{a.name} {a_port.label} straight into {b.name} {b_port.label}"
    if hubs:
        return f"Fix: take out {', '.join(hubs)}: plug a Thunderbolt 5 cable from {plug}."
    if a.thunderbolt_generation == 5 and b.thunderbolt_generation == 5:
        return (
            "Fix: both Macs have Thunderbolt 5 ports, so the cable is the slow part: replace "
            f"it with a Thunderbolt 5 cable from {plug}."
        )
    return f"Fix: use a Thunderbolt 5 cable from {plug}, or run jobs on the ring backend."


def link_verdict(
    a: NodeFacts, a_port: ThunderboltPort, b: NodeFacts, b_port: ThunderboltPort
) -> RdmaVerdict:
    """RDMA over one cable: speed first (a Thunderbolt 4 link never carries RDMA, whatever
    the Macs say), then both nodes, then both ports' state in ibv_devinfo."""
    ends = f"{a.name} {a_port.label} ↔ {b.name} {b_port.label}"
    via = f" through {', '.join(a_port.via or b_port.via)}" if a_port.via or b_port.via else ""
    speeds = [s for s in (a_port.speed_gbps, b_port.speed_gbps) if s is not None]
    if speeds and min(speeds) < RDMA_MIN_GBPS:
        return RdmaVerdict(
            "unusable",
            f"The cable {ends}{via} runs at {min(speeds)} Gb/s (Thunderbolt 4 or slower): RDMA "
            f"needs Thunderbolt 5 at {RDMA_MIN_GBPS} Gb/s on both Macs and the cable. "
            + _slow_link_fix(a, a_port, b, b_port),
            "thunderbolt4",
        )
    nodes = [node_verdict(a), node_verdict(b)]
    if any(not v.on for v in nodes):
        return _worst(nodes)
    if not speeds:
        return RdmaVerdict("unknown", f"The speed of the cable {ends} is not reported.")
    for facts, port in ((a, a_port), (b, b_port)):
        if port.port_state is None:
            device = port.rdma_device or f"the device of {port.label}"
            return RdmaVerdict(
                "unknown", f"ibv_devinfo on {facts.name} does not show {device}'s port state."
            )
    for facts, port in ((a, a_port), (b, b_port)):
        if port.port_state != "PORT_ACTIVE":
            return RdmaVerdict(
                "off",
                f"{port.rdma_device} on {facts.name} is {port.port_state} although both Macs "
                "have RDMA on: restart both.",
                "rdma-restart",
            )
    return RdmaVerdict(
        "on",
        f"RDMA runs over {ends}{via} at {min(speeds)} Gb/s "
        f"({a_port.rdma_device} ↔ {b_port.rdma_device}).",
    )


def cable_verdict(cable: Cable, nodes: Mapping[str, NodeFacts]) -> RdmaVerdict:
    """``link_verdict`` for a cable of a Topology; ``nodes`` by name."""
    return link_verdict(nodes[cable.a.node], cable.a.port, nodes[cable.b.node], cable.b.port)


def build_mismatch(nodes: Sequence[NodeFacts]) -> str | None:
    """JACCL wants the same macOS build on every node: a sentence when they differ."""
    builds = {f.name: f.macos_build for f in nodes if f.macos_build}
    if len(set(builds.values())) <= 1:
        return None
    listed = ", ".join(f"{name} {build}" for name, build in builds.items())
    return f"The Macs run different macOS builds ({listed}): JACCL needs the same build on all."
