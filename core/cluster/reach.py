"""Where and whether to connect to a node: pure rules the Scanner follows.

A Bonjour node is reached at the address its record gave and its host key is named by
its host name; a hand-added host is reached and named as typed. While discovery browses
loopback only (a development box, the tests), a record some other program announced
there with an outside address is never connected to.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Hashable

from core.cluster.discovery import Interfaces
from core.cluster.registry import Node, Source


def probeable(node: Node) -> bool:
    """Demo Macs are simulated: nothing to probe."""
    return node.sources != {Source.DEMO}


def reach_key(node: Node) -> Hashable:
    """What a probe of ``node`` connects to: a change means probe again."""
    return (node.is_self, node.ssh_port, node.user, node.hostname, node.addresses)


def endpoint(node: Node) -> tuple[str, str | None]:
    """(the name SSH checks the host key under, the address to open the socket to).

    A Bonjour node is reached at the address its record gave (IPv4 first), its key
    named by its host name as ``ssh studio-a.local`` names it; a hand-added host is
    reached and named as typed."""
    if not node.addresses:
        return node.ssh_host, None
    address = min(node.addresses, key=lambda a: ":" in a)  # IPv4 before IPv6
    if not node.hostname or is_address(node.hostname):
        return address, None
    return node.hostname, address


def all_loopback(interfaces: Interfaces) -> bool:
    """Does discovery browse loopback addresses only?"""
    if isinstance(interfaces, str):
        return False
    return bool(interfaces) and not any(outside_loopback(i) for i in interfaces)


def outside_loopback(text: str) -> bool:
    """True for an address off 127.0.0.0/8 and ::1, and for any name (it could be anywhere)."""
    try:
        return not ipaddress.ip_address(text.split("%")[0]).is_loopback
    except ValueError:
        return True


def is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return False
    return True


__all__ = ["all_loopback", "endpoint", "is_address", "outside_loopback", "probeable", "reach_key"]
