"""The capture (core.cluster.capture) and its redaction (core.cluster.redact): what a node
printed survives as facts, what identifies a person or a machine does not."""

from __future__ import annotations

import ipaddress
import json
import re
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.cluster.capture import (
    CaptureError,
    build_capture,
    probe_output,
    read_capture,
    write_capture,
)
from core.cluster.probe.facts import NodeFacts, parse_probe
from core.cluster.probe.ifconfig import parse_ifconfig
from core.cluster.redact import RULES, Redactor, is_netmask
from core.cluster.registry import Node, ProbeState, Source
from core.cluster.topology import build_topology
from tests.fixtures.macos.hosts import hosts
from tests.fixtures.macos.hosts import probe_output as fixture_output

SERIAL = "XXXXXXXXXX"  # the fixtures' serial_number
FIXTURE_USER = "/Users/admin/"
KEPT_FACTS = (
    "chip", "memory_bytes", "macos_build", "rdma_ctl", "rdma_devices", "port_states",
    "wired_limit_mb", "disk_free_bytes", "domain_uuids",
)  # fmt: skip


def node(facts: NodeFacts, n: int, user: str = "admin", message: str = "") -> Node:
    return Node(
        facts.name,
        hostname=f"{facts.name}.local",
        addresses=(f"192.168.7.{n + 10}",),
        user=user,
        sources=frozenset({Source.BONJOUR}),
        is_mac=True,
        facts=facts,
        probe_state=ProbeState.READY,
        probe_message=message,
    )


def fixture_nodes(fixture_set: str) -> list[Node]:
    return [
        node(parse_probe(h.name, fixture_output(h)), n) for n, h in enumerate(hosts(fixture_set))
    ]


def test_a_capture_keeps_every_section_and_the_facts_come_back_aliases_aside(
    tmp_path: Path,
) -> None:
    nodes = fixture_nodes("ring4")
    path = write_capture(tmp_path / "ring4.zip", nodes, log_root=tmp_path / "no-logs")
    capture = read_capture(path)
    manifest = capture.manifest
    assert [n["alias"] for n in manifest["nodes"]] == ["mac-1", "mac-2", "mac-3", "mac-4"]
    assert manifest["nodes"][0]["versions"]["mlx"] == "0.32.4"
    assert {r["id"] for r in manifest["redaction"]} == {rule for rule, _, _ in RULES}
    assert manifest["macmesh"] and manifest["logs"] == []
    replayed = [
        parse_probe(alias, probe_output(sections)) for alias, sections in capture.nodes.items()
    ]
    names = dict(zip([n.name for n in nodes], capture.nodes, strict=True))
    for original, back in zip((n.facts for n in nodes), replayed, strict=True):
        assert original is not None
        assert back.unknowns == original.unknowns
        for fact in KEPT_FACTS:
            assert getattr(back, fact) == getattr(original, fact), fact
        assert [(p.receptacle, p.speed_gbps, p.peer_domain_uuid) for p in back.thunderbolt] == [
            (p.receptacle, p.speed_gbps, p.peer_domain_uuid) for p in original.thunderbolt
        ]
        # The addresses changed, their subnets' sharing did not.
        assert [(i.name, [a.prefix for a in i.addresses]) for i in back.interfaces] == [
            (i.name, [a.prefix for a in i.addresses]) for i in original.interfaces
        ]
    before = build_topology([n.facts for n in nodes if n.facts is not None])
    after = build_topology(replayed)
    assert after.shape == before.shape == "ring"
    described = [c.describe() for c in before.cables]
    for name, alias in names.items():
        described = [re.sub(rf"\b{name}\b", alias, d) for d in described]
    assert [c.describe() for c in after.cables] == described


def test_the_same_host_has_the_same_alias_everywhere_and_domain_uuids_are_kept() -> None:
    nodes = fixture_nodes("pair27")
    other = nodes[1].name
    nodes[0] = replace(nodes[0], probe_message=f"{other}.local answered; {other} is next")
    members = build_capture(nodes, Redactor(key=b"k" * 16))
    alias = json.loads(members["manifest.json"])["nodes"][1]["alias"]
    message = json.loads(members["manifest.json"])["nodes"][0]["message"]
    assert message == f"{alias}.local answered; {alias} is next"
    text = "\n".join(members.values())
    for facts in (n.facts for n in nodes):
        assert facts is not None
        assert all(uuid in text for uuid in facts.domain_uuids)


