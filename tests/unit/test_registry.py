"""core.cluster.registry: merging Bonjour, manual and demo nodes, and the events the changes
make."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.cluster.discovery import DEVICE_INFO, MACMESH, SFTP_SSH, SSH, BonjourPeer
from core.cluster.hosts import ManualHost
from core.cluster.probe.facts import NodeFacts
from core.cluster.registry import (
    Node,
    ProbeState,
    Registry,
    Source,
    macos_major,
    manual_name,
    merge,
)
from core.run.demo import DEMO_MACS, demo_facts, demo_nodes

STUDIO_A = BonjourPeer(
    name="Studio A",
    services=frozenset({SSH, SFTP_SSH, DEVICE_INFO}),
    hostname="Studio-A.local",
    addresses=("192.168.1.20",),
    ssh_port=22,
    model="Mac15,14",
    osxvers=25,
)
LINUX = BonjourPeer(
    name="build", services=frozenset({SSH}), hostname="build.local", addresses=("192.168.1.9",),
    ssh_port=22,
)  # fmt: skip


class Events:
    def __init__(self, registry: Registry) -> None:
        self.log: list[tuple[str, str]] = []
        registry.added.connect(lambda node: self.log.append(("added", node.name)))
        registry.updated.connect(lambda node: self.log.append(("updated", node.name)))
        registry.removed.connect(lambda name: self.log.append(("removed", name)))

    def take(self) -> list[tuple[str, str]]:
        log, self.log = self.log, []
        return log


@pytest.fixture
def registry() -> Registry:
    return Registry()


@pytest.fixture
def events(registry: Registry) -> Events:
    return Events(registry)


def test_a_bonjour_peer_becomes_a_node(registry: Registry, events: Events) -> None:
    registry.peer_seen(STUDIO_A)
    node = registry.get("Studio A")
    assert node == Node(
        name="Studio A",
        hostname="Studio-A.local",
        addresses=("192.168.1.20",),
        ssh_port=22,
        is_mac=True,
        model_id="Mac15,14",
        darwin=25,
        sources=frozenset({Source.BONJOUR}),
    )
    assert (
        node.source is Source.BONJOUR and node.macos == "26" and node.ssh_host == "Studio-A.local"
    )
    assert events.take() == [("added", "Studio A")]

    registry.peer_seen(STUDIO_A)  # the same again: nothing to say
    assert events.take() == []
    registry.peer_seen(BonjourPeer(**{**STUDIO_A.__dict__, "addresses": ("192.168.1.21",)}))
    assert events.take() == [("updated", "Studio A")]
    registry.peer_gone("studio a")  # DNS names ignore case
    assert events.take() == [("removed", "Studio A")] and registry.nodes() == []
    registry.peer_gone("Studio A")
    assert events.take() == []


def test_a_linux_host_is_another_ssh_host(registry: Registry) -> None:
    registry.peer_seen(LINUX)
    node = registry.get("build")
    assert node is not None and node.is_mac is False and node.can_ssh and node.model_id is None


def test_a_mac_with_remote_login_off_is_shown_but_cannot_ssh(registry: Registry) -> None:
    registry.peer_seen(BonjourPeer("Air", frozenset({DEVICE_INFO}), model="Mac14,2", osxvers=24))
    node = registry.get("Air")
    assert node is not None and node.is_mac and not node.can_ssh and node.macos == "15"


@pytest.mark.parametrize("typed", ["studio-a.local", "Studio-A", "192.168.1.20"])
def test_a_manual_host_naming_a_peer_joins_it(
    registry: Registry, events: Events, typed: str
) -> None:
    host = ManualHost(typed, 2222, "ml")
    registry.set_manual_hosts([host])
    manual_name = host.host + ":2222"
    assert [n.name for n in registry.nodes()] == [manual_name]
    assert registry.get(manual_name).is_mac is None  # type: ignore[union-attr]
    events.take()

    registry.peer_seen(STUDIO_A)
    assert events.take() == [("removed", manual_name), ("added", "Studio A")]
    node = registry.get("Studio A")
    assert node is not None and node.sources == {Source.BONJOUR, Source.MANUAL}
    assert (node.ssh_port, node.user) == (2222, "ml")  # the person's choice wins

    registry.peer_gone("Studio A")  # the Mac left the link: the manual host stays
    assert events.take() == [("removed", "Studio A"), ("added", manual_name)]


def test_a_manual_host_naming_nothing_known_stays_apart(registry: Registry) -> None:
    registry.set_manual_hosts([ManualHost("studio-b.local"), ManualHost("192.168.1.21")])
    registry.peer_seen(STUDIO_A)
    assert {n.name for n in registry.nodes()} == {"Studio A", "studio-b.local", "192.168.1.21"}


def test_manual_only_hosts(registry: Registry) -> None:
    registry.set_manual_hosts([ManualHost("10.0.0.5"), ManualHost("gpu.example.org", 22, "me")])
    by_address, by_name = registry.get("10.0.0.5"), registry.get("gpu.example.org")
    assert by_address is not None and by_address.addresses == ("10.0.0.5",)
    assert by_address.hostname is None and by_address.ssh_host == "10.0.0.5"
    assert by_name is not None and by_name.hostname == "gpu.example.org" and by_name.user == "me"
    assert by_name.source is Source.MANUAL


def test_demo_nodes_give_way_to_real_ones(registry: Registry) -> None:
    registry.set_demo_nodes([Node("Studio A", is_mac=True), Node("Studio B", is_mac=True)])
    assert {n.name: n.source for n in registry.nodes()} == {
        "Studio A": Source.DEMO,
        "Studio B": Source.DEMO,
    }
    registry.peer_seen(STUDIO_A)
    assert registry.get("Studio A").source is Source.BONJOUR  # type: ignore[union-attr]
    registry.set_demo_nodes([])
    assert [n.name for n in registry.nodes()] == ["Studio A"]


def test_facts_attach_and_fill_the_row(registry: Registry, events: Events) -> None:
    registry.peer_seen(STUDIO_A)
    events.take()
    assert (registry.get("Studio A").chip, registry.get("Studio A").rdma) == ("", None)  # type: ignore[union-attr]
    facts = DEMO_MACS[0]  # a Mac Studio with RDMA on, as its probe reads
    registry.set_facts("Studio A", facts)
    node = registry.get("Studio A")
    assert node is not None and node.facts == facts
    assert (node.chip, node.memory_bytes, node.macos, node.rdma) == (
        "Apple M3 Ultra",
        96 << 30,
        "26.2",
        True,
    )
    assert node.is_mac and node.kind == "Mac"
    assert events.take() == [("updated", "Studio A")]
    registry.peer_seen(BonjourPeer(**{**STUDIO_A.__dict__, "ssh_port": 2200}))
    assert registry.get("Studio A").facts == facts  # type: ignore[union-attr]
    registry.set_facts("nobody", facts)  # a node that is gone: ignored
    assert registry.get("nobody") is None


def test_self_and_macmesh_version(registry: Registry) -> None:
    me = BonjourPeer(
        "Me", frozenset({MACMESH, SSH}), ssh_port=22, macmesh_version="0.1.0", is_self=True
    )
    registry.peer_seen(me)
    node = registry.get("Me")
    assert node is not None and node.is_self and node.macmesh_version == "0.1.0"


@pytest.mark.parametrize(
    ("darwin", "macos"), [(20, 11), (23, 14), (24, 15), (25, 26), (26, 27), (19, None)]
)
def test_macos_major(darwin: int, macos: int | None) -> None:
    assert macos_major(darwin) == macos


def test_signals_come_in_order_from_many_threads(registry: Registry, events: Events) -> None:
    """Each name's events alternate added/removed, whatever thread made the change."""

    def churn(i: int) -> None:
        peer = BonjourPeer(f"Mac {i}", frozenset({SSH}), ssh_port=22)
        for _ in range(50):
            registry.peer_seen(peer)
            registry.peer_gone(peer.name)

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert registry.nodes() == []
    for i in range(8):
        kinds = [kind for kind, name in events.log if name == f"Mac {i}"]
        assert kinds == ["added", "removed"] * 50


