"""The doctor's Finding group: can this Mac find and reach each node (issue 27)?

Bonjour (which nodes it saw, on which interfaces), the Local Network permission macOS 15
and later asks for before Bonjour finds anything (``core.cluster.localnet``'s verdict and
its fix), Remote Login, the firewall (an SSH
that times out; a ring path that does not answer is said in the Linking group), the
host key, and our key's access. Each SSH failure's fix is preflight's (``ssh_fix``),
chosen by the failure's kind the scanner kept.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence

from core.cluster.discovery import Interfaces
from core.cluster.localnet import local_network_verdict
from core.cluster.probe.facts import NodeFacts
from core.cluster.probe.ifconfig import IfAddress, NetInterface
from core.cluster.registry import ProbeState, Source
from core.cluster.scanner import REMOTE_LOGIN_OFF
from core.remote.ssh import (
    AuthFailed,
    HostKeyChanged,
    RemoteLoginOff,
    SSHTimeout,
    UnknownHostKey,
)
from core.run.checks.preflight import ssh_fix
from core.run.checks.report import CLUSTER, Check, said_and_fix
from core.run.checks.seen import Seen

FIREWALL_FIX = (
    "Wake the Mac; if its firewall is on, allow Remote Login through it (System Settings > "
    "Network > Firewall > Options), and check that nothing on the network blocks port 22."
)
# The states in which the node's sshd answered (it showed a host key at least).
_ANSWERED = (
    ProbeState.READY,
    ProbeState.NEEDS_ACCESS,
    ProbeState.NEEDS_HOST_KEY,
    ProbeState.HOST_KEY_CHANGED,
)


def _browsed(interfaces: Interfaces) -> str:
    return interfaces if isinstance(interfaces, str) else ", ".join(interfaces) or "no interface"


def finding_checks(
    seen: Sequence[Seen],
    interfaces: Interfaces,
    on_mac: bool,
    send_errors: Mapping[str, int | None] | None = None,
) -> list[Check]:
    """Every node's Finding checks, then the Local Network permission (the cluster's;
    ``send_errors``: this Mac's mDNS send per browsed interface, when tried)."""
    mine = next((s.facts for s in seen if s.node.is_self and s.facts is not None), None)
    checks: list[Check] = []
    for s in seen:
        checks += node_finding(s, interfaces, mine)
    checks.append(local_network_check(seen, interfaces, on_mac, send_errors or {}))
    return checks


def arrived_on(address: str, mine: NodeFacts | None) -> NetInterface | None:
    """This machine's interface an address of a node is reached on: the one named by an
    IPv6 scope (``fe80::1%en0``), else the one whose subnet holds it. None when this
    machine was not probed or no interface holds it."""
    if mine is None:
        return None
    ip, _, scope = address.partition("%")
    if scope:
        return mine.interface(scope)
    try:
        parsed = ipaddress.ip_address(ip)
    except ValueError:
        return None
    if parsed.version == 6 and parsed.is_link_local:  # every interface has fe80::/64
        return None
    found = IfAddress(ip, 32, 4) if parsed.version == 4 else IfAddress(ip, 128, 6)
    return next(
        (i for i in mine.interfaces if any(a.same_subnet(found) for a in i.addresses)), None
    )


def _at(address: str, mine: NodeFacts | None) -> str:
    interface = arrived_on(address, mine)
    if interface is None:
        return address
    port = f" ({interface.port})" if interface.port else ""
    return f"{address} on this machine's {interface.name}{port}"


def node_finding(s: Seen, interfaces: Interfaces, mine: NodeFacts | None = None) -> list[Check]:
    node, name = s.node, s.node.name
    if Source.DEMO in node.sources:
        captured = isinstance(node.facts, NodeFacts) and bool(node.facts.probe_output)
        what = (
            "a Mac of the replayed capture" if captured else "a simulated Mac of the demo cluster"
        )
        said = f"{name} is {what}: its rank runs on this machine, nothing to find."
        return [Check.ok(name, "bonjour", said)]
    if node.is_self:
        how = "ready" if node.probe_state is ProbeState.READY else node.probe_message
        return [
            Check.ok(name, "bonjour", f"{name} is this machine, probed with its own shell ({how}).")
        ]
    checks = [bonjour_check(s, interfaces, mine), remote_login_check(s)]
    if (firewall := firewall_check(s)) is not None:
        checks.append(firewall)
    checks += host_key_checks(s)
    return checks


def bonjour_check(s: Seen, interfaces: Interfaces, mine: NodeFacts | None = None) -> Check:
    """Whether Bonjour sees the node, at which addresses and on which of this machine's
    interfaces (``mine``: this machine's facts, when it was probed)."""
    node, name = s.node, s.node.name
    if Source.BONJOUR in node.sources:
        shown = ", ".join(_at(a, mine) for a in node.addresses)
        at = f" at {shown}" if shown else ""
        return Check.ok(
            name, "bonjour", f"{name} is seen over Bonjour{at} (browsing {_browsed(interfaces)})."
        )
    return Check.warn(
        name,
        "bonjour",
        f"{name} was named by hand ({node.ssh_host}); Bonjour does not see it "
        f"(browsing {_browsed(interfaces)}).",
        "If it is on the same network, browse more interfaces (--interfaces all) and check "
        "this Mac's Local Network permission; naming it by hand works meanwhile.",
    )


