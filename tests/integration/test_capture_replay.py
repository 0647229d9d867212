"""Capture and replay round trip (issue 27): the ring4 test bench captured with
``macmesh doctor --capture``, served again by ``python -m tests.helpers.testbench
--replay``, gives ``macmesh nodes --json`` the same facts, topology and verdicts as the
original, aliases aside. Everything on loopback; Bonjour on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from core.cluster.probe.facts import parse_probe
from tests.fixtures.macos.hosts import hosts, load_facts
from tests.fixtures.macos.hosts import probe_output as fixture_output
from tests.helpers.replay import capture_fixture_set, captured_linux, replay_hosts
from tests.helpers.sshd import require_sshd, running_sshd
from tests.helpers.testbench import mac_records, published, trusted_known_hosts
from tests.integration.test_doctor_cli import client_env, fake_bins

ROOT = Path(__file__).resolve().parents[2]
COMMON = ["--json", "--no-publish", "--interfaces", "127.0.0.1", "--python", "macmesh-python"]
SAME = ("kind", "state", "os", "chip", "memory_bytes", "macos", "macos_build", "python",
        "mlx", "mlx_lm", "bridge", "unknowns")  # fmt: skip


def macmesh(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    argv = [sys.executable, "-m", "gui.cli", *args]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def renamed(value: Any, names: dict[str, str]) -> Any:
    """``value`` (JSON) with every original node name said as its alias."""
    text = json.dumps(value)
    for name, alias in names.items():
        text = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", alias, text)
    return json.loads(text)


def comparable(node: dict[str, Any]) -> dict[str, Any]:
    """What must survive a capture: the facts and the verdicts, not the addresses."""
    out = {key: node.get(key) for key in SAME}
    out["rdma"] = {k: node["rdma"][k] for k in ("state", "reason", "guide", "fix")}
    out["thunderbolt_ports"] = [
        [p["port"], p["interface"], p["connected"], p["speed_gbps"], len(p["addresses"])]
        for p in node["thunderbolt_ports"]
    ]
    out["network"] = [
        [i["interface"], i["kind"], i["up"], i["status"], len(i["addresses"]), i["members"]]
        for i in node["network"]
    ]
    return out


def test_the_helper_turns_a_capture_into_a_fixture_set_with_the_same_facts(
    tmp_path: Path,
) -> None:
    """In one call, no sshd: each replayed node parses to its original's facts."""
    from core.cluster.capture import write_capture
    from core.cluster.registry import Node, ProbeState

    facts = load_facts("mesh4")
    nodes = [Node(f.name, facts=f, probe_state=ProbeState.READY) for f in facts]
    capture = write_capture(tmp_path / "mesh4.zip", nodes, log_root=tmp_path / "none")
    folder = capture_fixture_set(capture, tmp_path / "mesh4-replayed")
    replayed = replay_hosts(folder)
    assert [h.name for h in replayed] == ["mac-1", "mac-2", "mac-3", "mac-4"]
    for original, host in zip(hosts("mesh4"), replayed, strict=True):
        before = parse_probe("x", fixture_output(original))
        after = parse_probe("x", fixture_output(host))
        assert after.thunderbolt == before.thunderbolt and after.unknowns == before.unknowns
        assert (after.chip, after.memory_bytes, after.rdma_devices, after.disk_free_bytes) == (
            before.chip, before.memory_bytes, before.rdma_devices, before.disk_free_bytes
        )  # fmt: skip


def test_a_captured_linux_host_is_announced_as_a_linux_box(tmp_path: Path) -> None:
    """The test bench publishes a replayed Linux host with SSH only (as Avahi does), not
    with a Mac's device-info record (model Mac15,14)."""
    from core.cluster.capture import write_capture
    from core.cluster.registry import Node, ProbeState

    facts = [*load_facts("pair27"), *load_facts("linux")]
    nodes = [Node(f.name, facts=f, probe_state=ProbeState.READY) for f in facts]
    nodes[0] = replace(nodes[0], is_mac=True)
    capture = write_capture(tmp_path / "mixed.zip", nodes, log_root=tmp_path / "none")
    assert captured_linux(capture) == {"mac-3"}


