"""The pure parts behind the Scanner and ``macmesh nodes``: where to connect, which
interfaces, which Python, what a probe result does to a node, what the report says,
and the Linux test host through the real probe script."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from core.cli.nodes import node_json, nodes_cli, not_ready_message, render, report
from core.cluster import discovery as d
from core.cluster.hosts import HostList, ManualHost
from core.cluster.probe.facts import local_runner, parse_probe
from core.cluster.probe.script import build_probe_script
from core.cluster.rdma import node_verdict
from core.cluster.reach import endpoint, reach_key
from core.cluster.registry import Node, ProbeState, Registry, Source, names_node
from core.cluster.topology import build_topology
from tests.fixtures.macos.hosts import ROOT, load_facts, probe_output
from tests.fixtures.macos.make_bin import make_bin

DEBIAN = ROOT / "linux" / "debian-box"
STUDIO = d.BonjourPeer(
    "Studio A", frozenset({d.SSH, d.DEVICE_INFO}), "Studio-A.local",
    ("fe80::1%en0", "192.168.1.20"), 22, model="Mac15,14", osxvers=25,
)  # fmt: skip


# -- where to connect --------------------------------------------------------------------


def test_a_bonjour_node_is_reached_at_its_ipv4_address_and_known_by_its_name() -> None:
    registry = Registry()
    registry.peer_seen(STUDIO)
    node = registry.get("Studio A")
    assert node is not None
    assert endpoint(node) == ("Studio-A.local", "192.168.1.20")


def test_a_hand_added_host_is_reached_as_typed() -> None:
    registry = Registry()
    registry.set_manual_hosts([ManualHost("10.0.0.5", 2222, "ml"), ManualHost("mini.lan")])
    by_ip, by_name = registry.get("10.0.0.5:2222"), registry.get("mini.lan")
    assert by_ip is not None and endpoint(by_ip) == ("10.0.0.5", None)
    assert by_name is not None and endpoint(by_name) == ("mini.lan", None)
    assert names_node(ManualHost("10.0.0.5", 2222), by_ip)
    assert not names_node(ManualHost("10.0.0.5", 22), by_ip)


def test_what_makes_a_node_probed_again() -> None:
    node = Node("Studio A", hostname="studio-a.local", addresses=("10.0.0.1",))
    same = Node("Studio A", hostname="studio-a.local", addresses=("10.0.0.1",), darwin=25,
                probe_state=ProbeState.READY)  # fmt: skip
    assert reach_key(same) == reach_key(node)  # its own probe's news: not again
    for moved in (
        Node("Studio A", hostname="studio-a.local", addresses=("10.0.0.2",)),
        Node("Studio A", hostname="studio-a.local", addresses=("10.0.0.1",), ssh_port=2222),
        Node("Studio A", hostname="studio-a.local", addresses=("10.0.0.1",), user="ml"),
    ):
        assert reach_key(moved) != reach_key(node)


# -- interfaces --------------------------------------------------------------------------


def test_default_interfaces_never_browse_a_real_network_off_a_mac() -> None:
    expected = "all" if sys.platform == "darwin" else ["127.0.0.1"]
    assert d.default_interfaces() == expected
    assert d.choose_interfaces() == expected


def test_the_command_line_beats_the_setting_beats_the_default() -> None:
    assert d.choose_interfaces("en0, en1", ("en5",)) == ("en0", "en1")
    assert d.choose_interfaces(None, ("en5",)) == ("en5",)
    assert d.choose_interfaces("all") == "all"
    assert d.choose_interfaces(["127.0.0.1"]) == ("127.0.0.1",)
    assert d.choose_interfaces("", ()) == d.default_interfaces()


# -- which Python ------------------------------------------------------------------------


def _python_asked(script: str, path: str) -> str:
    """Run the probe's Python choice alone: what ``$_mm_py`` ends up as."""
    head = script.split("\n_mm_dir=")[0]  # the lines before the prelude's first command
    done = subprocess.run(
        ["/bin/sh", "-c", head + '\nprintf %s "$_mm_py"'],
        capture_output=True, text=True, env={"PATH": path}, check=True,
    )  # fmt: skip
    return done.stdout


