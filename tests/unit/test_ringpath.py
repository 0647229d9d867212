"""The ring's addresses per neighbour pair (issue 18): the fastest path both ends share,
each choice with its reason; and how preflight and ``--show-launch`` carry it."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from core.cluster.probe.facts import NodeFacts
from core.cluster.probe.ifconfig import IfAddress, NetInterface
from core.cluster.ringpath import Path, RingLink, ring_addresses, ring_links, summary
from core.run.checks.preflight import choose_backend
from tests.fixtures.macos.hosts import load_facts


def _by_name(fixture_set: str) -> dict[str, NodeFacts]:
    return {f.name: f for f in load_facts(fixture_set)}


def test_the_bridge_on_both_rings_over_its_169_254_addresses() -> None:
    a, b, _ = load_facts("tb-bridge")
    links = ring_links([a, b], {"mini-a": "mini-a.local", "mini-b": "mini-b.local"})
    assert [(link.dialer, link.listener) for link in links] == [
        ("mini-b", "mini-a"),
        ("mini-a", "mini-b"),
    ]
    assert ring_addresses(links) == ["169.254.26.26", "169.254.43.43"]
    assert all(link.reason == "ring over Thunderbolt (bridge0)" for link in links)
    assert summary(links) == "Ring over Thunderbolt (bridge0) on every link."
    # Slower paths stay behind it, in order, for when the cable does not answer.
    assert [p.kind for p in links[1].paths] == ["thunderbolt", "ethernet", "wifi", "address"]
    assert links[1].paths[1] == Path("ethernet", "10.0.0.43", "en0", "en0")


def test_no_cable_between_two_macs_rings_over_wifi_and_says_why() -> None:
    a, b, c = load_facts("tb-bridge")
    links = ring_links([a, b, c])
    assert ring_addresses(links) == ["192.168.1.26", "169.254.43.43", "169.254.60.60"]
    c_to_a = links[0]
    assert (c_to_a.dialer, c_to_a.listener) == ("mini-c", "mini-a")
    assert c_to_a.reason == (
        "ring over Wi-Fi (en1): no Thunderbolt path between mini-c and mini-a (no cable); "
        "no wired Ethernet shared by mini-c and mini-a"
    )
    assert "mini-a → mini-b over Thunderbolt (bridge0)" in summary(links)


def test_the_bridge_off_leaves_only_ipv6_on_the_cable_which_mlx_cannot_use() -> None:
    p, q = load_facts("tb-off")
    links = ring_links([p, q])
    assert ring_addresses(links) == ["10.0.0.90", "10.0.0.107"]
    assert summary(links) == (
        "Ring over Ethernet (en0) on every link: the Thunderbolt cable carries only IPv6 "
        "link-local addresses (MLX's ring backend takes IPv4 only)."
    )


def test_bridge_on_one_side_and_own_address_on_the_other_is_still_the_cable() -> None:
    s, t = load_facts("tb-mixed")
    links = ring_links([s, t])
    assert ring_addresses(links) == ["169.254.124.124", "169.254.141.142"]
    assert links[0].reason == "ring over Thunderbolt (bridge0)"  # t dials s's bridge
    assert links[1].reason == "ring over Thunderbolt (en2)"  # s dials t's en2


def test_an_unplugged_member_of_the_bridge_is_no_path() -> None:
    a, b, _ = load_facts("tb-bridge")
    en2 = b.interface("en2")
    assert en2 is not None
    unplugged = replace(
        b, interfaces=tuple(replace(i, status="inactive") if i is en2 else i for i in b.interfaces)
    )
    link = ring_links([a, unplugged])[1]
    assert link.chosen == Path("ethernet", "10.0.0.43", "en0", "en0")
    assert link.reason == (
        "ring over Ethernet (en0): the Thunderbolt cable is down at mini-b's end (en2 inactive)"
    )


def test_a_path_that_did_not_answer_falls_back_with_the_reason() -> None:
    a, b, _ = load_facts("tb-bridge")
    link = ring_links([a, b])[1].without_first("timed out")
    assert link.chosen is not None and link.chosen.kind == "ethernet"
    assert link.reason == (
        "ring over Ethernet (en0): Thunderbolt (bridge0) 169.254.43.43 did not answer from "
        "mini-a (timed out)"
    )


def test_nothing_probed_falls_back_to_the_address_each_node_was_reached_at() -> None:
    links = ring_links([NodeFacts("x"), NodeFacts("y")], {"x": "10.1.1.1", "y": "10.1.1.2"})
    assert ring_addresses(links) == ["10.1.1.1", "10.1.1.2"]
    assert links[0].chosen == Path("address", "10.1.1.1")
    assert "the address MacMesh reaches it at (10.1.1.1)" in links[0].reason
    assert ring_addresses(ring_links([NodeFacts("x"), NodeFacts("y")])) is None


def test_preflight_choice_carries_the_paths_and_the_rdma_rules_stay() -> None:
    facts = load_facts("tb-mixed")
    choice = choose_backend(facts)
    assert choice.name == "ring" and choice.addresses == ["169.254.124.124", "169.254.141.142"]
    assert choice.reason.startswith("Ring: studio-t → studio-s over Thunderbolt (bridge0); ")
    assert "RDMA is not used: RDMA over Thunderbolt is turned off on studio-s" in choice.reason
    paths = choice.to_dict()["paths"]
    assert paths[0] == {
        "from": "studio-t",
        "to": "studio-s",
        "address": "169.254.124.124",
        "kind": "thunderbolt",
        "interface": "bridge0",
        "reason": "ring over Thunderbolt (bridge0)",
    }
    asked = choose_backend(facts, "ring")
    assert asked.problem is None and asked.reason.endswith("(ring, as asked).")
    # RDMA still needs the bridge off: jaccl on an active bridge is refused, with the guide.
    bridge = choose_backend(load_facts("bridge"), "jaccl")
    assert bridge.problem and bridge.guide == "thunderbolt-bridge"
    mesh = choose_backend(load_facts("mesh4"))
    assert mesh.name == "jaccl" and mesh.links == () and mesh.addresses is None


# -- properties ----------------------------------------------------------------------------

_KINDS = st.sampled_from(["ethernet", "wifi", "other"])


@st.composite
def _lan_node(draw: st.DrawFn, name: str) -> NodeFacts:
    interfaces = []
    for i in range(draw(st.integers(0, 3))):
        subnet = draw(st.integers(0, 2))
        host = draw(st.integers(1, 250))
        interfaces.append(
            NetInterface(
                f"en{i}",
                up=draw(st.booleans()),
                status=draw(st.sampled_from([None, "active", "inactive"])),
                addresses=(IfAddress(f"10.0.{subnet}.{host}", 24, 4),),
                kind=draw(_KINDS),
            )
        )
    return NodeFacts(name, interfaces=tuple(interfaces))


@given(_lan_node("a"), _lan_node("b"), _lan_node("c"))
def test_paths_are_fastest_first_reachable_and_always_end_at_the_known_address(
    a: NodeFacts, b: NodeFacts, c: NodeFacts
) -> None:
    nodes = [a, b, c]
    fallback = {n.name: f"192.0.2.{i}" for i, n in enumerate(nodes)}
    links = ring_links(nodes, fallback)
    assert [link.listener for link in links] == ["a", "b", "c"]
    for link in links:
        order = ["thunderbolt", "ethernet", "wifi", "address"]
        kinds = [order.index(p.kind) for p in link.paths]
        assert kinds == sorted(kinds)
        assert link.paths[-1] == Path("address", fallback[link.listener])
        assert len({p.address for p in link.paths}) == len(link.paths)
        listener = next(n for n in nodes if n.name == link.listener)
        dialer = next(n for n in nodes if n.name == link.dialer)
        for path in link.paths[:-1]:  # each LAN path: the listener's, in a dialer's subnet
            own = listener.interface(path.interface or "")
            assert own is not None and own.carries
            mine = dialer.interface(path.dialer_interface or "")
            assert mine is not None and mine.carries
            assert any(IfAddress(path.address, 24, 4).same_subnet(x) for x in mine.ipv4)
        assert link.reason.startswith("ring over ")
    assert ring_addresses(links) == [link.paths[0].address for link in links]


@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3))
def test_summary_is_one_sentence_whatever_the_links(names: list[str]) -> None:
    links = [RingLink(n, n + "2", (Path("address", "192.0.2.1"),)) for n in names]
    text = summary(links)
    assert text.endswith(".") and text.count("\n") == 0