def test_the_aliases_follow_the_nodes_order_when_a_host_name_differs_from_its_name() -> None:
    """This machine announces itself under a host name of its own: it took mac-2, and the
    nodes were mac-1, mac-3, mac-4 (a gap, and no longer the report's order)."""
    nodes = fixture_nodes("pair27")
    nodes[0] = replace(
        nodes[0],
        hostname="builder-7f3a.local",
        is_self=True,
        probe_message="builder-7f3a.local answered",
    )
    members = build_capture(nodes)
    manifest = json.loads(members["manifest.json"])
    assert [n["alias"] for n in manifest["nodes"]] == ["mac-1", "mac-2"]
    assert manifest["nodes"][0]["message"] == "mac-1.local answered"  # its node's alias
    text = "\n".join(members.values())
    assert "builder-7f3a" not in text


def test_the_manifest_says_that_names_of_two_characters_are_left() -> None:
    """A machine named "vm" is not replaced (it would replace "vm" in every text): the
    manifest says so, so whoever reads it before sending knows."""
    nodes = fixture_nodes("pair27")
    nodes[0] = replace(nodes[0], name="vm", hostname="vm.local", probe_message="vm is up")
    manifest = json.loads(build_capture(nodes)["manifest.json"])
    assert manifest["nodes"][0]["message"] == "vm is up"
    rules = {r["id"]: r["replaces"] for r in manifest["redaction"]}
    assert "one of 1 or 2 characters is left" in rules["host-names"]
    assert "one of 1 or 2 characters is left" in rules["user-names"]


def test_each_nodes_announced_macmesh_version_is_in_the_manifest() -> None:
    nodes = fixture_nodes("pair27")
    nodes[0] = replace(nodes[0], macmesh_version="0.1.0")
    manifest = json.loads(build_capture(nodes)["manifest.json"])
    assert [n["versions"]["macmesh"] for n in manifest["nodes"]] == ["0.1.0", None]
    assert manifest["nodes"][0]["versions"]["mlx"] == "0.32.4"  # and the probe's


def test_the_last_jobs_logs_are_captured_redacted(tmp_path: Path) -> None:
    runs = tmp_path / "logs" / "runs"
    old, new = runs / "20260101-000000", runs / "20260102-000000"
    for folder in (old, new):
        folder.mkdir(parents=True)
    (old / "rank0.log").write_text("old run\n")
    (new / "rank0.log").write_text("rank 0 on studio-e at 203.0.113.9 for /Users/admin/x\n")
    (new / "rank1.log").write_text("x" * 300_000 + "\nthe end\n")
    import os

    os.utime(old, (1, 1))
    members = build_capture(fixture_nodes("pair27"), log_root=tmp_path / "logs")
    assert sorted(k for k in members if k.startswith("logs/")) == [
        "logs/20260102-000000/rank0.log",
        "logs/20260102-000000/rank1.log",
    ]
    rank0 = members["logs/20260102-000000/rank0.log"]
    assert "studio-e" not in rank0 and "203.0.113.9" not in rank0 and "admin" not in rank0
    assert rank0.startswith("rank 0 on mac-1 at ")
    assert members["logs/20260102-000000/rank1.log"].endswith("the end\n")
    assert len(members["logs/20260102-000000/rank1.log"]) <= 256 * 1024


LINUX_IFCONFIG = """\
eth0: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 1500
        inet 192.0.2.2  netmask 255.255.255.0  broadcast 192.0.2.255
        inet6 fe80::fc:ff:fe00:1  prefixlen 64  scopeid 0x20<link>
        ether 52:54:00:12:34:56  txqueuelen 1000  (Ethernet)

eth1: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 1500
        inet 10.20.30.40  netmask 255.255.240.0  broadcast 10.20.31.255

lo: flags=73<UP,LOOPBACK,RUNNING>  mtu 65536
        inet 127.0.0.1  netmask 255.0.0.0
"""


def test_a_linux_hosts_netmasks_are_kept_so_its_subnets_do_not_change() -> None:
    """Linux's ifconfig (this machine, probed with its own shell) prints dotted netmasks:
    mapped like addresses, they gave random prefix lengths."""
    redacted = Redactor().redact(LINUX_IFCONFIG)
    assert "192.0.2.2 " not in redacted and "10.20.30.40" not in redacted
    for mask in ("255.255.255.0", "255.255.240.0", "255.0.0.0"):
        assert f"netmask {mask}" in redacted
    before, after = parse_ifconfig(LINUX_IFCONFIG), parse_ifconfig(redacted)
    assert isinstance(before, tuple) and isinstance(after, tuple)
    assert [[a.prefix for a in i.addresses] for i in after] == [[24, 64], [20], [8]]
    assert [[a.prefix for a in i.addresses] for i in before] == [[24, 64], [20], [8]]
    assert all(is_netmask(int(ipaddress.IPv4Address(m))) for m in ("255.255.255.255", "128.0.0.0"))
    assert not any(
        is_netmask(int(ipaddress.IPv4Address(a))) for a in ("255.0.255.0", "10.0.0.1", "0.0.0.0")
    )