def test_the_first_python_the_node_has_is_asked(tmp_path: Path) -> None:
    have = tmp_path / "bin"
    have.mkdir()
    (have / "python3").write_text("#!/bin/sh\n")
    (have / "python3").chmod(0o755)
    script = build_probe_script(["/nowhere/bin/python3", "python3"])
    assert _python_asked(script, str(have)) == "python3"
    script = build_probe_script([sys.executable, "python3"])
    assert _python_asked(script, str(have)) == sys.executable  # the same path as here
    assert _python_asked(build_probe_script(["/a/python", "/b/python"]), "") == "/b/python"
    assert _python_asked(build_probe_script("it's mine"), "") == "it's mine"
    with pytest.raises(ValueError):
        build_probe_script([])


# -- what a probe result does to a node -----------------------------------------------------


def test_a_probe_result_sets_state_facts_and_kind_in_one_change() -> None:
    registry = Registry()
    registry.set_manual_hosts([ManualHost("10.0.0.9")])
    changes: list[Node] = []
    registry.updated.connect(changes.append)
    box = parse_probe("10.0.0.9", probe_output(DEBIAN))
    registry.set_probe_result("10.0.0.9", ProbeState.READY, "", box)
    (node,) = changes
    assert node.probe_state is ProbeState.READY and node.facts is box
    assert node.is_mac is False and node.kind == "Linux" and node.rdma is False
    registry.set_probe_result("10.0.0.9", ProbeState.UNREACHABLE, "gone")
    node = registry.get("10.0.0.9")
    assert node is not None and node.facts is None and node.probe_message == "gone"
    registry.set_probe_result("nobody", ProbeState.READY, "", box)  # gone: ignored
    assert registry.get("nobody") is None


def test_a_probed_mac_shows_its_macos_and_rdma() -> None:
    registry = Registry()
    registry.peer_seen(STUDIO)
    facts = load_facts("mesh4")[0]
    registry.set_probe_result("Studio A", ProbeState.READY, "", facts)
    node = registry.get("Studio A")
    assert node is not None and node.macos == "26.2" and node.rdma is True
    assert node.kind == "Mac" and node.sources == {Source.BONJOUR}


def test_host_lists_that_do_not_remember(tmp_path: Path) -> None:
    path = tmp_path / "hosts.json"
    HostList(path).add("studio.local")
    looking = HostList(path, remember=False)
    looking.add("10.0.0.5:2222")
    assert [str(h) for h in looking.hosts()] == ["studio.local", "10.0.0.5:2222"]
    assert [str(h) for h in HostList(path).hosts()] == ["studio.local"]


# -- the Linux host ------------------------------------------------------------------------


