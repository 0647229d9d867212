"""Cables matched by domain UUID, the mesh/ring verdict, the JACCL device matrix and the ring
hostfile, against MLX's documented formats (docs/design.md, Launching)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from core.cluster.probe.facts import NodeFacts
from core.cluster.topology import MissingCable, build_topology, jaccl_devices, ring_hostfile
from tests.fixtures.macos.hosts import load_facts


def by_name(nodes: list[NodeFacts]) -> dict[str, NodeFacts]:
    return {node.name: node for node in nodes}


def assert_mlx_matrix(matrix: list, mesh: bool) -> None:
    """What mlx.launch checks before starting JACCL, plus JSON round-tripping."""
    n = len(matrix)
    assert all(len(row) == n for row in matrix)
    assert all(matrix[i][i] is None for i in range(n))
    neighbours = [
        (i, j) for i in range(n) for j in (range(n) if mesh else ((i - 1) % n, (i + 1) % n))
    ]
    assert all(matrix[i][j] is not None for i, j in neighbours if i != j)
    for row in matrix:
        for entry in row:
            names = entry if isinstance(entry, list) else [entry]
            assert all(name is None or name.startswith("rdma_en") for name in names)
    assert json.loads(json.dumps(matrix)) == matrix


def test_four_node_full_mesh() -> None:
    topology = build_topology(load_facts("mesh4"))
    assert topology.shape == "full mesh"
    assert topology.nodes == ("studio-a", "studio-b", "studio-c", "studio-d")
    assert [c.describe() for c in topology.cables] == [
        "studio-a port 2 ↔ studio-b port 1, 80 Gb/s",
        "studio-a port 3 ↔ studio-c port 1, 80 Gb/s",
        "studio-a port 4 ↔ studio-d port 1, 80 Gb/s",
        "studio-b port 2 ↔ studio-c port 2, 80 Gb/s",
        "studio-b port 3 ↔ studio-d port 2, 80 Gb/s",
        "studio-c port 3 ↔ studio-d port 3, 80 Gb/s",
    ]
    assert topology.missing == () and topology.stray == () and topology.notes == ()
    matrix = jaccl_devices(topology)
    assert matrix == [
        [None, "rdma_en3", "rdma_en4", "rdma_en5"],
        ["rdma_en2", None, "rdma_en3", "rdma_en4"],
        ["rdma_en2", "rdma_en3", None, "rdma_en4"],
        ["rdma_en2", "rdma_en3", "rdma_en4", None],
    ]
    assert_mlx_matrix(matrix, mesh=True)


def test_matrix_follows_the_rank_order_asked_for() -> None:
    topology = build_topology(load_facts("mesh4"))
    matrix = jaccl_devices(topology, order=["studio-d", "studio-a"])
    assert matrix == [[None, "rdma_en2"], ["rdma_en5", None]]


def test_four_node_ring_with_a_doubled_link() -> None:
    nodes = load_facts("ring4")
    shuffled = [nodes[0], nodes[2], nodes[1], nodes[3]]  # a, c, b, d: not along the ring
    topology = build_topology(shuffled)
    assert topology.shape == "ring"
    assert topology.ring == ("ring-a", "ring-b", "ring-c", "ring-d")
    assert [str(m) for m in topology.missing] == [
        "connect ring-a port 4 to ring-c port 3",
        "connect ring-b port 3 to ring-d port 3",
    ]
    assert topology.verdict == (
        "Ring: ring-a – ring-b – ring-c – ring-d – back to ring-a (5 cables). "
        "For a full mesh: connect ring-a port 4 to ring-c port 3; "
        "connect ring-b port 3 to ring-d port 3."
    )
    matrix = jaccl_devices(topology, order=topology.ring)
    # two cables a-b: lists, in the same cable order on both sides (a1-b2, then a3-b4)
    assert matrix == [
        [None, ["rdma_en2", "rdma_en4"], None, "rdma_en3"],
        [["rdma_en3", "rdma_en5"], None, "rdma_en2", None],
        [None, "rdma_en3", None, "rdma_en2"],
        ["rdma_en2", None, "rdma_en3", None],
    ]
    assert_mlx_matrix(matrix, mesh=False)


def test_ring_hostfile_over_thunderbolt_ips() -> None:
    topology = build_topology(load_facts("ring4"))
    ips = {}
    for i, cable in enumerate(topology.cables):  # a /30 per cable, as mlx.distributed_config
        for k, end in enumerate((cable.a, cable.b)):
            ips[(end.node, end.port.interface)] = f"192.168.{i}.{k + 1}"
    hostfile = ring_hostfile(topology, ips, base_port=5000)
    # rank i listens on its address on the cable to rank i-1 (where i-1 connects);
    # one connection each: the thinnest link of the ring has one cable
    assert hostfile == [
        ["192.168.1.1:5000"],  # ring-a en3, cable to ring-d
        ["192.168.0.2:5001"],  # ring-b en3, first cable to ring-a
        ["192.168.3.2:5002"],  # ring-c en3, cable to ring-b
        ["192.168.4.2:5003"],  # ring-d en3, cable to ring-c
    ]
    assert json.loads(json.dumps(hostfile)) == hostfile


def test_ring_hostfile_two_macs_two_cables() -> None:
    a, b = load_facts("ring4")[:2]
    topology = build_topology([a, b])  # only the two a-b cables between them
    assert topology.shape == "full mesh" and len(topology.cables) == 2
    ips = {
        ("ring-a", "en2"): "10.0.0.1",
        ("ring-b", "en3"): "10.0.0.2",
        ("ring-a", "en4"): "10.0.1.1",
        ("ring-b", "en5"): "10.0.1.2",
    }
    assert ring_hostfile(topology, ips) == [
        ["10.0.0.1:32323", "10.0.1.1:32324"],
        ["10.0.0.2:32325", "10.0.1.2:32326"],
    ]
    with pytest.raises(ValueError, match="no IP address for ring-b en5"):
        ring_hostfile(topology, {k: v for k, v in ips.items() if k != ("ring-b", "en5")})


def test_two_macs_one_cable() -> None:
    topology = build_topology(load_facts("pair27"))
    assert topology.shape == "full mesh" and topology.ring == ("studio-e", "studio-f")
    assert topology.verdict == "Full mesh: every Mac is cabled to every other (1 cable)."
    assert jaccl_devices(topology) == [[None, "rdma_en2"], ["rdma_en2", None]]
    assert ring_hostfile(
        topology, {("studio-e", "en2"): "192.168.0.1", ("studio-f", "en2"): "192.168.0.2"}
    ) == [["192.168.0.1:32323"], ["192.168.0.2:32324"]]


def test_three_macs_with_one_cable_missing() -> None:
    a, b, c, _ = load_facts("ring4")
    topology = build_topology([a, b, c])
    assert topology.shape == "incomplete" and topology.ring is None
    assert topology.missing == (MissingCable("ring-a", 4, "ring-c", 3),)
    assert topology.verdict == (
        "Incomplete (3 cables). For a full mesh: connect ring-a port 4 to ring-c port 3."
    )
    # the cables to ring-d, left out of this cluster, are reported, not silently dropped
    assert [s.describe() for s in topology.stray] == [
        "ring-a port 2 is cabled to a Mac Studio that is not in this cluster",
        "ring-c port 1 is cabled to a Mac Studio that is not in this cluster",
    ]
    assert jaccl_devices(topology)[0][2] is None
    with pytest.raises(ValueError, match="no cable between"):
        ring_hostfile(topology, {})


def test_free_ports_run_out() -> None:
    a, b, c, _ = load_facts("ring4")
    full = dataclasses.replace(
        a, thunderbolt=tuple(dataclasses.replace(p, connected=True) for p in a.thunderbolt)
    )
    (missing,) = build_topology([full, b, c]).missing
    assert str(missing) == "connect ring-a to ring-c port 3 (ring-a has no free Thunderbolt port)"
    unknown = NodeFacts(name="ring-x")
    missing_x = build_topology([a, unknown]).missing[0]
    assert (
        str(missing_x) == "connect ring-a port 4 to ring-x (ring-x's Thunderbolt ports are unknown)"
    )


def test_a_dock_between_the_macs_still_makes_a_cable() -> None:
    topology = build_topology(load_facts("dock"))
    (cable,) = topology.cables
    assert cable.describe() == "mbp-m port 2 ↔ studio-n port 1 through TS5 Plus, 80 Gb/s"
    assert jaccl_devices(topology) == [[None, "rdma_en6"], ["rdma_en2", None]]


def test_single_mac_and_no_cables() -> None:
    (one,) = load_facts("pair27")[:1]
    assert build_topology([one]).shape == "single"
    assert build_topology([one]).verdict == "One Mac: no cables needed."
    e, f = load_facts("pair27")
    cut = [dataclasses.replace(n, thunderbolt=()) for n in (e, f)]
    assert build_topology(cut).shape == "incomplete"


def test_an_unknown_interface_cannot_give_a_device_name() -> None:
    e, f = load_facts("pair27")
    ports = tuple(dataclasses.replace(p, interface=None, rdma_device=None) for p in e.thunderbolt)
    topology = build_topology([dataclasses.replace(e, thunderbolt=ports), f])
    with pytest.raises(ValueError, match="RDMA device is unknown"):
        jaccl_devices(topology)


def test_duplicate_names_are_refused() -> None:
    e, _ = load_facts("pair27")
    with pytest.raises(ValueError, match="share a name"):
        build_topology([e, e])


def test_ends_that_disagree_are_noted() -> None:
    e, f = load_facts("pair27")
    wrong = tuple(
        dataclasses.replace(p, peer_domain_uuid="00000000-0000-4000-8000-000000000099")
        if p.receptacle == 1
        else p
        for p in f.thunderbolt
    )
    topology = build_topology([e, dataclasses.replace(f, thunderbolt=wrong)])
    assert len(topology.cables) == 1
    assert topology.notes == (
        "studio-e port 1 sees studio-f port 1, but that port sees another Mac",
    )
    assert [s.node for s in topology.stray] == ["studio-f"]