@pytest.mark.parametrize(
    ("members", "said"),
    [
        (None, "is not a capture"),
        ({"other.txt": "x"}, "no MacMesh capture manifest"),
        ({"manifest.json": '{"format": "macmesh-capture", "version": 9}'}, "format 9"),
        ({"manifest.json": '{"format": "macmesh-capture", "version": 1}', "../evil": "x"},
         "is not a capture member name"),
        ({"manifest.json": '{"format": "macmesh-capture", "version": 1}',
          "nodes/mac-1/sw_vers.rc": "zero"}, "is not an exit code"),
    ],
)  # fmt: skip
def test_a_file_that_is_not_a_capture_is_refused_in_one_line(
    tmp_path: Path, members: dict[str, str] | None, said: str
) -> None:
    path = tmp_path / "bad.zip"
    if members is None:
        path.write_text("not a zip")
    else:
        with zipfile.ZipFile(path, "w") as archive:
            for name, text in members.items():
                archive.writestr(name, text)
    with pytest.raises(CaptureError) as caught:
        read_capture(path)
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_file_or_a_folder_is_said_as_such(tmp_path: Path) -> None:
    with pytest.raises(CaptureError) as caught:
        read_capture(tmp_path / "studio.zip")
    assert (
        str(caught.value)
        == f"{tmp_path / 'studio.zip'} does not exist: give the path of a capture .zip"
    )
    with pytest.raises(CaptureError) as caught:
        read_capture(tmp_path)
    assert str(caught.value) == f"{tmp_path} is a folder: give the path of a capture .zip"


# -- redaction: seeded values never survive --------------------------------------------

_ALIASES = re.compile(r"(?i)(mac|user|serial)-\d+")
names = st.from_regex(r"[a-z][a-z0-9-]{3,12}[a-z0-9]", fullmatch=True).filter(
    lambda s: not _ALIASES.fullmatch(s)
)
serials = st.from_regex(r"[A-Z0-9]{10,12}", fullmatch=True)
ipv4 = st.ip_addresses(v=4).filter(
    lambda a: not (a.is_link_local or a.is_loopback or a.is_unspecified) and not is_netmask(int(a))
)
ipv6 = st.ip_addresses(v=6).filter(
    lambda a: (
        not (a.is_link_local or a.is_loopback or a.is_unspecified)
        and a.ipv4_mapped is None
        and a.sixtofour is None
        and "." not in str(a)
    )
)


def survives(value: str, text: str) -> bool:
    """``value`` as a whole token of ``text`` (not inside a longer name or number)."""
    edge = r"A-Za-z0-9_-" if not re.fullmatch(r"[\d.:a-fA-F]+", value) else r"0-9A-Fa-f:."
    return re.search(rf"(?<![{edge}]){re.escape(value)}(?![{edge}])", text, re.I) is not None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hostnames=st.lists(names, min_size=2, max_size=2, unique=True),
    user=names,
    serial=serials,
    uuid=st.uuids(),
    v4=st.lists(ipv4, min_size=2, max_size=2, unique=True),
    v6=ipv6,
)
def test_no_seeded_serial_name_or_address_survives_its_capture(
    hostnames: list[str],
    user: str,
    serial: str,
    uuid: object,
    v4: list[ipaddress.IPv4Address],
    v6: ipaddress.IPv6Address,
) -> None:
    seeded_nodes = []
    for n, host in enumerate(hosts("pair27")):
        text = fixture_output(host)
        text = text.replace(SERIAL, serial).replace(FIXTURE_USER, f"/Users/{user}/")
        text = re.sub(r'"platform_UUID" : "[^"]+"', f'"platform_UUID" : "{uuid}"', text)
        text = re.sub(
            r"(\tinet )10\.0\.0\.\d+( netmask 0xffffff00 broadcast )10\.0\.0\.255",
            rf"\g<1>{v4[n]}\g<2>{v4[n]}\n\tinet6 {v6} prefixlen 64 autoconf secured",
            text,
        )
        assert str(v4[n]) in text and serial in text
        facts = parse_probe(hostnames[n], text)
        other = hostnames[1 - n]
        seeded_nodes.append(
            replace(
                node(facts, n, user=user, message=f"saw {other}.local at {v4[1 - n]}"),
                hostname=f"{hostnames[n]}.local",
                addresses=(str(v4[n]),),
            )
        )
    members = build_capture(seeded_nodes)
    text = "\n".join(members.values())
    for value in [*hostnames, user, serial, str(uuid), str(uuid).upper(), *map(str, v4), str(v6)]:
        assert not survives(value, text), value
    # What the cable map needs is still there.
    for facts in (n.facts for n in seeded_nodes):
        assert facts is not None and all(u in text for u in facts.domain_uuids)