def test_the_debian_box_through_the_real_script_is_a_linux_node(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("cat", "mkdir", "mktemp", "rm", "sleep"):
        os.symlink(shutil.which(tool), tools / tool)  # type: ignore[arg-type]
    fake = make_bin(DEBIAN, tmp_path / "bin")
    assert sorted(p.name for p in fake.iterdir()) == ["cat", "df", "macmesh-python", "uname"]
    run = local_runner(env={"PATH": f"{fake}:{tools}", "TMPDIR": str(tmp_path)})
    facts = parse_probe("debian-box", run(build_probe_script("macmesh-python")))
    assert facts == parse_probe("debian-box", probe_output(DEBIAN))
    assert facts.os_name == "Linux" and facts.is_macos is False and facts.darwin is None
    assert facts.python_version == "3.11.2" and facts.mlx_version == "0.32.4"
    # Its memory comes from /proc/meminfo, so the planner can give it layers.
    assert facts.memory_bytes == 24683584 * 1024 and facts.free_memory_bytes == 23847572 * 1024
    assert "memory_bytes" not in facts.unknowns
    assert facts.disk_free_bytes == 366851924 * 1024  # df -Pk . in its home
    assert facts.macos_version is None and facts.thunderbolt == () and facts.chip is None
    assert facts.unknowns["macos_version"] == "sw_vers: command not found"
    assert facts.rdma_ctl == "absent" and facts.ibv_stack is False
    verdict = node_verdict(facts)
    assert verdict.state == "unusable" and "runs Linux, not macOS" in verdict.reason


# -- macmesh nodes' report -------------------------------------------------------------------


def _ready(facts_list: list, names: list[str] | None = None) -> list[Node]:
    return [
        Node(f.name, hostname=f"{f.name}.local", is_mac=f.is_macos, facts=f,
             probe_state=ProbeState.READY, sources=frozenset({Source.BONJOUR}))
        for f in facts_list
    ]  # fmt: skip


def test_the_text_report_names_the_missing_cables_and_each_fix() -> None:
    facts = load_facts("ring4")
    nodes = [
        *_ready(facts),
        Node("Mini", hostname="mini.local", ssh_port=None, probe_state=ProbeState.UNREACHABLE,
             probe_message="Remote Login is off on Mini"),
    ]  # fmt: skip
    text = render(nodes, build_topology(facts))
    assert "ring-a — Mac, ring-a.local:22" in text
    assert "RDMA on: ring-a has RDMA over Thunderbolt on" in text
    assert "Python 3.12.8" in text and "mlx 0.32.4" in text
    assert "  unreachable: Remote Login is off on Mini" in text
    assert "Topology: Ring:" in text
    assert "  connect ring-a port" in text and "ring-c" in text  # the diagonal a mesh needs


def test_the_json_report_has_the_same_facts() -> None:
    mac, box = load_facts("pair27")[1], parse_probe("debian-box", probe_output(DEBIAN))
    nodes = _ready([mac, box])
    data = report(nodes, build_topology([mac]), ("127.0.0.1",))
    assert data["interfaces"] == ["127.0.0.1"]
    first, second = data["nodes"]
    assert first["rdma"]["state"] == "off" and first["rdma"]["guide"] == "rdma-macos27"
    assert first["rdma"]["fix"].startswith("Turn on RDMA in System Settings")
    assert second["kind"] == "Linux" and second["os"] == "Linux" and second["chip"] is None
    assert data["topology"]["shape"] == "single"
    unprobed = node_json(Node("new.local", probe_state=ProbeState.NEW))
    assert unprobed["state"] == "new" and "rdma" not in unprobed


def test_macmesh_nodes_exits_1_in_one_line_when_no_node_is_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A named host that refuses connections is listed as unreachable, and the command
    fails (exit 1) with one line on stderr saying what to do."""
    monkeypatch.setenv("MACMESH_SSH_DIR", str(tmp_path / "ssh"))
    with socket.socket() as bound:  # bound, never listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        host = f"127.0.0.1:{bound.getsockname()[1]}"
        argv = ["--host", host, "--no-publish", "--wait", "0", "--interfaces", "127.0.0.1"]
        assert nodes_cli(argv) == 1
    out, err = capsys.readouterr()
    assert f"{host} — " in out and "  unreachable: " in out
    [line] = err.splitlines()
    assert line.startswith("macmesh nodes: none of the ") and "is ready" in line
    assert "run macmesh nodes again" in line


def test_the_not_ready_line_says_what_to_do() -> None:
    assert "--host" in not_ready_message([]) and "--interfaces all" in not_ready_message([])
    mini = Node("Mini", hostname="mini.local", probe_state=ProbeState.UNREACHABLE)
    assert not_ready_message([mini]).startswith("none of the 1 node(s) found is ready.")


def test_browsing_loopback_never_connects_out_to_what_was_announced_there(
    tmp_path: Path,
) -> None:
    """Loopback multicast is shared by every program here: a record another one announced
    with a LAN address is listed, not probed; a host typed by hand is reached as asked."""
    from core.cluster.scanner import Scanner

    scanner = Scanner(interfaces=["127.0.0.1"], host_list=HostList(tmp_path / "h.json"),
                      publish=False)  # fmt: skip
    far = Node("Studio Z", hostname="studio-z.local", addresses=("192.0.2.10",),
               sources=frozenset({Source.BONJOUR}))  # fmt: skip
    near = Node("Studio Y", hostname="studio-y.local", addresses=("127.0.0.3",),
                sources=frozenset({Source.BONJOUR}))  # fmt: skip
    typed = Node("192.0.2.10", addresses=("192.0.2.10",), sources=frozenset({Source.MANUAL}))
    assert scanner._off_limits(far, "192.0.2.10")
    assert not scanner._off_limits(near, "127.0.0.3")
    assert not scanner._off_limits(typed, "192.0.2.10")
    anywhere = Scanner(interfaces="all", host_list=HostList(tmp_path / "h.json"), publish=False)
    assert not anywhere._off_limits(far, "192.0.2.10")
    scanner.close()
    anywhere.close()
