"""The doctor's Linking group: how the ready Macs are cabled and what a job would run
over (issue 27).

Nothing here judges RDMA or a path anew: the cables are ``build_topology``'s, each
cable's and node's RDMA verdict ``core.cluster.rdma``'s, the IPv4 on a cable
``ringpath.cable_addresses``', and the backend and the ring's paths ``choose_backend``'s
with preflight's own ``backend_checks`` (the faster path a setting blocks, offered with
its undo). This module words them as checks: a cable's check and a slow port's show the
cable verdict's own reason and fix (a hub to take out, a Thunderbolt 5 cable to buy, or
nothing to change between Thunderbolt 4 Macs), and it adds a cable whose ports have no
IPv4 address, which MLX's ring cannot use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core.cluster.probe.facts import NodeFacts, ThunderboltPort
from core.cluster.rdma import GUIDES, RDMA_MIN_GBPS, RdmaVerdict, cable_verdict, node_verdict
from core.cluster.ringpath import IPV4_ONLY, RingLink, cable_addresses
from core.cluster.topology import Cable, Topology, build_topology
from core.remote.targets import Target
from core.run.checks.backend_choice import BackendChoice, choose_backend, with_links
from core.run.checks.preflight import backend_checks
from core.run.checks.report import CLUSTER, Check, said_and_fix
from core.run.checks.ringcheck import check_links
from core.run.checks.seen import Seen
from core.worker.vocab import Backend


def _fix(guide: str | None) -> str:
    return f"Follow “{GUIDES[guide]}” (MacMesh's guide of that name)." if guide in GUIDES else ""


def _said_and_fix(verdict: RdmaVerdict) -> tuple[str, str]:
    """The verdict's reason and its own fix, or its guide when it names no fix."""
    said, fix = said_and_fix(verdict.reason)
    return said, fix or _fix(verdict.guide)


def linking_checks(
    ready: Sequence[Seen], try_links: bool = False, *, offers: bool = True
) -> list[Check]:
    """Per Mac: its Thunderbolt, RDMA and bridge; per cable: speed, RDMA, IPv4; then the
    cluster's cabling and the backend with the ring's path between each pair of ranks.
    ``offers`` False: no network change is offered (the demo's simulated Macs), so no fix
    points at one."""
    facts = [s.facts for s in ready if s.facts is not None]
    macs = [f for f in facts if f.is_macos is not False]
    topology = build_topology(macs)
    by_name = {f.name: f for f in macs}
    verdicts = [(cable, cable_verdict(cable, by_name)) for cable in topology.cables]
    slow_fixes = {
        (end.node, end.port.label): _said_and_fix(verdict)[1]
        for cable, verdict in verdicts
        for end in (cable.a, cable.b)
    }
    checks: list[Check] = []
    for f in macs:
        checks += node_linking(f, slow_fixes)
    for cable, verdict in verdicts:
        checks += cable_checks(cable, verdict, by_name, offers=offers)
    checks += cabling_checks(topology)
    if len(facts) > 1:
        checks += backend_path_checks(ready, try_links)
    return checks


def node_linking(facts: NodeFacts, cable_fixes: Mapping[tuple[str, str], str]) -> list[Check]:
    """Thunderbolt 4 or 5, RDMA on the node and on each connected port (``cable_fixes``:
    the fix of each port's cable verdict, by node and port label), the bridge."""
    name = facts.name
    if not facts.thunderbolt:
        why = facts.unknowns.get("thunderbolt", "system_profiler lists no Thunderbolt bus")
        return [Check.warn(name, "thunderbolt", f"{name} shows no Thunderbolt port ({why}).")]
    connected = [p for p in facts.thunderbolt if p.connected]
    generation = facts.thunderbolt_generation
    kind = f"Thunderbolt {generation}" if generation else "Thunderbolt (generation unknown)"
    checks = [
        Check.ok(
            name,
            "thunderbolt",
            f"{name} has {len(facts.thunderbolt)} {kind} ports, {len(connected)} cabled.",
        )
    ]
    verdict = node_verdict(facts)
    if verdict.on:
        checks.append(Check.ok(name, "rdma", verdict.reason))
    else:
        checks.append(Check.warn(name, "rdma", *_said_and_fix(verdict)))
    if verdict.on:
        checks += [
            port_check(facts, p, cable_fixes.get((name, p.label), _fix("thunderbolt4")))
            for p in connected
        ]
    checks += bridge_checks(facts)
    return checks


