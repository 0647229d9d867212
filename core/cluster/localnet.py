"""Is macOS's Local Network permission what keeps Bonjour from finding the Macs? (issue 27)

What a Mac shows when the app browsing Bonjour was denied Local Network access
(System Settings > Privacy & Security > Local Network): every multicast send to mDNS
fails with ``EHOSTUNREACH`` ("[Errno 65] No route to host" on macOS) and nothing comes
back, so the browse looks like an empty network (pymobiledevice3 PR #1976; NVIDIA
Personal-AI-Router #3 on macOS 27: "sendto: no route to host"). Commands run over SSH
are not held back by the permission (a ``dns-sd`` subprocess runs with its own, exo
PR #1103), so the nodes' probe outputs look healthy: the evidence is on the Mac running
MacMesh. On macOS 27 the app may be missing from that list (exo #2259), and after a
restart a granted permission can stop working until it is switched off and on (exo #952,
#1035). The verdict is a pure function; ``mdns_send_errors`` gathers its first sign: one
mDNS query sent from each browsed interface, as MacMesh itself (run only on a Mac: the
permission is macOS's).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import psutil

MACOS_EHOSTUNREACH = 65  # macOS's errno for "No route to host" (Linux: 113)
_BLOCKED = {MACOS_EHOSTUNREACH, errno.EHOSTUNREACH}
FIX = (
    "Fix: on this Mac open System Settings > Privacy & Security > Local Network, switch "
    "MacMesh off and on again, then restart MacMesh."
)

State = Literal["ok", "blocked", "suspect", "unknown"]
MDNS_GROUP = ("224.0.0.251", 5353)
QUERY, TYPE_PTR, CLASS_IN = 0, 12, 1  # RFC 1035: a query's flags, a PTR record, class IN


def _query(name: str = "_macmesh._tcp.local.") -> bytes:
    """A one-question mDNS query (PTR, class IN), as zeroconf writes its own."""
    from zeroconf import DNSOutgoing, DNSQuestion

    query = DNSOutgoing(QUERY)
    query.add_question(DNSQuestion(name, TYPE_PTR, CLASS_IN))
    (packet,) = query.packets()
    return packet


def browsed_addresses(interfaces: Sequence[str] | Literal["all"]) -> dict[str, str]:
    """The IPv4 address of each interface Bonjour browses, by interface name: every one
    up with an address outside loopback for "all", else those named or whose address
    is given (an address no interface holds is left out)."""
    stats = psutil.net_if_stats()
    chosen: dict[str, str] = {}
    for name, nics in psutil.net_if_addrs().items():
        for nic in nics:
            if nic.family != socket.AF_INET or name in chosen:
                continue
            if interfaces == "all":
                wanted = not ipaddress.ip_address(nic.address).is_loopback and (
                    name in stats and stats[name].isup
                )
            else:
                wanted = name in interfaces or nic.address in interfaces
            if wanted:
                chosen[name] = nic.address
    return chosen


def mdns_send_errors(addresses: Mapping[str, str]) -> dict[str, int | None]:
    """Per interface (name → its IPv4 address), the errno of one mDNS query sent out of
    it to 224.0.0.251:5353, None when it went out: ``local_network_verdict``'s first
    argument. What Bonjour sends every few seconds anyway; nothing waits for answers."""
    errors: dict[str, int | None] = {}
    for name, address in addresses.items():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP) as sock:
            try:
                sock.setsockopt(
                    socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(address)
                )
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
                sock.sendto(_query(), MDNS_GROUP)
                errors[name] = None
            except OSError as error:
                errors[name] = error.errno
    return errors


@dataclass(frozen=True)
class LocalNetworkVerdict:
    state: State
    reason: str  # one sentence: what was seen, then the fix when there is one

    @property
    def ok(self) -> bool:
        return self.state == "ok"


def local_network_verdict(
    send_errors: Mapping[str, int | None],
    found: Collection[str],
    reached: Collection[str],
) -> LocalNetworkVerdict:
    """``send_errors``: per interface, the errno of this Mac's mDNS send there (None: it
    went out); ``found``: the Macs Bonjour listed; ``reached``: the named Macs that
    answered over SSH. Blocked when every send failed with EHOSTUNREACH; suspect when
    Bonjour found none of the Macs SSH reaches (the permission, or another network)."""
    failed = [name for name, code in send_errors.items() if code in _BLOCKED]
    if send_errors and len(failed) == len(send_errors):
        where = ", ".join(sorted(failed))
        code = send_errors[failed[0]]
        return LocalNetworkVerdict(
            "blocked",
            f"Bonjour cannot send on any interface ({where}: [Errno {code}] No route to host): "
            f"macOS's Local Network permission is denied for MacMesh. {FIX}",
        )
    missing = sorted(set(reached) - set(found))
    if reached and len(missing) == len(set(reached)):
        return LocalNetworkVerdict(
            "suspect",
            f"Bonjour found none of the Macs that answer over SSH ({', '.join(missing)}): "
            "macOS's Local Network permission may be denied for MacMesh, or they are on "
            f"another network. {FIX}",
        )
    if found:
        return LocalNetworkVerdict("ok", f"Bonjour finds {len(set(found))} Mac(s) here.")
    return LocalNetworkVerdict(
        "unknown", "Bonjour found no Mac yet, and no Mac was named to compare with."
    )
