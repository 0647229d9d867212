"""What MacMesh concludes from the first-contact fixture sets (issue 27 item 4).

Each set under tests/fixtures/macos/ (its PROVENANCE.md cites where each format comes
from) is parsed from its raw files; these tests pin the cable map, Thunderbolt 4 vs 5,
the RDMA verdict per link with its one-line fix, the ring's path and the addresses a
cable lacks, so ``macmesh doctor`` can show them as they are.
"""

from __future__ import annotations

import dataclasses

import pytest

from core.cluster.localnet import MACOS_EHOSTUNREACH, local_network_verdict
from core.cluster.netchange import cable_address_changes
from core.cluster.probe.facts import NodeFacts
from core.cluster.rdma import cable_verdict, node_verdict
from core.cluster.ringpath import ring_links, summary
from core.cluster.topology import build_topology, jaccl_devices, ring_hostfile
from tests.fixtures.macos.hosts import SETS, load_facts

FIELD_SETS = ("tb-hub", "two-cables", "tb-noip4", "localnet-denied")


def by_name(fixture_set: str) -> dict[str, NodeFacts]:
    return {facts.name: facts for facts in load_facts(fixture_set)}


@pytest.mark.parametrize("fixture_set", FIELD_SETS)
def test_every_field_set_parses_without_unknowns(fixture_set: str) -> None:
    assert fixture_set in SETS
    for facts in load_facts(fixture_set):
        assert facts.unknowns == {}, (facts.name, facts.unknowns)
        assert facts.thunderbolt_generation in (4, 5)


# --- a Thunderbolt hub between two Macs ---------------------------------------------------


def test_a_hub_seen_from_one_side_only_still_makes_one_cable() -> None:
    nodes = by_name("tb-hub")
    a, b = nodes["studio-ha"], nodes["studio-hb"]
    assert a.port(1).via == ("Thunderbolt Hub",)  # plugged into the hub: peer one level down
    assert b.port(1).via == ()  # the other side sees the Mac directly (exo PR #1982)
    topology = build_topology(list(nodes.values()))
    assert [c.describe() for c in topology.cables] == [
        "studio-ha port 1 ↔ studio-hb port 1 through Thunderbolt Hub, 40 Gb/s"
    ]
    assert topology.shape == "full mesh" and topology.stray == () and topology.notes == ()


def test_a_thunderbolt_4_hub_blocks_rdma_and_the_fix_is_to_take_it_out() -> None:
    nodes = by_name("tb-hub")
    assert all(node_verdict(f).on for f in nodes.values())  # both Macs are fine
    (cable,) = build_topology(list(nodes.values())).cables
    verdict = cable_verdict(cable, nodes)
    assert (verdict.state, verdict.guide) == ("unusable", "thunderbolt4")
    assert verdict.reason.endswith(
        "Fix: take out Thunderbolt Hub: plug a Thunderbolt 5 cable from studio-ha port 1 "
        "straight into studio-hb port 1."
    )


def test_the_speed_decides_even_if_the_ports_claim_to_be_active() -> None:
    """No capture shows ibv_devinfo on a 40 Gb/s link: RDMA is never claimed there."""
    nodes = by_name("tb-hub")
    active = {
        name: dataclasses.replace(
            f,
            thunderbolt=tuple(
                dataclasses.replace(p, port_state="PORT_ACTIVE") for p in f.thunderbolt
            ),
        )
        for name, f in nodes.items()
    }
    (cable,) = build_topology(list(active.values())).cables
    verdict = cable_verdict(cable, active)
    assert verdict.state == "unusable" and "Recovery" not in verdict.reason  # exo #1636


# --- Thunderbolt 4 Macs (the fix is not a cable) -----------------------------------------


def test_thunderbolt_4_macs_are_told_there_is_nothing_to_change() -> None:
    nodes = by_name("tb-noip4")
    (cable,) = build_topology(list(nodes.values())).cables
    verdict = cable_verdict(cable, nodes)
    assert verdict.state == "unusable"
    assert verdict.reason.endswith(
        "Fix: nothing to change: mini-p and mini-q have only Thunderbolt 4 ports, so jobs "
        "use the ring backend over this cable."
    )


# --- two cables between the same pair ----------------------------------------------------


def test_two_crossed_cables_pair_the_right_devices_on_both_sides() -> None:
    nodes = by_name("two-cables")
    topology = build_topology(list(nodes.values()))
    assert [c.describe() for c in topology.cables] == [
        "studio-y port 1 ↔ studio-z port 2, 80 Gb/s",
        "studio-y port 2 ↔ studio-z port 1, 80 Gb/s",
    ]
    assert topology.shape == "full mesh"
    # The k-th device of a pair is the same cable on both sides.
    assert jaccl_devices(topology) == [
        [None, ["rdma_en2", "rdma_en3"]],
        [["rdma_en3", "rdma_en2"], None],
    ]
    assert [cable_verdict(c, nodes).state for c in topology.cables] == ["on", "on"]