def remote_login_check(s: Seen) -> Check:
    node, name, error = s.node, s.node.name, s.error
    where = f"{node.ssh_host}:{node.ssh_port or 22}"
    if not node.can_ssh:
        return Check.fail(
            name,
            "remote-login",
            REMOTE_LOGIN_OFF.format(name=name).split(". Turn")[0] + ".",
            "On that Mac: System Settings > General > Sharing > Remote Login on.",
        )
    if isinstance(error, RemoteLoginOff):
        return Check.fail(name, "remote-login", str(error), ssh_fix(error))
    if node.probe_state in _ANSWERED:
        return Check.ok(name, "remote-login", f"Remote Login is on: {name} answers SSH ({where}).")
    if node.probe_state.busy:
        return Check.warn(
            name,
            "remote-login",
            f"{name} was still being probed ({node.probe_message or 'no answer yet'}).",
            "Run the doctor again with a longer --wait.",
        )
    if isinstance(error, SSHTimeout):
        return Check.warn(
            name,
            "remote-login",
            f"Cannot tell whether Remote Login is on: {name} ({where}) did not answer in time.",
            "See the firewall check.",
        )
    fix = (ssh_fix(error) if error is not None else "") or (
        "Check that the Mac is on, on this network, with Remote Login on."
    )
    return Check.fail(name, "remote-login", node.probe_message or f"{name} cannot be reached.", fix)


def firewall_check(s: Seen) -> Check | None:
    """A timeout is what a firewall dropping SSH looks like (or a Mac asleep); a node
    that answered SSH has nothing blocking it. None when the probe said nothing either way."""
    name = s.node.name
    if isinstance(s.error, SSHTimeout):
        return Check.fail(
            name,
            "firewall",
            f"SSH to {name} timed out: a firewall may drop it, or the Mac is asleep. ({s.error})",
            FIREWALL_FIX,
        )
    if s.node.probe_state in _ANSWERED:
        return Check.ok(name, "firewall", f"Nothing blocks SSH to {name}.")
    return None


def host_key_checks(s: Seen) -> list[Check]:
    name, state, error = s.node.name, s.node.probe_state, s.error
    if state is ProbeState.NEEDS_HOST_KEY:
        said = str(error) if isinstance(error, UnknownHostKey) else s.node.probe_message
        return [
            Check.fail(
                name,
                "host-key",
                f"{name}'s host key is not known yet. {said}",
                ssh_fix(UnknownHostKey) + " (macmesh nodes lists it; the window asks).",
            )
        ]
    if state is ProbeState.HOST_KEY_CHANGED:
        said = str(error) if isinstance(error, HostKeyChanged) else s.node.probe_message
        return [Check.fail(name, "host-key", said, ssh_fix(HostKeyChanged))]
    if state not in (ProbeState.READY, ProbeState.NEEDS_ACCESS):
        return []
    checks = [Check.ok(name, "host-key", f"{name}'s host key is known and matches.")]
    if state is ProbeState.NEEDS_ACCESS:
        checks.append(
            Check.fail(
                name,
                "access",
                s.node.probe_message or f"{name} refused this Mac's SSH key.",
                ssh_fix(AuthFailed) + " (the window's Set up access…, once).",
            )
        )
    return checks


def local_network_check(
    seen: Sequence[Seen],
    interfaces: Interfaces,
    on_mac: bool,
    send_errors: Mapping[str, int | None] | None = None,
) -> Check:
    """macOS 15 and later let an app browse Bonjour only with the Local Network
    permission; without it browsing finds nothing, silently. ``local_network_verdict``
    judges it from this Mac's mDNS sends (``send_errors``: each refused with
    EHOSTUNREACH is the permission denied), the Macs Bonjour found and those that
    answered SSH (this machine and the demo's simulated Macs are neither); its reason
    and fix are the check's."""
    if not on_mac:
        return Check.ok(
            CLUSTER,
            "local-network",
            "This machine is not a Mac: Bonjour needs no Local Network permission here.",
        )
    others = [s for s in seen if not s.node.is_self and Source.DEMO not in s.node.sources]
    found = [s.node.name for s in others if Source.BONJOUR in s.node.sources]
    answering = [s.node.name for s in others if s.node.probe_state in _ANSWERED]
    verdict = local_network_verdict(send_errors or {}, found, answering)
    said, fix = said_and_fix(verdict.reason)
    said = f"{said.removesuffix('.')} (browsing {_browsed(interfaces)})."
    if verdict.ok:
        return Check.ok(CLUSTER, "local-network", said)
    if verdict.state == "unknown":
        fix = (
            "Name a Mac with --host: if it answers but Bonjour does not list it, check "
            "this Mac's Local Network permission (System Settings > Privacy & Security > "
            "Local Network)."
        )
    return Check.warn(CLUSTER, "local-network", said, fix)
