"""NodeFacts from whole probe outputs: every simulated Mac, and broken or partial output."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.cluster.probe.facts import NodeFacts, local_runner, parse_probe, run_local_probe
from core.cluster.probe.script import ProbeCommand, build_probe_script
from core.cluster.probe.sections import split_sections
from tests.fixtures.macos.hosts import ROOT, SETS, hosts, probe_output
from tests.helpers.wait import wait_until

GB = 1 << 30


def facts(fixture_set: str, host: str) -> NodeFacts:
    return parse_probe(host, probe_output(ROOT / fixture_set / host))


def test_a_mesh_studio() -> None:
    a = facts("mesh4", "studio-a")
    assert (a.model_id, a.machine_name, a.chip, a.memory_bytes) == (
        "Mac15,14",
        "Mac Studio",
        "Apple M3 Ultra",
        512 * GB,
    )
    assert (a.macos_version, a.macos_build, a.macos_major, a.macos_minor, a.darwin) == (
        "26.2",
        "25C56",
        26,
        2,
        "25.2.0",
    )
    assert a.wired_limit_mb is None and a.memory_pressure == 1
    assert (a.python_version, a.mlx_version, a.mlx_lm_version) == ("3.12.8", "0.32.4", "0.32.2")
    assert a.rdma_ctl == "enabled" and a.ibv_stack is True
    assert a.rdma_devices == tuple(f"rdma_en{n}" for n in range(2, 8))
    assert a.bridge_exists and a.bridge_active is False
    assert a.thunderbolt_generation == 5
    assert a.unknowns == {}
    port2 = a.port(2)
    assert (port2.interface, port2.rdma_device, port2.speed_gbps, port2.port_state) == (
        "en3",
        "rdma_en3",
        80,
        "PORT_ACTIVE",
    )
    assert (port2.peer_domain_uuid, port2.peer_model, port2.peer_rdma_hint) == (
        "B2B2B2B2-0000-4000-8000-000000000001",
        "Mac15,14",
        True,
    )
    assert a.port(1).connected is False and a.port(1).port_state == "PORT_DOWN"
    assert a.domain_uuids[0] == "A1A1A1A1-0000-4000-8000-000000000001"


def test_a_set_wired_limit() -> None:
    assert facts("mesh4", "studio-b").wired_limit_mb == 458752


def test_rdma_disabled_on_macos_27_without_mlx() -> None:
    f = facts("pair27", "studio-f")
    assert (f.rdma_ctl, f.ibv_stack, f.rdma_devices, f.port_states) == ("disabled", True, (), {})
    assert f.macos_major == 27 and f.model_id == "Mac16,9"
    assert f.mlx_version is None and f.python_version == "3.9.6"
    assert f.unknowns == {
        "mlx_version": "mlx is not installed for /usr/bin/python3",
        "mlx_lm_version": "mlx-lm is not installed for /usr/bin/python3",
    }


def test_thunderbolt_4_mac_mini_enabled_without_devices() -> None:
    g = facts("mini-tb4", "mini-g")
    assert g.rdma_ctl == "enabled" and g.rdma_devices == () and g.ibv_stack is True
    assert g.thunderbolt_generation == 4
    assert g.port(1).speed_gbps == 40
    assert g.bridge_active and g.bridge_thunderbolt_members == ("en2", "en3", "en4")
    h = facts("mini-tb4", "mini-h")
    assert h.rdma_ctl == "disabled" and h.ibv_stack is False and h.port_states == {}


def test_active_bridge_and_a_missing_bridge() -> None:
    j, k = facts("bridge", "studio-j"), facts("bridge", "studio-k")
    assert j.bridge_active and j.bridge_thunderbolt_members == ("en2", "en3")
    assert (k.bridge_exists, k.bridge_active, k.bridge_members) == (False, None, ())


def test_old_macos_behind_a_dock_without_rdma_tools_or_python() -> None:
    m = facts("dock", "mbp-m")
    assert m.macos_version == "26.1" and m.rdma_ctl == "absent" and m.ibv_stack is False
    assert m.port(2).interface == "en6" and m.port(2).rdma_device == "rdma_en6"
    assert m.port(2).via == ("TS5 Plus",) and m.port(2).peer_model == "Mac15,14"
    assert m.port(3) is None  # the display's bus has no domain UUID
    assert m.unknowns == {
        "python_version": "python: command not found",
        "mlx_version": "python: command not found",
        "mlx_lm_version": "python: command not found",
    }


def test_every_fixture_host_parses_with_its_thunderbolt_ports_named() -> None:
    for fixture_set in SETS:
        for host in hosts(fixture_set):
            f = parse_probe(host.name, probe_output(host))
            assert f.thunderbolt and all(port.interface for port in f.thunderbolt), host
            assert f.model_id and f.memory_bytes and f.macos_build, host
            assert "interfaces" not in f.unknowns and "thunderbolt" not in f.unknowns, host


def test_empty_output_makes_every_fact_unknown_with_a_reason() -> None:
    f = parse_probe("ghost", "")
    assert f.name == "ghost" and f.model_id is None and f.thunderbolt == ()
    assert f.unknowns["model_id"] == "sysctl_hw: not in the probe output"
    assert f.unknowns["thunderbolt"] == "system_profiler: not in the probe output"
    assert f.rdma_ctl == "unknown" and f.ibv_stack is None


def test_a_failed_probe_says_why_for_every_fact() -> None:
    f = parse_probe("ghost", "@@macmesh-fatal cannot create a temporary folder in /tmp@@\n")
    assert f.unknowns["macos_version"] == (
        "the probe failed: cannot create a temporary folder in /tmp"
    )


def test_sysctl_missing_falls_back_to_system_profiler() -> None:
    output = probe_output(ROOT / "mesh4" / "studio-c").replace(
        "@@macmesh-end sysctl_hw rc=0@@", "@@macmesh-end sysctl_hw rc=124@@"
    )
    c = parse_probe("studio-c", output)
    assert (c.model_id, c.chip, c.memory_bytes) == ("Mac15,14", "Apple M3 Ultra", 512 * GB)
    assert "model_id" not in c.unknowns


def test_output_cut_during_system_profiler() -> None:
    output = probe_output(ROOT / "mesh4" / "studio-d")
    cut = output.index('"SPThunderboltDataType"')
    d = parse_probe("studio-d", output[:cut])
    assert d.macos_version == "26.2" and d.model_id == "Mac15,14"
    assert d.unknowns["thunderbolt"] == "system_profiler: output cut off"
    assert d.unknowns["rdma_ctl"] == "rdma_ctl: not in the probe output"


def test_run_local_probe_uses_the_injected_runner() -> None:
    seen: list[str] = []

    def runner(script: str) -> str:
        seen.append(script)
        return probe_output(ROOT / "ring4" / "ring-b")

    f = run_local_probe("this one", python="/opt/py/bin/python3", run=runner)
    assert seen == [build_probe_script("/opt/py/bin/python3")]
    assert f.name == "this one" and f.memory_bytes == 256 * GB


def test_run_local_probe_on_this_machine() -> None:
    """Here (Linux) most commands are missing: the facts say so instead of failing."""
    f = run_local_probe("here")
    assert f.os_name == platform.system() and f.thunderbolt == ()
    assert f.is_macos is (platform.system() == "Darwin")
    assert (f.darwin is not None) is f.is_macos
    assert f.unknowns["macos_version"] == "sw_vers: command not found"


OUTPUTS = [probe_output(host) for fixture_set in SETS for host in hosts(fixture_set)]


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_truncated_or_corrupted_probe_output_never_raises(data: st.DataObject) -> None:
    output = data.draw(st.sampled_from(OUTPUTS))
    cut = data.draw(st.integers(0, len(output)))
    at = data.draw(st.integers(0, len(output)))
    junk = data.draw(st.text(max_size=40))
    truncated = parse_probe("x", output[:cut])
    if cut < len(output) - 1:
        assert truncated.unknowns  # something is missing, and it says what
    parse_probe("x", output[:at] + junk + output[at + len(junk) :])


def test_node_facts_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts("ring4", "ring-a").name = "other"  # type: ignore[misc]


def _running(argv: list[str]) -> bool:
    wanted = "\0".join(argv).encode() + b"\0"
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if cmdline.read_bytes() == wanted:
                return True
    return False


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_a_probe_past_its_time_limit_is_stopped_with_everything_it_started() -> None:
    """The slow command outlasts the test's own limit: a runner that waited for it fails
    there; one that left it running fails the last wait (no clock in between)."""
    seconds = f"{600 + os.getpid() % 1000 / 1000:.3f}"  # a sleep no other test runs
    commands = (
        ProbeCommand("quick", ("echo", "hi")),
        ProbeCommand("slow", ("sleep", seconds), timeout_s=900),
    )
    output = local_runner(timeout=1.0)(build_probe_script(commands=commands))
    sections = split_sections(output)
    assert sections["quick"].stdout == "hi\n" and not sections["slow"].complete
    wait_until(lambda: not _running(["sleep", seconds]), 10, "the probe's slow command to end")