def test_ring4_captured_and_replayed_gives_the_same_nodes_report(tmp_path: Path) -> None:
    require_sshd()
    token = uuid.uuid4().hex[:6]
    host_dirs = hosts("ring4")
    addresses = [f"127.0.0.{n + 2}" for n in range(len(host_dirs))]
    names = [f"{h.name}-{token}" for h in host_dirs]
    capture = tmp_path / "ring4.zip"
    bins = fake_bins(host_dirs, addresses, tmp_path)
    with running_sshd(tmp_path / "sshd", bins, addresses) as server:
        known = trusted_known_hosts(server, [f"{n}.local" for n in names], tmp_path / "kh")
        env = client_env(server, tmp_path, known.read_text())
        records = []
        for name, address in zip(names, addresses, strict=True):
            records += mac_records(name, name, address, server.port)
        with published(records):
            _, original = macmesh(env, "nodes", *COMMON, "--wait", "4")
            _, doctored = macmesh(
                env, "doctor", *COMMON, "--wait", "4", "--no-try-paths", "--capture", str(capture)
            )
    # The capture's aliases follow the doctor's order of the nodes.
    aliases = {name: f"mac-{n + 1}" for n, name in enumerate(doctored["nodes"])}
    ours = {name: aliases[name] for name in names}

    bench = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.testbench", "--replay", str(capture), "--trust"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True,
    )  # fmt: skip
    try:
        said = _until(bench, "Ctrl-C ends it", 120)
        ssh_dir = re.search(r"MACMESH_SSH_DIR=(\S+)", said)
        assert ssh_dir, said
        replay_env = {**env, "MACMESH_SSH_DIR": ssh_dir[1]}
        _, replayed = macmesh(replay_env, "nodes", *COMMON, "--wait", "4")
    finally:
        os.killpg(bench.pid, signal.SIGTERM)
        try:
            bench.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait(10)

    before = {ours[n["name"]]: n for n in original["nodes"] if n["name"] in ours}
    after = {n["name"]: n for n in replayed["nodes"] if n["name"] in ours.values()}
    assert sorted(after) == sorted(before) == ["mac-1", "mac-2", "mac-3", "mac-4"]
    for alias, node in before.items():
        assert renamed(comparable(node), ours) == comparable(after[alias]), alias
        assert after[alias]["state"] == "ready"
    topology = renamed(original["topology"], ours)
    assert replayed["topology"]["shape"] == topology["shape"] == "ring"
    for key in ("verdict", "cables", "missing", "stray", "notes"):
        assert replayed["topology"][key] == topology[key], key


def _until(process: subprocess.Popen[str], marker: str, timeout: float) -> str:
    """What ``process`` printed up to the line holding ``marker`` (read on a thread: a
    pipe's buffered lines are not seen by select)."""
    assert process.stdout is not None
    stream = process.stdout
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(line) for line in iter(stream.readline, "")], daemon=True
    ).start()
    text, deadline = "", time.monotonic() + timeout
    while marker not in text:
        left = deadline - time.monotonic()
        assert left > 0 and process.poll() is None, f"the test bench did not start: {text}"
        with contextlib.suppress(queue.Empty):
            text += lines.get(timeout=min(left, 1.0))
    return text


def test_a_missing_command_stays_missing_and_a_cut_section_replays_as_one_that_hung() -> None:
    from core.cluster.probe.sections import Section
    from tests.helpers.replay import _files

    missing = Section("rdma_ctl", 127, "", "macmesh-probe: rdma_ctl: command not found")
    assert _files(missing) == {}
    cut = _files(Section("system_profiler", None, '{"SPHardwareDataType"', ""))
    assert cut[""] == '{"SPHardwareDataType"' and cut[".rc"] == "124\n"
    assert "cut off" in cut[".stderr"]
    assert _files(Section("ibv_devices", 1, "", "No IB devices found")) == {
        "": "",
        ".stderr": "No IB devices found",
        ".rc": "1\n",
    }
    assert _files(Section("sw_vers", 0, "ProductName: macOS", "")) == {"": "ProductName: macOS"}