def port_check(facts: NodeFacts, port: ThunderboltPort, slow_fix: str) -> Check:
    """One cabled port's RDMA device and its state in ibv_devinfo; ``slow_fix``: what to
    do when its link is too slow for RDMA (its cable verdict's fix)."""
    name, device = facts.name, port.rdma_device or f"the RDMA device of {port.label}"
    if port.port_state == "PORT_ACTIVE":
        return Check.ok(name, "rdma-port", f"{device} ({port.label}) on {name} is PORT_ACTIVE.")
    state = port.port_state or "not listed by ibv_devinfo"
    if port.speed_gbps is not None and port.speed_gbps < RDMA_MIN_GBPS:
        return Check.warn(
            name,
            "rdma-port",
            f"{device} ({port.label}) on {name} is {state}: its link runs at "
            f"{port.speed_gbps} Gb/s, which carries no RDMA.",
            slow_fix,
        )
    return Check.warn(
        name,
        "rdma-port",
        f"{device} ({port.label}) on {name} is {state} although RDMA is on there.",
        "It comes up once the Mac at the other end of the cable has RDMA on too; when both "
        f"have, restart both (“{GUIDES['rdma-restart']}”).",
    )


def bridge_checks(facts: NodeFacts) -> list[Check]:
    name, members = facts.name, facts.bridge_thunderbolt_members
    if facts.bridge_active and members:
        return [
            Check.warn(
                name,
                "bridge",
                f"The Thunderbolt Bridge is active on {name} ({', '.join(members)}): RDMA "
                "cannot set up its connections while it is (errno 22).",
                _fix("thunderbolt-bridge"),
            )
        ]
    if facts.bridge_exists is None:
        why = facts.unknowns.get("bridge", "ifconfig bridge0 could not be read")
        return [
            Check.warn(
                name, "bridge", f"Cannot tell whether {name} has a Thunderbolt Bridge: {why}."
            )
        ]
    said = "inactive" if facts.bridge_exists else "not set up"
    return [Check.ok(name, "bridge", f"{name}'s Thunderbolt Bridge is {said}.")]


def cable_checks(
    cable: Cable, verdict: RdmaVerdict, by_name: Mapping[str, NodeFacts], *, offers: bool = True
) -> list[Check]:
    """The cable's speed and RDMA verdict (``cable_verdict``'s reason and fix), and IPv4
    at both ends."""
    said, fix = _said_and_fix(verdict)
    message = f"{cable.describe()}: {said}"
    node = cable.a.node
    checks = [
        Check.ok(node, "cable", message) if verdict.on else Check.warn(node, "cable", message, fix)
    ]
    for end in (cable.a, cable.b):
        checks.append(
            ipv4_check(
                by_name[end.node], end.port, other(cable, end.node), rdma=verdict.on, offers=offers
            )
        )
    return checks


def other(cable: Cable, node: str) -> str:
    return cable.b.node if cable.a.node == node else cable.a.node


