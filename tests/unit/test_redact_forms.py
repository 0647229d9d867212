"""Redaction that holds (issue 33, item 5): an address in every form it is printed in,
and what is derived from one (an EUI-64 link-local address gives the MAC back, an
IPv4-mapped IPv6 address the IPv4 one), never leaves the capture; nor do Thunderbolt
switch UIDs, URL credentials or token-shaped strings."""

from __future__ import annotations

import ipaddress

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.cluster.capture import build_capture
from core.cluster.probe.facts import parse_probe
from core.cluster.redact import Redactor
from tests.fixtures.macos.hosts import hosts
from tests.fixtures.macos.hosts import probe_output as fixture_output
from tests.unit.test_capture import node

macs = st.binary(min_size=6, max_size=6).map(lambda b: bytes([b[0] & 0xFC | 0x00, *b[1:]]))
ipv4s = st.ip_addresses(v=4).filter(
    lambda a: (
        not (a.is_link_local or a.is_loopback or a.is_unspecified or a.is_multicast)
        and int(a) >> 24 not in (0, 255)
    )
)
ipv6s = st.ip_addresses(v=6).filter(
    lambda a: a.is_global and a.ipv4_mapped is None and a.sixtofour is None and int(a) >> 96
)
KEY = b"k" * 16  # one mapping for the capture and its baseline
FACTS = parse_probe("studio", fixture_output(hosts("pair27")[0]))
BASELINE = "\n".join(build_capture([node(FACTS, 0)], Redactor(KEY)).values()).lower()
# "Zq9" first: a secret is never an ordinary word of the probe's output ("inactive").
ALPHABET = "abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
secrets = st.text(ALPHABET, min_size=6, max_size=14).map(lambda s: f"Zq9{s}")


def mac_forms(mac: bytes) -> list[str]:
    colon = ":".join(f"{b:02x}" for b in mac)
    return [colon, colon.upper(), colon.replace(":", "-")]


def eui64(mac: bytes) -> ipaddress.IPv6Address:
    iid = bytes([mac[0] ^ 0x02, mac[1], mac[2], 0xFF, 0xFE, mac[3], mac[4], mac[5]])
    return ipaddress.IPv6Address(b"\xfe\x80" + bytes(6) + iid)


def v6_forms(address: ipaddress.IPv6Address) -> list[str]:
    return [str(address), address.exploded, address.exploded.upper(), str(address).upper()]


def v4_forms(v4: ipaddress.IPv4Address) -> list[str]:
    hexed = f"{int(v4) >> 16:04x}:{int(v4) & 0xFFFF:04x}"
    return [
        str(v4),
        f"::ffff:{v4}",
        f"::FFFF:{v4}",
        f"0:0:0:0:0:ffff:{v4}",
        f"::ffff:{hexed}",
        f"64:ff9b::{v4}",  # NAT64
        f"2002:{hexed}::1",  # 6to4
        f"::{v4}",  # IPv4-compatible
    ]


def leaks(text: str, mac: bytes, v4: ipaddress.IPv4Address, v6: ipaddress.IPv6Address) -> list:
    """Every seeded value (and what gives one back) in ``text`` and not in the capture
    of the same node without them (a fixture's own ``0.0.0`` is none of theirs)."""
    lowered = text.lower()
    return [found for found in _found(text, lowered, mac, v4, v6) if found.lower() not in BASELINE]


def _found(
    text: str, lowered: str, mac: bytes, v4: ipaddress.IPv4Address, v6: ipaddress.IPv6Address
) -> list[str]:
    found = [form for form in mac_forms(mac) if form.lower() in lowered]
    tail = ":".join(f"{b:02x}" for b in mac[3:])  # the MAC's half an EUI-64 keeps as is
    link = eui64(mac)
    found += [form for form in v6_forms(link) if form.lower() in lowered]
    found += [link.exploded[-9:]] if link.exploded[-9:].lower() in lowered else []
    found += [tail] if tail in lowered else []
    octets = str(v4).split(".")
    found += ["." + ".".join(octets[1:])] if "." + ".".join(octets[1:]) in text else []
    hexed = f"{int(v4) >> 16:04x}:{int(v4) & 0xFFFF:04x}"
    found += [hexed] if hexed in lowered else []
    found += [form for form in v6_forms(v6) if form.lower() in lowered]
    return found


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mac=macs,
    v4=ipv4s,
    v6=ipv6s,
    user=secrets,
    password=secrets,
    token=secrets,
    uid=st.integers(1 << 40, (1 << 64) - 1),
)
def test_no_address_in_any_form_nor_a_secret_leaves_the_capture(
    mac: bytes,
    v4: ipaddress.IPv4Address,
    v6: ipaddress.IPv6Address,
    user: str,
    password: str,
    token: str,
    uid: int,
) -> None:
    link = eui64(mac)
    said = [
        *(f"ether {form}" for form in mac_forms(mac)),
        *(f"inet6 {form}%en0 prefixlen 64 scopeid 0x4" for form in v6_forms(link)),
        *(f"inet6 {form} prefixlen 64 autoconf secured" for form in v6_forms(v6)),
        *(f"saw {form} answer" for form in v4_forms(v4)),
        f"fetched https://{user}:{password}@example.com/models",
        f"HF_TOKEN=hf_{token}{token}{token} and Authorization: Bearer {token}{token}",
        f'"switch_uid_key" : "0x{uid:016X}"',
        f"Switch UID: 0x{uid:016x}",
    ]
    members = build_capture([node(FACTS, 0, message="\n".join(said))], Redactor(KEY))
    text = "\n".join(members.values())
    assert leaks(text, mac, v4, v6) == []
    for secret in (password, f"{user}:{password}", f"hf_{token}", f"{token}{token}"):
        assert secret not in text
    assert f"{uid:016x}" not in text.lower()
    # What the capture says stays readable: a link-local address stays one, an
    # IPv4-mapped address keeps its form.
    assert "inet6 fe80::" in text and "saw ::ffff:" in text


def test_the_issues_own_examples_are_redacted() -> None:
    text = (
        "inet6 fe80::3e22:fbff:fe12:3456%en0 prefixlen 64\n"
        "peer ::ffff:10.20.30.40\n"
        '"switch_uid_key" : "0x003D000000A1B2C3"\n'
        "git clone https://bob:hunter22@example.com/r.git\n"
        "HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123\n"
    )
    redactor = Redactor(KEY)
    redactor.learn(text)
    out = redactor.redact(text)
    for gone in (
        "3e22",
        "fe12:3456",
        "3c:22:fb",
        "20.30.40",
        "003D000000A1B2C3",
        "bob",
        "hunter22",
    ):
        assert gone not in out, gone
    assert "hf_" not in out and "TOKEN-1" in out and "https://REDACTED@example.com" in out
    counts = {rule["id"]: rule["replacements"] for rule in redactor.rules()}
    assert counts["eui64"] == 1 and counts["url-credentials"] == 1 and counts["tokens"] == 1