names = st.sampled_from(["Studio A", "Studio B", "build", "Air"])
peers = st.builds(
    BonjourPeer,
    name=names,
    services=st.just(frozenset({SSH})),
    hostname=st.sampled_from([None, "studio-a.local", "build.local"]),
    addresses=st.sampled_from([(), ("10.0.0.1",), ("10.0.0.2",)]),
    ssh_port=st.sampled_from([None, 22]),
)
manuals = st.builds(
    ManualHost,
    host=st.sampled_from(["studio-a.local", "10.0.0.1", "10.0.0.3", "build", "other.local"]),
    port=st.sampled_from([22, 2222]),
)


@given(st.lists(peers, max_size=4, unique_by=lambda p: p.name), st.lists(manuals, max_size=4))
def test_merge_keeps_every_input_and_names_each_node_once(
    peer_list: list[BonjourPeer], manual_list: list[ManualHost]
) -> None:
    nodes = merge(peer_list, manual_list)
    peer_names = {p.name for p in peer_list}
    assert all(name == node.name for name, node in nodes.items())
    assert peer_names <= nodes.keys()  # every peer is a node
    for host in manual_list:  # every manual host is its own node, or joined a peer's
        assert any(
            Source.MANUAL in n.sources and (n.name == manual_name(host) or n.name in peer_names)
            for n in nodes.values()
        )
    for node in nodes.values():
        assert node.sources and (Source.BONJOUR in node.sources) == (node.name in peer_names)


def test_probe_state_follows_the_node(registry: Registry, events: Events) -> None:
    registry.peer_seen(STUDIO_A)
    assert registry.get("Studio A").probe_state == ProbeState.NEW
    registry.set_probe_state("Studio A", ProbeState.UNREACHABLE, "Remote Login is off")
    node = registry.get("Studio A")
    assert (node.probe_state, node.probe_message) == ("unreachable", "Remote Login is off")
    registry.set_probe_state("Nobody", ProbeState.PROBING)  # gone: ignored
    assert registry.get("Nobody") is None
    registry.peer_gone("Studio A")
    registry.peer_seen(STUDIO_A)  # back: its old state is forgotten
    assert registry.get("Studio A").probe_state == ProbeState.NEW


def test_facts_without_a_probe_state_mean_ready(registry: Registry) -> None:
    registry.peer_seen(STUDIO_A)
    registry.set_facts("Studio A", NodeFacts("Studio A"))
    assert registry.get("Studio A").probe_state == ProbeState.READY


def test_demo_macs_come_ready_with_the_facts_a_probe_would_give(registry: Registry) -> None:
    registry.set_demo_nodes(demo_nodes(2))
    node = registry.get("Studio B")
    assert node is not None and node.probe_state == ProbeState.READY
    assert isinstance(node.facts, NodeFacts) and node.facts == demo_facts(2)[1]
    assert node.facts.chip == DEMO_MACS[1].chip  # one description: its chip, cabled
    assert (node.chip, node.memory_bytes, node.rdma, node.source) == (
        "Apple M4 Max",
        64 << 30,
        True,
        "demo",
    )
