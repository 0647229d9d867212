"""The whole path on simulated Macs: fixture folder → fake commands → the real probe script
run by ``sh`` → NodeFacts → topology verdict, RDMA verdicts and JACCL matrix."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from core.cluster.probe.facts import NodeFacts, local_runner, parse_probe
from core.cluster.probe.script import build_probe_script
from core.cluster.rdma import cable_verdict, node_verdict
from core.cluster.topology import build_topology, jaccl_devices
from tests.fixtures.macos.hosts import SETS, hosts, probe_output
from tests.fixtures.macos.make_bin import make_bin

# Only what the probe script itself needs besides the faked macOS commands, so nothing
# of this Linux machine (its own sysctl, ifconfig, ibv_devices...) leaks into the probe.
SCRIPT_TOOLS = ("cat", "mkdir", "mktemp", "rm", "sleep")


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tools")
    for tool in SCRIPT_TOOLS:
        found = shutil.which(tool)
        assert found, tool
        os.symlink(found, folder / tool)
    return folder


def probe_simulated(host: Path, bins: Path, tools: Path) -> NodeFacts:
    """What MacMesh learns from one simulated Mac through the real script."""
    fake = make_bin(host, bins / host.name)
    run = local_runner(env={"PATH": f"{fake}:{tools}", "TMPDIR": str(bins)})
    return parse_probe(host.name, run(build_probe_script("macmesh-python")))


@pytest.mark.parametrize("fixture_set", SETS)
def test_the_real_script_sees_what_the_fixture_files_say(
    fixture_set: str, tmp_path: Path, tools: Path
) -> None:
    for host in hosts(fixture_set):
        through_shell = probe_simulated(host, tmp_path, tools)
        from_files = parse_probe(host.name, probe_output(host))
        assert through_shell == from_files, host.name
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("macmesh-probe")] == []


def test_mesh_pipeline_to_jaccl_matrix(tmp_path: Path, tools: Path) -> None:
    nodes = [probe_simulated(host, tmp_path, tools) for host in hosts("mesh4")]
    topology = build_topology(nodes)
    assert topology.shape == "full mesh" and len(topology.cables) == 6
    assert topology.verdict == "Full mesh: every Mac is cabled to every other (6 cables)."
    by_name = {node.name: node for node in nodes}
    assert all(node_verdict(node).state == "on" for node in nodes)
    assert all(cable_verdict(cable, by_name).state == "on" for cable in topology.cables)
    assert jaccl_devices(topology) == [
        [None, "rdma_en3", "rdma_en4", "rdma_en5"],
        ["rdma_en2", None, "rdma_en3", "rdma_en4"],
        ["rdma_en2", "rdma_en3", None, "rdma_en4"],
        ["rdma_en2", "rdma_en3", "rdma_en4", None],
    ]


def test_fake_commands_answer_like_macos(tmp_path: Path) -> None:
    """The SSH harness relies on these exact behaviours of make_bin's commands."""

    def run(host: Path, *argv: str) -> subprocess.CompletedProcess[str]:
        fake = make_bin(host, tmp_path / host.name)
        env = {"PATH": f"{fake}:/usr/bin:/bin"}
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=10)

    studio = hosts("mesh4")[0]
    memsize = run(studio, "sysctl", "-n", "hw.memsize", "hw.model", "machdep.cpu.brand_string")
    assert memsize.stdout == "549755813888\nMac15,14\nApple M3 Ultra\n"
    assert run(studio, "sysctl", "iogpu.wired_limit_mb").stdout == "iogpu.wired_limit_mb: 0\n"
    unknown = run(studio, "sysctl", "kern.nope")
    assert (unknown.returncode, unknown.stderr) == (1, "sysctl: unknown oid 'kern.nope'\n")
    mini_h = hosts("mini-tb4")[1]
    no_stack = run(mini_h, "ibv_devices")
    assert (no_stack.returncode, no_stack.stdout, no_stack.stderr) == (
        1,
        "",
        "No IB devices found\n",
    )
    mbp = hosts("dock")[0]
    assert not (make_bin(mbp, tmp_path / "mbp") / "rdma_ctl").exists()
