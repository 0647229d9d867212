"""The Thunderbolt network, read-only (issue 18): ``ifconfig -a`` parsed, each
interface's kind from networksetup, the facts and ``macmesh nodes --json``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from core.cli.nodes import report
from core.cluster.probe.facts import parse_probe
from core.cluster.probe.ifconfig import IfAddress, parse_ifconfig, port_kind
from core.cluster.probe.sections import Unknown
from core.cluster.registry import Node, ProbeState, Source
from core.cluster.topology import build_topology
from tests.fixtures.macos.hosts import ROOT, load_facts, probe_output


def fixture(path: str) -> str:
    return (ROOT / path).read_text()


def test_an_active_bridge_holds_the_link_local_addresses_and_its_members_none() -> None:
    listed = parse_ifconfig(fixture("tb-bridge/mini-b/ifconfig"))
    assert not isinstance(listed, Unknown)
    by_name = {i.name: i for i in listed}
    bridge = by_name["bridge0"]
    assert bridge.up and bridge.status == "active" and bridge.carries
    assert bridge.members == ("en2", "en3", "en4", "en5")
    assert [a.ip for a in bridge.addresses] == ["fe80::2b2b:2b2b:ff:7%bridge0", "169.254.43.43"]
    assert bridge.ipv4 == (IfAddress("169.254.43.43", 16, 4),)
    assert by_name["en2"].addresses == () and by_name["en2"].status == "active"
    assert by_name["en4"].status == "inactive" and not by_name["en4"].carries
    assert by_name["en0"].ipv4 == (IfAddress("10.0.0.43", 24, 4),)
    assert by_name["lo0"].ipv4 == (IfAddress("127.0.0.1", 8, 4),)


def test_with_the_bridge_down_each_cabled_port_has_only_its_ipv6_link_local() -> None:
    listed = parse_ifconfig(fixture("tb-off/studio-p/ifconfig"))
    assert not isinstance(listed, Unknown)
    by_name = {i.name: i for i in listed}
    assert not by_name["bridge0"].up and by_name["bridge0"].status == "inactive"
    en2 = by_name["en2"]
    assert en2.addresses == (IfAddress("fe80::5a5a:5a5a:ff:7%en2", 64, 6),)
    assert en2.addresses[0].link_local


def test_linux_net_tools_format_is_read_too_with_the_scope_added() -> None:
    text = (
        "eth0: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 1500\n"
        "        inet 10.0.0.5  netmask 255.255.255.0  broadcast 10.0.0.255\n"
        "        inet6 fe80::a00:27ff:fe4e:66a1  prefixlen 64  scopeid 0x20<link>\n"
        "        ether 08:00:27:4e:66:a1  txqueuelen 1000  (Ethernet)\n"
        "\n"
        "lo: flags=73<UP,LOOPBACK,RUNNING>  mtu 65536\n"
        "        inet 127.0.0.1  netmask 255.0.0.0\n"
    )
    listed = parse_ifconfig(text)
    assert not isinstance(listed, Unknown)
    eth0 = listed[0]
    assert eth0.name == "eth0" and eth0.up and eth0.status is None and eth0.carries
    assert [(a.ip, a.prefix) for a in eth0.addresses] == [
        ("10.0.0.5", 24),
        ("fe80::a00:27ff:fe4e:66a1%eth0", 64),
    ]


def test_text_without_an_interface_is_unknown_with_its_first_line() -> None:
    assert parse_ifconfig("ifconfig: permission denied\n") == Unknown(
        "ifconfig: ifconfig: permission denied"
    )
    assert isinstance(parse_ifconfig(""), Unknown)


@given(st.text(max_size=400))
def test_the_parser_never_raises(text: str) -> None:
    parse_ifconfig(text)
    parse_ifconfig("en0: flags=8863<UP> mtu 1500\n" + text)


def test_same_subnet_uses_the_smaller_prefix_and_never_mixes_families() -> None:
    a, b = IfAddress("169.254.1.2", 16, 4), IfAddress("169.254.200.9", 16, 4)
    assert a.same_subnet(b) and b.same_subnet(a)
    assert not IfAddress("10.0.0.1", 24, 4).same_subnet(IfAddress("10.0.1.1", 24, 4))
    assert not a.same_subnet(IfAddress("fe80::1%en2", 64, 6))


def test_port_kinds() -> None:
    assert port_kind("Thunderbolt 3") == "thunderbolt"
    assert port_kind("Thunderbolt Bridge") == "bridge"
    assert port_kind("Wi-Fi") == "wifi"
    assert port_kind("Ethernet") == "ethernet"
    assert port_kind("Thunderbolt Ethernet Slot 1") == "ethernet"  # an adapter: a LAN
    assert port_kind("iPhone USB") == "other"


def test_facts_name_each_interface_by_its_hardware_port() -> None:
    mixed = {f.name: f for f in load_facts("tb-mixed")}
    s, t = mixed["studio-s"], mixed["studio-t"]
    assert [(i.name, i.port) for i in s.thunderbolt_network][:2] == [
        ("bridge0", "Thunderbolt Bridge"),
        ("en2", "Thunderbolt 1"),
    ]
    en2 = t.interface("en2")
    assert en2 is not None and en2.kind == "thunderbolt"
    assert [a.ip for a in en2.ipv4] == ["169.254.141.142"]
    assert t.interface("bridge0") is None and t.bridge_exists is False
    assert "addresses" not in s.unknowns


def test_a_host_without_ifconfig_says_so() -> None:
    box = parse_probe("debian-box", probe_output(ROOT / "linux" / "debian-box"))
    assert box.interfaces == () and box.unknowns["addresses"] == "ifconfig: command not found"


def test_macmesh_nodes_json_shows_the_thunderbolt_interfaces_and_addresses() -> None:
    facts = load_facts("tb-bridge")
    nodes = [
        Node(f.name, hostname=f"{f.name}.local", is_mac=True, facts=f,
             probe_state=ProbeState.READY, sources=frozenset({Source.BONJOUR}))
        for f in facts
    ]  # fmt: skip
    data = report(nodes, build_topology(facts), ("127.0.0.1",))
    b = data["nodes"][1]
    assert b["name"] == "mini-b"
    assert b["bridge"] == {"exists": True, "active": True, "members": ["en2", "en3", "en4", "en5"]}
    network = {entry["interface"]: entry for entry in b["network"]}
    assert network["bridge0"]["addresses"] == ["fe80::2b2b:2b2b:ff:7%bridge0", "169.254.43.43"]
    assert network["bridge0"]["kind"] == "bridge" and network["en1"]["kind"] == "wifi"
    assert network["en2"]["port"] == "Thunderbolt 1" and network["en2"]["status"] == "active"
    ports = {p["interface"]: p for p in b["thunderbolt_ports"]}
    assert ports["en2"]["connected"] and ports["en2"]["addresses"] == []
    off = report(
        [Node("studio-p", facts=load_facts("tb-off")[0], probe_state=ProbeState.READY)],
        build_topology(load_facts("tb-off")[:1]),
        ("127.0.0.1",),
    )
    en2 = next(p for p in off["nodes"][0]["thunderbolt_ports"] if p["interface"] == "en2")
    assert en2["addresses"] == ["fe80::5a5a:5a5a:ff:7%en2"]