def ipv4_check(
    facts: NodeFacts, port: ThunderboltPort, peer: str, rdma: bool = False, offers: bool = True
) -> Check:
    """MLX's ring takes IPv4 only: a cable whose port has none is no path for it (no
    matter while RDMA runs over the cable: jaccl needs no address on it). ``offers``: the
    report offers the address (a network change) below; False on the demo, which offers
    none for Macs that do not exist."""
    name = facts.name
    holder, addresses = cable_addresses(facts, port.interface)
    where = f"{port.interface or port.label} ({port.label}, to {peer})"
    if addresses:
        shown = ", ".join(a.ip for a in addresses)
        via = f" on {holder}" if holder != port.interface else ""
        return Check.ok(name, "ipv4", f"{where} on {name} has IPv4 {shown}{via}.")
    if rdma:
        return Check.ok(
            name, "ipv4", f"{where} on {name} has no IPv4 address: none needed, RDMA runs over it."
        )
    found = facts.interface(port.interface) if port.interface else None
    only6 = " (IPv6 link-local only)" if found is not None and found.ipv6 and not found.ipv4 else ""
    down = " and is down" if found is not None and not found.carries else ""
    setting = found.port if found is not None and found.port else "the Thunderbolt port"
    return Check.warn(
        name,
        "ipv4",
        f"{where} on {name} has no IPv4 address{only6}{down}: {IPV4_ONLY}, so the ring cannot "
        "use this cable.",
        f"On {name}: System Settings > Network > {setting}"
        " > Details > TCP/IP, Configure IPv4: Using DHCP (a self-assigned 169.254 address "
        f"follows){OFFERED if offers else ''}.",
    )


OFFERED = ", or accept the address MacMesh offers below"


def cabling_checks(topology: Topology) -> list[Check]:
    """The cluster's cable map as a sentence, and the cables to Macs outside it."""
    if len(topology.nodes) < 2:
        return []
    checks = [Check.ok(CLUSTER, "cabling", topology.verdict)]
    for stray in topology.stray:
        checks.append(
            Check.warn(
                stray.node,
                "cabling",
                stray.describe() + ".",
                "Probe that Mac too (name it with --host), or unplug the cable.",
            )
        )
    checks += [Check.warn(CLUSTER, "cabling", f"Note: {note}") for note in topology.notes]
    return checks


def tried(
    choice: BackendChoice, targets: Mapping[str, Target]
) -> tuple[BackendChoice, list[Check]]:
    """The ring's links with every path tried by ringcheck's TCP connects (a dead one
    dropped, with why), and a warning for each link whose try could not run."""
    problems: list[Check] = []

    def failed(link: RingLink, why: str) -> None:
        problems.append(
            Check.warn(
                link.listener,
                "ring-path",
                f"Could not try the paths from {link.dialer} to {link.listener}: {why}.",
                "The job uses the paths as probed; its own connect says if one fails.",
            )
        )

    links = tuple(check_links(choice.links, targets, failed))
    return with_links(choice, links), problems


def backend_path_checks(ready: Sequence[Seen], try_links: bool) -> list[Check]:
    """What a job on every ready node (in this order) would run on, by ``choose_backend``
    and preflight's ``backend_checks``, then each ring link's path (``try_links``: tried
    with TCP connects between its nodes, as preflight does before a job)."""
    ordered = [s for s in ready if s.facts is not None and s.target is not None]
    targets = [s.target for s in ordered if s.target is not None]
    facts = [s.facts for s in ordered if s.facts is not None]
    fallback = {t.name: t.rank_address for t in targets}
    choice = choose_backend(facts, Backend.AUTO, fallback)
    problems: list[Check] = []
    if try_links and len(choice.links) > 1:
        choice, problems = tried(choice, {t.name: t for t in targets})
    checks = [*backend_checks(choice, Backend.AUTO, targets), *problems]
    for link in choice.links:
        path = link.chosen
        said = f"{link.dialer} → {link.listener}: {link.reason}"
        if path is None:
            checks.append(
                Check.fail(
                    link.listener,
                    "ring-path",
                    f"{said}.",
                    f"Connect {link.dialer} and {link.listener} to one network (a cable, "
                    "Ethernet or Wi-Fi).",
                )
            )
        elif link.failed:
            checks.append(
                Check.warn(
                    link.listener,
                    "ring-path",
                    f"{said}.",
                    f"If a firewall is on at {link.listener}, allow incoming connections for "
                    "its Python (System Settings > Network > Firewall > Options).",
                )
            )
        else:
            checks.append(Check.ok(link.listener, "ring-path", f"{said} ({path.address})."))
    return checks