def test_two_cables_with_static_subnets_give_the_ring_both() -> None:
    facts = load_facts("two-cables")
    topology = build_topology(facts)
    ips = {
        (f.name, i.name): a.ip
        for f in facts
        for i in f.interfaces
        if i.kind == "thunderbolt"
        for a in i.ipv4
    }
    assert ring_hostfile(topology, ips) == [
        ["10.0.5.1:32323", "10.0.6.1:32324"],
        ["10.0.5.2:32325", "10.0.6.2:32326"],
    ]
    links = ring_links(facts)
    assert [link.chosen.kind for link in links if link.chosen] == ["thunderbolt"] * 2


# --- Thunderbolt ports with no IPv4 address -----------------------------------------------


def test_a_cable_without_ipv4_falls_back_to_wifi_and_offers_addresses() -> None:
    facts = load_facts("tb-noip4")
    for f in facts:
        (en2,) = [i for i in f.interfaces if i.name == "en2"]
        assert en2.ipv4 == () and en2.ipv6  # only the IPv6 link-local address
    links = ring_links(facts)
    assert [link.chosen.label for link in links if link.chosen] == ["Wi-Fi (en1)"] * 2
    assert "carries only IPv6 link-local addresses" in summary(links)
    changes = cable_address_changes(links, facts)
    assert sorted(c.node for c in changes) == ["mini-p", "mini-q"]
    assert all(any("inet" in cmd and "en2" in cmd for cmd in c.commands) for c in changes)


# --- the Local Network permission denied --------------------------------------------------


def test_the_nodes_outputs_do_not_show_the_local_network_permission() -> None:
    nodes = by_name("localnet-denied")
    assert [f.macos_version for f in nodes.values()] == ["27.0", "27.0"]
    (cable,) = build_topology(list(nodes.values())).cables
    assert cable_verdict(cable, nodes).on


def test_every_mdns_send_refused_means_the_permission_is_denied() -> None:
    verdict = local_network_verdict(
        {"en0": MACOS_EHOSTUNREACH, "en1": MACOS_EHOSTUNREACH}, found=(), reached=()
    )
    assert verdict.state == "blocked"
    assert verdict.reason == (
        "Bonjour cannot send on any interface (en0, en1: [Errno 65] No route to host): "
        "macOS's Local Network permission is denied for MacMesh. Fix: on this Mac open "
        "System Settings > Privacy & Security > Local Network, switch MacMesh off and on "
        "again, then restart MacMesh."
    )


def test_an_mdns_query_goes_out_of_the_loopback_interface_and_a_foreign_one_says_why() -> None:
    """``mdns_send_errors`` as the doctor runs it on a Mac, here on loopback only: the
    query is one zeroconf reads; an address no interface holds gives its errno."""
    from zeroconf import DNSIncoming

    from core.cluster.localnet import _query, browsed_addresses, mdns_send_errors

    (question,) = DNSIncoming(_query()).questions
    assert question.name == "_macmesh._tcp.local." and question.type == 12
    loopback = browsed_addresses(["127.0.0.1"])
    assert list(loopback.values()) == ["127.0.0.1"]
    assert mdns_send_errors(loopback) == dict.fromkeys(loopback)
    refused = mdns_send_errors({"nowhere0": "192.0.2.77"})  # TEST-NET-1: not ours
    assert isinstance(refused["nowhere0"], int) and refused["nowhere0"] > 0


def test_macs_reached_over_ssh_but_not_found_by_bonjour_are_suspect() -> None:
    names = sorted(by_name("localnet-denied"))
    verdict = local_network_verdict({"en0": None}, found=(), reached=names)
    assert verdict.state == "suspect"
    assert "(studio-l, studio-m)" in verdict.reason and "Local Network" in verdict.reason


def test_one_interface_that_sends_and_macs_found_is_fine() -> None:
    verdict = local_network_verdict(
        {"en0": None, "en1": MACOS_EHOSTUNREACH}, found=["studio-l"], reached=["studio-l"]
    )
    assert verdict.ok
    assert local_network_verdict({}, found=(), reached=()).state == "unknown"


def test_when_the_macs_generation_is_unknown_the_fix_offers_both_ways() -> None:
    nodes = {
        name: dataclasses.replace(
            f,
            thunderbolt=tuple(dataclasses.replace(p, max_gbps=None) for p in f.thunderbolt),
        )
        for name, f in by_name("tb-noip4").items()
    }
    assert {f.thunderbolt_generation for f in nodes.values()} == {None}
    (cable,) = build_topology(list(nodes.values())).cables
    assert cable_verdict(cable, nodes).reason.endswith(
        "Fix: use a Thunderbolt 5 cable from mini-p port 1 straight into mini-q port 1, or run "
        "jobs on the ring backend."
    )
