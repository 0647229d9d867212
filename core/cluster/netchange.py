"""Network changes MacMesh can offer, never impose (issue 18).

Where a faster path needs a setting changed, say exactly which commands would change it,
on which Mac, why, and how to undo it: IPv4 addresses on a Thunderbolt cable that
carries only IPv6 link-local addresses (MLX's ring takes IPv4 only), as
``mlx.distributed_config`` does with a /30 per cable; or the Thunderbolt Bridge off where
it is the one thing between a Mac and RDMA. Nothing here runs anything: the commands
are shown, and ``core.run.checks.netapply`` applies one only when the person asks, with their
admin password used once. Changes made with ``ifconfig`` last until the Mac restarts.

Pure functions over NodeFacts and the ring's links.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from core.cluster.probe.facts import NodeFacts
from core.cluster.rdma import node_verdict
from core.cluster.ringpath import RingLink
from core.cluster.topology import build_topology

CABLE_NETWORKS = ipaddress.ip_network("192.168.200.0/22")  # /30s for cables are cut here
LASTS = "until the Mac restarts"


@dataclass(frozen=True)
class NetworkChange:
    """Commands to run with admin rights on one Mac, and the ones that undo them."""

    node: str
    why: str
    commands: tuple[str, ...]
    undo: tuple[str, ...]
    lasts: str = LASTS

    def shown(self) -> str:
        """ "On studio-p: `sudo ifconfig ...` (undo: `sudo ifconfig ...`; lasts ...)"."""
        run = "; ".join(f"`sudo {c}`" for c in self.commands)
        back = "; ".join(f"`sudo {c}`" for c in self.undo)
        return f"On {self.node}: {run} (undo: {back}; it lasts {self.lasts})"

    def to_dict(self) -> dict[str, object]:
        return {
            "node": self.node,
            "why": self.why,
            "commands": list(self.commands),
            "undo": list(self.undo),
            "lasts": self.lasts,
        }


def _used(nodes: Sequence[NodeFacts]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    nets = []
    for facts in nodes:
        for interface in facts.interfaces:
            for address in interface.ipv4:
                nets.append(ipaddress.ip_interface(f"{address.ip}/{address.prefix}").network)
    return nets


def cable_address_changes(
    links: Sequence[RingLink], nodes: Sequence[NodeFacts]
) -> list[NetworkChange]:
    """For each ring link that does not run over its Thunderbolt cable because the cable
    has no IPv4 addresses: a /30 for that cable (one address per end), in a range no
    node uses. One pair of changes per cable, whichever way round the link runs."""
    by_name = {f.name: f for f in nodes}
    topology = build_topology(nodes)
    free = (
        net
        for net in CABLE_NETWORKS.subnets(new_prefix=30)
        if not any(net.overlaps(used) for used in _used(nodes))
    )
    changes: list[NetworkChange] = []
    done: set[frozenset[str]] = set()
    for link in links:
        pair = frozenset((link.dialer, link.listener))
        chosen = link.chosen
        if pair in done or (chosen is not None and chosen.kind == "thunderbolt"):
            continue
        cables = topology.between(link.dialer, link.listener)
        if not cables or not any("IPv4" in why or "IPv6" in why for why in link.skipped):
            continue
        done.add(pair)
        cable = cables[0]
        net = next(free, None)
        if net is None:
            break
        hosts = list(net.hosts())
        for end, ip in ((cable.a, hosts[0]), (cable.b, hosts[1])):
            interface = end.port.interface
            if interface is None or end.node not in by_name:
                continue
            bridge = by_name[end.node].interface("bridge0")
            if bridge is not None and bridge.carries and interface in bridge.members:
                interface = "bridge0"  # a member of an active bridge: its addresses are there
            other = cable.b if end is cable.a else cable.a
            changes.append(
                NetworkChange(
                    end.node,
                    f"gives the cable {cable.a.describe()} ↔ {cable.b.describe()} IPv4 "
                    f"addresses ({net}), so the ring can run over it instead of the LAN "
                    f"(MLX's ring takes IPv4 only); {other.node} gets the other address",
                    # An alias: whatever address the interface has stays.
                    (f"ifconfig {interface} inet {ip} netmask {net.netmask} alias",),
                    (f"ifconfig {interface} inet {ip} -alias",),
                )
            )
    return changes


def bridge_off_changes(nodes: Sequence[NodeFacts]) -> list[NetworkChange]:
    """The Thunderbolt Bridge down on each Mac where it alone keeps RDMA off."""
    changes = []
    for facts in nodes:
        if node_verdict(facts).guide != "thunderbolt-bridge":
            continue
        changes.append(
            NetworkChange(
                facts.name,
                "RDMA needs the Thunderbolt Bridge off (with it on, JACCL's connection setup "
                "fails with errno 22); a ring over the bridge's 169.254 address then stops "
                "working, so only do it to use RDMA",
                ("ifconfig bridge0 down",),
                ("ifconfig bridge0 up",),
            )
        )
    return changes
