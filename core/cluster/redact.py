"""Redaction for a capture (``core.cluster.capture``, issue 27): what identifies a person
or a machine is replaced, consistently, so what the facts say survives.

The same original gets the same alias everywhere in one capture (every node, every
section, the logs), so a host's name in one node's output still names the same alias in
another's, and cables still join: the Thunderbolt domain UUIDs the cable map pairs are
kept. Addresses are mapped prefix-preservingly (two addresses that share their first n
bits still do, so subnets, netmasks' networks and "the same LAN" survive) with a key
drawn for this capture alone; link-local and loopback addresses are kept (they say
nothing about where the Mac is), and so are dotted netmasks (a Linux host's ``ifconfig``
prints ``netmask 255.255.255.0``: mapped, its prefix length would change). ``RULES`` is
the list the capture's manifest carries.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import secrets
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

# (id, what is replaced, with what): the manifest lists each with how often it applied.
RULES: tuple[tuple[str, str, str], ...] = (
    ("host-names", "the nodes' names and host names (the Bonjour names, .local names, "
     "this machine's name; one of 1 or 2 characters is left: it would match ordinary "
     "words)", "mac-N (mac-N.local)"),
    ("user-names", "user names: SSH users, this machine's user, home folders "
     "(/Users/NAME, /home/NAME; one of 1 or 2 characters is left)", "user-N"),
    ("serials", "serial numbers and device identifiers: every JSON value under a key "
     "naming a serial, UID, UDID or UUID (the Thunderbolt switch_uid_key among them), and "
     "'Serial Number: X' and 'UID: X' lines", "SERIAL-N"),
    ("uuids", "UUIDs other than the Thunderbolt domain UUIDs (domain_uuid_key), which the "
     "cable map pairs", "a UUID of the same case, 00000000-0000-4000-8000-00000000NNNN"),
    ("mac-addresses", "Ethernet (MAC) addresses", "02:00:00:NN:NN:NN"),
    ("ipv4", "IPv4 addresses outside 169.254.0.0/16 (link-local) and 127.0.0.0/8 (netmasks "
     "such as 255.255.255.0, which Linux's ifconfig prints, are kept)",
     "another IPv4 address, prefix-preserving, first octet kept, key drawn per capture"),
    ("ipv6", "IPv6 addresses outside fe80::/10 (link-local) and ::1, in any form: "
     "compressed, full, with an IPv4 address written in it (IPv4-mapped ::ffff:a.b.c.d "
     "keeps its form, its IPv4 address mapped as the ipv4 rule maps it)",
     "an fd00::/8 address, prefix-preserving, key drawn per capture"),
    ("eui64", "the interface identifier of a link-local address made from a MAC address "
     "(EUI-64: ff:fe in its middle), which gives the MAC back",
     "the identifier made from the MAC's replacement (02:00:00:NN:NN:NN)"),
    ("url-credentials", "user names and passwords in URLs (scheme://user:pass@host)",
     "scheme://REDACTED@host"),
    ("tokens", "token-shaped strings: Hugging Face (hf_...), OpenAI (sk-...), GitHub "
     "(ghp_..., github_pat_...), Slack (xox?-...), AWS access keys (AKIA...), MacMesh API "
     "keys (mm-...) and Bearer tokens", "TOKEN-N"),
)  # fmt: skip

_UUID = re.compile(
    r"\b[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\b"
)
_MAC = re.compile(
    r"(?<![0-9A-Fa-f:-])[0-9A-Fa-f]{2}([:-])(?:[0-9A-Fa-f]{2}\1){4}[0-9A-Fa-f]{2}(?![0-9A-Fa-f:-])"
)
_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.]*\d)")
# Hex groups, the last one possibly an IPv4 address in dotted form (::ffff:10.20.30.40).
_IPV6 = re.compile(
    r"(?<![0-9A-Fa-f:.])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}"
    r"(?:(?<=:)(?:\d{1,3}\.){3}\d{1,3})?(?![0-9A-Fa-f:]|\.\d)"
)
_ADDRESS = re.compile(rf"(?P<v6>{_IPV6.pattern})|(?P<v4>{_IPV4.pattern})")
_URL_CREDENTIALS = re.compile(
    r"(?i)\b([a-z][a-z0-9+.-]{1,20}://)[^\s/@:'\"<>]+(?::[^\s/@'\"<>]*)?@"
)
_TOKEN = re.compile(
    r"(?<![A-Za-z0-9_-])(?:hf_[A-Za-z0-9]{20,}|sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|AKIA[0-9A-Z]{16}|mm-[A-Za-z0-9_-]{20,})(?![A-Za-z0-9_-])"
    r"|(?<=Bearer )[A-Za-z0-9._~+/=-]{16,}"
)
_UID_LINE = re.compile(r"(?i)(?<![a-z])uid(?:_key)?\"?\s*[:=]\s*\"?((?:0x)?[0-9A-Fa-f]{6,})")
_HOME = re.compile(r"/(?:Users|home)/([^/\s\"']+)")
_SERIAL_LINE = re.compile(r"(?i)serial[ _-]?(?:number)?\s*[:=]\s*\"?([A-Za-z0-9-]{4,})")
_ID_KEY = re.compile(r"(?i)serial|udid|uid")
_KEPT_KEY = "domain_uuid_key"
_NAME_CHARS = r"[A-Za-z0-9_-]"
MIN_NAME = 3  # shorter names would match inside ordinary words: left as they are


@dataclass
class Redactor:
    """Learns what to replace from every text of a capture (``learn``), then replaces it
    (``redact``). ``key``: the address mapping's secret (random unless a test fixes it)."""

    key: bytes = field(default_factory=lambda: secrets.token_bytes(16))
    names: dict[str, str] = field(default_factory=dict)  # original → alias, literal
    counts: Counter[str] = field(default_factory=Counter)
    _kept_uuids: set[str] = field(default_factory=set)
    _kinds: dict[str, str] = field(default_factory=dict)  # original → rule id
    _pattern: re.Pattern[str] | None = None
    _address_names: dict[str, str] = field(default_factory=dict)
    _hosts: int = 0

    # -- learning ---------------------------------------------------------------------

    def host(self, name: str | None, same_as: str | None = None) -> str | None:
        """``name``'s alias (``mac-N``), given the first time it is seen (``same_as``: a
        name already seen for the same machine, whose alias it shares: a node's host name
        beside its Bonjour name). A name that is an address (``127.0.0.2:2222``, a host
        named by its address) gets an alias for the capture's folders, but its text is
        left to the address rules."""
        if not name:
            return None
        base = name.removesuffix(".").removesuffix(".local")
        if base in self.names:
            return self.names[base]
        if base in self._address_names:
            return self._address_names[base]
        if same_as and (alias := self.host(same_as)) is not None:
            if not (_address_like(base) or len(base) < MIN_NAME):
                self._add(base, alias, "host-names")
            return alias
        self._hosts += 1
        alias = f"mac-{self._hosts}"
        if _address_like(base) or len(base) < MIN_NAME:
            self._address_names[base] = alias
        else:
            self._add(base, alias, "host-names")
        return alias

    def user(self, name: str | None) -> None:
        if name and name not in self.names:
            alias = f"user-{sum(k == 'user-names' for k in self._kinds.values()) + 1}"
            self._add(name, alias, "user-names")

    def learn(self, text: str) -> None:
        """Note the user names, serials and kept domain UUIDs ``text`` holds."""
        for match in _HOME.finditer(text):
            if match[1] not in ("Shared",):
                self.user(match[1])
        for match in _SERIAL_LINE.finditer(text):
            self._serial(match[1])
        for match in _UID_LINE.finditer(text):
            self._serial(match[1])
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or not a document anyone made
            data = None
        if isinstance(data, (dict, list)):
            for key, value in _pairs(data):
                if key == _KEPT_KEY:
                    self._kept_uuids.add(value.upper())
                elif _ID_KEY.search(key) and not _UUID.fullmatch(value):
                    self._serial(value)

    def _serial(self, value: str) -> None:
        if len(value) >= MIN_NAME and value not in self.names:
            alias = f"SERIAL-{sum(k == 'serials' for k in self._kinds.values()) + 1}"
            self._add(value, alias, "serials")

    def _add(self, original: str, alias: str, kind: str) -> None:
        if len(original) < MIN_NAME:
            return
        self.names[original] = alias
        self._kinds[original] = kind
        self._pattern = None

    # -- replacing --------------------------------------------------------------------

    def redact(self, text: str) -> str:
        """``text`` with every learnt name and every identifier replaced."""
        text = _URL_CREDENTIALS.sub(self._credentials, text)
        text = _TOKEN.sub(self._token, text)
        text = self._literals(text)
        text = _UUID.sub(self._uuid, text)
        text = _MAC.sub(self._mac, text)
        # One pass for both: an IPv4 address written in an IPv6 one is mapped once.
        return _ADDRESS.sub(self._address, text)

    def _address(self, match: re.Match[str]) -> str:
        return self._ipv6(match) if match["v6"] else self._ipv4(match)

    def _credentials(self, match: re.Match[str]) -> str:
        self.counts["url-credentials"] += 1
        return f"{match[1]}REDACTED@"

    def _token(self, match: re.Match[str]) -> str:
        if match[0] not in self.names:
            n = sum(k == "tokens" for k in self._kinds.values()) + 1
            self.names[match[0]] = f"TOKEN-{n}"
            self._kinds[match[0]] = "tokens"
            self._pattern = None
        self.counts["tokens"] += 1
        return self.names[match[0]]

    def _literals(self, text: str) -> str:
        if not self.names:
            return text
        if self._pattern is None:
            ordered = sorted(self.names, key=len, reverse=True)
            alternatives = "|".join(re.escape(name) for name in ordered)
            self._pattern = re.compile(
                rf"(?<!{_NAME_CHARS})(?:{alternatives})(?!{_NAME_CHARS})", re.IGNORECASE
            )
        lowered = {name.lower(): name for name in self.names}

        def alias(match: re.Match[str]) -> str:
            original = lowered[match[0].lower()]
            self.counts[self._kinds[original]] += 1
            return self.names[original]

        return self._pattern.sub(alias, text)

    def _uuid(self, match: re.Match[str]) -> str:
        value = match[0]
        if value.upper() in self._kept_uuids:
            return value
        if value.upper() not in self.names:
            n = sum(k == "uuids" for k in self._kinds.values()) + 1
            self.names[value.upper()] = f"00000000-0000-4000-8000-{n:012X}"
            self._kinds[value.upper()] = "uuids"
        self.counts["uuids"] += 1
        alias = self.names[value.upper()]
        return alias.lower() if value == value.lower() else alias

    def _mac(self, match: re.Match[str]) -> str:
        self.counts["mac-addresses"] += 1
        return ":".join(f"{b:02x}" for b in self._mac_alias(match[0]))

    def _mac_alias(self, mac: str) -> bytes:
        """The six bytes a MAC address (any separator, any case) is replaced with."""
        digest = self._digest("mac", mac.lower().replace("-", ":"))
        return bytes([2, 0, 0, *digest[:3]])

    def _ipv4(self, match: re.Match[str]) -> str:
        try:
            address = ipaddress.IPv4Address(match[0])
        except ValueError:
            return match[0]
        if address.is_link_local or address.is_loopback or address.is_unspecified:
            return match[0]
        if is_netmask(int(address)):  # 255.255.255.0: a subnet's size, nobody's address
            return match[0]
        mapped = self._prefix_preserving(int(address), 32, keep=8)
        result = ipaddress.IPv4Address(mapped)
        if result.is_link_local or result.is_loopback:
            result = ipaddress.IPv4Address(mapped ^ (1 << 23))
        self.counts["ipv4"] += 1
        return str(result)

    def _ipv6(self, match: re.Match[str]) -> str:
        try:
            address = ipaddress.IPv6Address(match[0])
        except ValueError:
            return match[0]
        if address.is_loopback or address.is_unspecified:
            return match[0]
        if address.is_link_local:
            return self._link_local(address, match[0])
        if address.ipv4_mapped is not None:  # ::ffff:a.b.c.d keeps its form
            v4 = _IPV4.fullmatch(str(address.ipv4_mapped))
            self.counts["ipv6"] += 1
            return "::ffff:" + (self._ipv4(v4) if v4 else "0.0.0.0")
        mapped = self._prefix_preserving(int(address), 128, keep=0)
        mapped = (mapped & ((1 << 120) - 1)) | (0xFD << 120)
        self.counts["ipv6"] += 1
        return str(ipaddress.IPv6Address(mapped))

    def _link_local(self, address: ipaddress.IPv6Address, text: str) -> str:
        """A link-local address is kept, unless its interface identifier was made from a
        MAC address (EUI-64): then that identifier is made from the MAC's replacement."""
        iid = int(address) & ((1 << 64) - 1)
        if (iid >> 24) & 0xFFFF != 0xFFFE:
            return text
        mac = (iid >> 40 ^ 0x02 << 16).to_bytes(3, "big") + (iid & 0xFFFFFF).to_bytes(3, "big")
        alias = self._mac_alias(":".join(f"{b:02x}" for b in mac))
        new = int.from_bytes(bytes([alias[0] ^ 0x02, *alias[1:3], 0xFF, 0xFE, *alias[3:]]), "big")
        self.counts["eui64"] += 1
        return str(ipaddress.IPv6Address((int(address) >> 64 << 64) | new))

    def _prefix_preserving(self, value: int, bits: int, keep: int) -> int:
        """Each bit after the first ``keep`` flipped by a keyed function of the bits
        before it: addresses sharing a prefix keep sharing it (and no longer one)."""
        out = value
        for i in range(keep, bits):
            prefix = value >> (bits - i)
            if self._digest(f"p{bits}:{i}", str(prefix))[0] & 1:
                out ^= 1 << (bits - 1 - i)
        return out

    def _digest(self, kind: str, value: str) -> bytes:
        return hashlib.blake2b(f"{kind}:{value}".encode(), key=self.key, digest_size=8).digest()

    def rules(self) -> list[dict[str, Any]]:
        """The manifest's list: every rule, and how many replacements it made."""
        return [
            {"id": rule, "replaces": what, "with": alias, "replacements": self.counts[rule]}
            for rule, what, alias in RULES
        ]


def is_netmask(value: int) -> bool:
    """A 32-bit value of leading ones then zeros (255.255.255.0, 255.255.255.255): Linux's
    ``ifconfig`` prints a netmask so, and the probe reads the prefix length from it."""
    host_bits = ~value & 0xFFFFFFFF
    return value != 0 and host_bits & (host_bits + 1) == 0


def _pairs(data: Any) -> Iterator[tuple[str, str]]:
    """Every (key, string value) in a JSON document, at any depth."""
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, str):
                yield str(key), value
            else:
                yield from _pairs(value)
    elif isinstance(data, list):
        for item in data:
            yield from _pairs(item)


def _address_like(text: str) -> bool:
    """An address, or ``address:port``, or ``[v6]:port``."""
    host = text
    if text.startswith("["):
        host = text[1:].split("]")[0]
    elif text.count(":") == 1:
        host = text.split(":")[0]
    try:
        ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    return True


def learn_all(redactor: Redactor, texts: Iterable[str]) -> None:
    for text in texts:
        redactor.learn(text)
