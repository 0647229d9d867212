"""RDMA verdicts per node and per cable (docs/design.md, Probing), and the guides they name."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from core.cluster.probe.facts import NodeFacts
from core.cluster.rdma import (
    GUIDES,
    RdmaVerdict,
    build_mismatch,
    cable_verdict,
    enable_guide,
    guide_resource,
    link_verdict,
    node_verdict,
)
from core.cluster.topology import build_topology
from tests.fixtures.macos.hosts import load_facts

RESOURCES = Path(__file__).resolve().parents[2] / "resources"


def node(fixture_set: str, index: int) -> NodeFacts:
    return load_facts(fixture_set)[index]


def replace(facts: NodeFacts, **changes: object) -> NodeFacts:
    return dataclasses.replace(facts, **changes)  # type: ignore[arg-type]


def with_port(facts: NodeFacts, receptacle: int, **changes: object) -> NodeFacts:
    ports = tuple(
        dataclasses.replace(p, **changes) if p.receptacle == receptacle else p  # type: ignore[arg-type]
        for p in facts.thunderbolt
    )
    return replace(facts, thunderbolt=ports)


# --- nodes --------------------------------------------------------------------------------


def test_on_needs_enabled_and_devices() -> None:
    assert node_verdict(node("mesh4", 0)) == RdmaVerdict(
        "on", "studio-a has RDMA over Thunderbolt on (6 RDMA devices)."
    )


@pytest.mark.parametrize(
    ("version", "major", "minor", "guide"),
    [
        ("27.0", 27, 0, "rdma-macos27"),
        ("26.3", 26, 3, "rdma-recovery"),
        ("26.2", 26, 2, "rdma-recovery"),
    ],
)
def test_disabled_points_to_the_way_for_its_macos(
    version: str, major: int, minor: int, guide: str
) -> None:
    f = replace(node("pair27", 1), macos_version=version, macos_major=major, macos_minor=minor)
    verdict = node_verdict(f)
    assert verdict.state == "off" and verdict.guide == guide
    assert verdict.reason == (
        "RDMA over Thunderbolt is turned off on studio-f; it can only be turned on at that Mac."
    )


def test_macos_before_26_2_must_update_first() -> None:
    assert node_verdict(node("dock", 0)) == RdmaVerdict(
        "off",
        "mbp-m runs macOS 26.1: RDMA over Thunderbolt needs macOS 26.2 or later.",
        "rdma-update-macos",
    )
    older = replace(node("pair27", 1), macos_version="15.6", macos_major=15, macos_minor=6)
    assert node_verdict(older).guide == "rdma-update-macos"


def test_rdma_ctl_missing_on_a_new_macos_is_unknown() -> None:
    f = replace(node("mesh4", 0), rdma_ctl="absent")
    assert node_verdict(f).state == "unknown"


def test_unknown_macos_gives_no_enable_guide() -> None:
    f = replace(node("pair27", 1), macos_version=None, macos_major=None, macos_minor=None)
    assert enable_guide(f) is None
    assert node_verdict(f) == RdmaVerdict(
        "off",
        "RDMA over Thunderbolt is turned off on studio-f; it can only be turned on at that Mac.",
        None,
    )


def test_enabled_without_devices_on_thunderbolt_5_needs_a_restart() -> None:
    f = replace(node("mesh4", 1), rdma_devices=())
    assert node_verdict(f) == RdmaVerdict(
        "unusable",
        "RDMA is enabled on studio-b but it lists no RDMA devices: restart it.",
        "rdma-restart",
    )


def test_thunderbolt_4_mac_is_never_sent_to_recovery() -> None:
    g, h = load_facts("mini-tb4")
    for f in (g, h, replace(h, rdma_ctl="disabled", macos_minor=2)):
        verdict = node_verdict(f)
        assert verdict.state == "unusable" and verdict.guide == "thunderbolt4"
        assert "Recovery" in verdict.reason  # says there is no need to go there


def test_enabled_without_devices_and_no_evidence_of_the_ports() -> None:
    f = replace(node("mini-tb4", 0), thunderbolt=())
    verdict = node_verdict(f)
    assert verdict.state == "unusable" and verdict.guide == "rdma-restart"
    assert "Thunderbolt 4 Mac, or a restart is needed" in verdict.reason


def test_active_thunderbolt_bridge_breaks_rdma() -> None:
    j, k = load_facts("bridge")
    assert node_verdict(j) == RdmaVerdict(
        "unusable",
        "The Thunderbolt Bridge is active on studio-j (en2, en3): it makes RDMA connection "
        "setup fail (errno 22); turn it off.",
        "thunderbolt-bridge",
    )
    assert node_verdict(k).on
    # an active bridge without Thunderbolt members does no harm
    assert node_verdict(replace(j, bridge_members=("en0",))).on


def test_unreadable_signals_are_unknown_not_guessed() -> None:
    a = node("mesh4", 0)
    verdict = node_verdict(
        replace(a, rdma_ctl="unknown", unknowns={"rdma_ctl": "rdma_ctl: output cut off"})
    )
    assert verdict == RdmaVerdict(
        "unknown", "Cannot tell whether studio-a has RDMA on: rdma_ctl: output cut off."
    )
    no_ibv = replace(a, rdma_devices=(), ibv_stack=None, unknowns={"rdma_devices": "x: timed out"})
    assert node_verdict(no_ibv).state == "unknown"


def test_disabled_with_devices_still_listed_is_off() -> None:
    f = replace(node("mesh4", 2), rdma_ctl="disabled")
    verdict = node_verdict(f)
    assert verdict.state == "off" and "restart may be pending" in verdict.reason


# --- cables -------------------------------------------------------------------------------


def test_every_mesh_cable_is_on() -> None:
    nodes = load_facts("mesh4")
    topology = build_topology(nodes)
    verdicts = [cable_verdict(c, {n.name: n for n in nodes}) for c in topology.cables]
    assert {v.state for v in verdicts} == {"on"}
    assert verdicts[0].reason == (
        "RDMA runs over studio-a port 2 ↔ studio-b port 1 at 80 Gb/s (rdma_en3 ↔ rdma_en2)."
    )


def test_one_end_disabled_makes_the_cable_off_with_that_ends_guide() -> None:
    e, f = load_facts("pair27")
    verdict = link_verdict(e, e.port(1), f, f.port(1))
    assert (verdict.state, verdict.guide) == ("off", "rdma-macos27")
    assert "studio-f" in verdict.reason


def test_a_40_gbps_link_is_thunderbolt_4_whatever_the_macs_say() -> None:
    a, b = node("mesh4", 0), node("mesh4", 1)
    slow_a, slow_b = with_port(a, 2, speed_gbps=40), with_port(b, 1, speed_gbps=40)
    verdict = link_verdict(slow_a, slow_a.port(2), slow_b, slow_b.port(1))
    assert verdict == RdmaVerdict(
        "unusable",
        "The cable studio-a port 2 ↔ studio-b port 1 runs at 40 Gb/s (Thunderbolt 4 or slower): "
        "RDMA needs Thunderbolt 5 at 80 Gb/s on both Macs and the cable. Fix: both Macs have "
        "Thunderbolt 5 ports, so the cable is the slow part: replace it with a Thunderbolt 5 "
        "cable from studio-a port 2 straight into studio-b port 1.",
        "thunderbolt4",
    )
    g, h = load_facts("mini-tb4")
    assert link_verdict(g, g.port(1), h, h.port(1)).guide == "thunderbolt4"


def test_a_port_down_with_both_macs_on_needs_a_restart() -> None:
    a, b = node("mesh4", 0), node("mesh4", 1)
    down = with_port(b, 1, port_state="PORT_DOWN")
    verdict = link_verdict(a, a.port(2), down, down.port(1))
    assert verdict == RdmaVerdict(
        "off",
        "rdma_en2 on studio-b is PORT_DOWN although both Macs have RDMA on: restart both.",
        "rdma-restart",
    )


def test_a_port_state_not_shown_is_unknown() -> None:
    a, b = node("mesh4", 0), node("mesh4", 1)
    missing = with_port(b, 1, port_state=None)
    assert link_verdict(a, a.port(2), missing, missing.port(1)).state == "unknown"


def test_unknown_speed_is_unknown() -> None:
    a, b = node("mesh4", 0), node("mesh4", 1)
    a2, b2 = with_port(a, 2, speed_gbps=None), with_port(b, 1, speed_gbps=None)
    assert link_verdict(a2, a2.port(2), b2, b2.port(1)).state == "unknown"


def test_a_bridge_at_one_end_blocks_the_cable() -> None:
    nodes = load_facts("bridge")
    (cable,) = build_topology(nodes).cables
    assert cable_verdict(cable, {n.name: n for n in nodes}).guide == "thunderbolt-bridge"


def test_through_a_dock_the_macos_of_the_laptop_decides() -> None:
    nodes = load_facts("dock")
    (cable,) = build_topology(nodes).cables
    verdict = cable_verdict(cable, {n.name: n for n in nodes})
    assert (verdict.state, verdict.guide) == ("off", "rdma-update-macos")


# --- cluster, guides ----------------------------------------------------------------------


def test_build_mismatch() -> None:
    assert build_mismatch(load_facts("mesh4")) is None
    e = node("pair27", 0)
    studio_a = node("mesh4", 0)
    assert build_mismatch([studio_a, e]) == (
        "The Macs run different macOS builds (studio-a 25C56, studio-e 26A154): "
        "JACCL needs the same build on all."
    )


@pytest.mark.parametrize("guide", sorted(GUIDES))
def test_every_guide_is_a_page_of_numbered_steps_for_a_newcomer(guide: str) -> None:
    text = (RESOURCES / guide_resource(guide)).read_text()
    assert text.startswith(f"# {GUIDES[guide]}\n")
    steps = re.findall(r"^(\d+)\. ", text, re.MULTILINE)
    assert steps[:3] == ["1", "2", "3"]
    assert re.search(r"minute", text)  # says how long it takes


def test_every_guide_a_verdict_can_name_exists() -> None:
    named = {"rdma-macos27", "rdma-recovery", "rdma-update-macos", "rdma-restart"}
    named |= {"thunderbolt-bridge", "thunderbolt4"}
    assert set(GUIDES) == named
    assert {p.stem for p in (RESOURCES / "guides").glob("*.md")} == named
    with pytest.raises(KeyError):
        guide_resource("nope")
