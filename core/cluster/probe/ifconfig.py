"""``ifconfig -a``: every interface's state and addresses, for the ring's paths (issue 18).

Formats: ``docs/macos-outputs.md``, section "ifconfig -a (issue 18)".
A block per interface: a header line ``en2: flags=8863<UP,...> mtu 1500`` at the start
of a line, then tab-indented lines, of which these are read::

    \\tinet 169.254.107.144 netmask 0xffff0000 broadcast 169.254.255.255
    \\tinet6 fe80::1c4d:8a2b:3c5e:7f10%bridge0 prefixlen 64 secured scopeid 0x10
    \\tmember: en2 flags=3<LEARNING,DISCOVER>
    \\tstatus: active

Linux's net-tools ``ifconfig`` (a ring-only host) prints the same keys with a dotted
netmask and no ``%scope``; both are read. Pure and tolerant: a line it does not know is
skipped, and only text with no interface header at all is ``Unknown``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Literal

from core.cluster.probe.sections import Unknown, first_line

Kind = Literal["thunderbolt", "bridge", "ethernet", "wifi", "other"]

_HEADER = re.compile(r"^(?P<name>[A-Za-z][\w.-]*): flags=[0-9a-fA-F]+<(?P<flags>[A-Z0-9_,]*)>")
_INET = re.compile(
    r"^\s+inet (?P<ip>\d+\.\d+\.\d+\.\d+)(?:\s+-->\s+\S+)?\s+netmask\s+(?P<mask>\S+)"
)
_INET6 = re.compile(
    r"^\s+inet6 (?P<ip>[0-9a-fA-F:]+)(?:%(?P<scope>\S+))?\s+prefixlen\s+(?P<len>\d+)"
)
_MEMBER = re.compile(r"^\s+member: (?P<name>\S+)")
_STATUS = re.compile(r"^\s+status: (?P<status>\S+)")


@dataclass(frozen=True)
class IfAddress:
    """One address of an interface. ``ip`` is what a socket takes: an IPv6 link-local
    address carries its scope (``fe80::1%en2``), without which it means nothing."""

    ip: str
    prefix: int
    version: Literal[4, 6]

    @property
    def link_local(self) -> bool:
        """169.254.0.0/16 (self-assigned) or fe80::/10."""
        return ipaddress.ip_address(self.ip.split("%")[0]).is_link_local

    def same_subnet(self, other: IfAddress) -> bool:
        """Both in one subnet (by the smaller prefix of the two): a LAN both reach."""
        if self.version != other.version:
            return False
        prefix = min(self.prefix, other.prefix)
        mine = ipaddress.ip_interface(f"{self.ip.split('%')[0]}/{prefix}").network
        return ipaddress.ip_address(other.ip.split("%")[0]) in mine


@dataclass(frozen=True)
class NetInterface:
    """One interface as ``ifconfig`` shows it; ``kind`` and ``port`` (networksetup's
    hardware port, e.g. "Thunderbolt 1") are filled in once both are known."""

    name: str
    up: bool
    running: bool = False
    status: str | None = None  # "active" / "inactive"; None when ifconfig shows none
    addresses: tuple[IfAddress, ...] = ()
    members: tuple[str, ...] = ()  # a bridge's member interfaces
    kind: Kind = "other"
    port: str | None = None

    @property
    def carries(self) -> bool:
        """Up, and not marked inactive (no status line: trust the flags)."""
        return self.up and self.status != "inactive"

    @property
    def ipv4(self) -> tuple[IfAddress, ...]:
        return tuple(a for a in self.addresses if a.version == 4)

    @property
    def ipv6(self) -> tuple[IfAddress, ...]:
        return tuple(a for a in self.addresses if a.version == 6)


def _prefix(mask: str) -> int | None:
    """``0xffff0000`` (macOS) or ``255.255.0.0`` (Linux) → 16."""
    try:
        value = int(mask, 16) if mask.lower().startswith("0x") else int(ipaddress.ip_address(mask))
    except ValueError:
        return None
    if not 0 <= value < 1 << 32:
        return None
    return bin(value).count("1")


def parse_ifconfig(text: str) -> tuple[NetInterface, ...] | Unknown:
    """Every interface block of ``ifconfig -a``, in the order printed."""
    found: list[NetInterface] = []
    block: dict[str, object] | None = None

    def flush() -> None:
        if block is not None:
            found.append(NetInterface(**block))  # type: ignore[arg-type]

    for line in text.replace("\r\n", "\n").split("\n"):
        if header := _HEADER.match(line):
            flush()
            flags = set(header["flags"].split(","))
            block = {
                "name": header["name"],
                "up": "UP" in flags,
                "running": "RUNNING" in flags,
                "addresses": (),
                "members": (),
            }
            continue
        if block is None:
            continue
        if inet := _INET.match(line):
            prefix = _prefix(inet["mask"])
            if prefix is not None:
                block["addresses"] += (IfAddress(inet["ip"], prefix, 4),)  # type: ignore[operator]
        elif inet6 := _INET6.match(line):
            ip = inet6["ip"]
            try:
                is_local = ipaddress.IPv6Address(ip).is_link_local
            except ValueError:
                continue
            if is_local:  # Linux prints no scope: the block's own interface is the scope
                ip = f"{ip}%{inet6['scope'] or block['name']}"
            block["addresses"] += (IfAddress(ip, int(inet6["len"]), 6),)  # type: ignore[operator]
        elif member := _MEMBER.match(line):
            block["members"] += (member["name"],)  # type: ignore[operator]
        elif status := _STATUS.match(line):
            block["status"] = status["status"]
    flush()
    if not found:
        return Unknown(f"ifconfig: {first_line(text) or 'no interfaces listed'}")
    return tuple(found)


def port_kind(port: str) -> Kind:
    """networksetup's hardware port name → the kind of network it is."""
    if re.fullmatch(r"Thunderbolt \d+", port):
        return "thunderbolt"
    if port == "Thunderbolt Bridge":
        return "bridge"
    if port in ("Wi-Fi", "AirPort"):
        return "wifi"
    if "Ethernet" in port or "LAN" in port:
        return "ethernet"
    return "other"
