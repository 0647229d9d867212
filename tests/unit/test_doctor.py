"""``macmesh doctor``'s verdicts (core.run.checks.doctor) over the fixture sets' facts and
over each way a node can fail to be found: every verdict with its fix."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import paramiko
import pytest

from core.cluster.probe.facts import NodeFacts
from core.cluster.registry import Node, ProbeState, Source
from core.remote.ssh import (
    AuthFailed,
    HostKeyChanged,
    RemoteLoginOff,
    SSHError,
    SSHTimeout,
    UnknownHostKey,
)
from core.remote.targets import Target
from core.run.checks.doctor import DoctorReport, diagnose, format_doctor
from core.run.checks.report import CLUSTER, Check
from core.run.checks.seen import Seen, seen_by, simulated_seen
from core.run.demo import demo_nodes
from tests.fixtures.macos.hosts import load_facts

LOOPBACK = ["127.0.0.1"]


def ready(facts: NodeFacts, n: int, sources: frozenset[Source] | None = None) -> Seen:
    address = f"127.0.0.{n + 2}"
    node = Node(
        facts.name,
        hostname=f"{facts.name}.local",
        addresses=(address,),
        sources=sources if sources is not None else frozenset({Source.BONJOUR}),
        is_mac=True,
        facts=facts,
        probe_state=ProbeState.READY,
    )
    target = Target(
        name=facts.name, host=f"{facts.name}.local", python="macmesh-python", address=address
    )
    return Seen(node, None, target)


def cluster(fixture_set: str, on_mac: bool = True) -> DoctorReport:
    seen = [ready(f, n) for n, f in enumerate(load_facts(fixture_set))]
    return diagnose(seen, LOOPBACK, on_mac=on_mac)


def find(report: DoctorReport, name: str, node: str | None = None) -> list[Check]:
    return [
        f.check
        for f in report.findings
        if f.check.name == name and (node is None or f.check.node == node)
    ]


def one(report: DoctorReport, name: str, node: str | None = None) -> Check:
    found = find(report, name, node)
    assert len(found) == 1, found
    return found[0]


# -- the fixture sets ---------------------------------------------------------------------


def test_a_healthy_ring_can_run_a_job_over_rdma() -> None:
    report = cluster("ring4")
    assert report.ok and report.ready == ("ring-a", "ring-b", "ring-c", "ring-d")
    assert not [f for f in report.findings if f.check.status == "fail"]
    assert {f.group for f in report.findings} == {"finding", "running", "linking"}
    assert one(report, "backend").message.startswith("jaccl-ring: RDMA over Thunderbolt")
    cables = find(report, "cable")
    assert len(cables) == 5 and all(c.status == "ok" and "80 Gb/s" in c.message for c in cables)
    assert "Ring: ring-a – ring-b – ring-c – ring-d" in one(report, "cabling").message
    # Cables without IPv4 do not matter while RDMA runs over them.
    assert all(c.status == "ok" and "none needed" in c.message for c in find(report, "ipv4"))
    ports = find(report, "rdma-port", "ring-a")
    assert len(ports) == 3 and all("PORT_ACTIVE" in c.message for c in ports)
    assert "Every node can run a job" in format_doctor(report)


def test_rdma_disabled_on_macos_27_names_the_settings_switch_and_python_without_mlx_fails() -> None:
    report = cluster("pair27")
    rdma = one(report, "rdma", "studio-f")
    assert rdma.status == "warn" and "turned off on studio-f" in rdma.message
    assert "Turn on RDMA in System Settings (macOS 27 and later)" in rdma.fix
    python = one(report, "python", "studio-f")
    assert python.status == "fail" and "has no mlx or mlx-lm" in python.message
    assert "-m pip install mlx mlx-lm" in python.fix
    # studio-e's port waits for studio-f: the fix says so rather than "restart".
    port = one(report, "rdma-port", "studio-e")
    assert port.status == "warn" and "PORT_DOWN" in port.message
    assert "other end of the cable has RDMA on too" in port.fix
    assert not report.ok


def test_thunderbolt_4_macs_are_told_rdma_cannot_come_and_offered_an_address_for_the_ring() -> None:
    report = cluster("mini-tb4")
    rdma = one(report, "rdma", "mini-h")
    assert rdma.status == "warn" and "only Thunderbolt 4 ports" in rdma.message
    assert "Thunderbolt 4 cannot carry RDMA" in rdma.fix
    assert "3 Thunderbolt 4 ports" in one(report, "thunderbolt", "mini-h").message
    cable = one(report, "cable")
    assert cable.status == "warn" and "40 Gb/s" in cable.message
    ipv4 = one(report, "ipv4", "mini-h")
    assert ipv4.status == "warn" and "no IPv4 address (IPv6 link-local only)" in ipv4.message
    assert "Configure IPv4" in ipv4.fix
    offers = find(report, "network")
    assert offers and all("sudo ifconfig" in c.fix and "undo" in c.fix for c in offers)
    assert report.ok  # slower, but a ring job runs


def test_an_active_thunderbolt_bridge_is_named_with_its_guide() -> None:
    report = cluster("bridge")
    bridge = one(report, "bridge", "studio-j")
    assert bridge.status == "warn" and "en2, en3" in bridge.message
    assert "Turn off the Thunderbolt Bridge" in bridge.fix
    assert one(report, "bridge", "studio-k").status == "ok"


def test_a_dock_between_the_macs_and_an_old_macos() -> None:
    report = cluster("dock")
    cable = one(report, "cable")
    assert "through TS5 Plus" in cable.message and cable.status == "warn"
    assert "Update macOS before turning on RDMA" in one(report, "rdma", "mbp-m").fix


def test_ipv6_only_cables_make_the_ring_take_the_lan_with_the_change_offered() -> None:
    report = cluster("tb-off")
    for node in ("studio-p", "studio-q"):
        assert one(report, "ipv4", node).status == "warn"
    backend = one(report, "backend")
    assert backend.message.startswith("Ring over Ethernet (en0)")
    paths = find(report, "ring-path")
    assert len(paths) == 2 and all("Ethernet (en0)" in c.message for c in paths)


def test_a_thunderbolt_4_cable_between_thunderbolt_5_macs_names_the_cable() -> None:
    report = cluster("tb4-cable")
    cable = one(report, "cable")
    assert cable.status == "warn" and "Both Macs have Thunderbolt 5" in cable.fix
    assert "runs at 40 Gb/s" in cable.message and "Thunderbolt 5 cable" in cable.fix
    assert one(report, "rdma", "studio-u").status == "ok"  # the Macs are fine
    port = one(report, "rdma-port", "studio-u")
    assert "40 Gb/s, which carries no RDMA" in port.message
    assert port.fix == cable.fix  # one verdict: the cable's (core.cluster.rdma)
    assert one(report, "backend").message.startswith("Ring over Thunderbolt (en2)")
    assert report.ok


def test_different_users_and_python_paths_are_named_with_the_fix_for_mlx_launch() -> None:
    facts = load_facts("users-pythons")
    seen = [ready(f, n) for n, f in enumerate(facts)]
    users = zip(seen, ["alice", "bob"], strict=True)
    seen = [Seen(replace(s.node, user=user), s.error, s.target) for s, user in users]
    report = diagnose(seen, LOOPBACK, on_mac=False)
    paths = one(report, "python-paths")
    assert paths.status == "warn"
    assert "/Users/alice/.venv/bin/python3" in paths.message
    assert "/opt/homebrew/bin/python3" in paths.message and "alice, bob" in paths.message
    assert "one path" in paths.fix and "--python PATH" in paths.fix
    assert all(c.status == "ok" for c in find(report, "python"))
    assert report.ok
    same = one(cluster("ring4"), "python-paths")
    assert same.status == "ok" and "/Users/admin/mlx/bin/python3" in same.message


@pytest.mark.parametrize(
    "fixture_set",
    [
        "mesh4", "tb-bridge", "tb-mixed", "tb4-cable", "users-pythons",
        "tb-hub", "two-cables", "tb-noip4", "localnet-denied",
    ],
)  # fmt: skip
def test_every_set_gives_every_ready_mac_each_group(fixture_set: str) -> None:
    report = cluster(fixture_set)
    for name in report.nodes:
        names = {f.check.name for f in report.findings if f.check.node == name}
        assert {"bonjour", "remote-login", "host-key", "python", "disk", "memory"} <= names
        assert {"thunderbolt", "rdma", "bridge"} <= names
    assert all(f.check.fix for f in report.findings if f.check.status == "fail")


def test_version_skew_fails_with_the_pip_line() -> None:
    facts = load_facts("mesh4")
    odd = NodeFacts(**{**vars(facts[1]), "mlx_version": "0.31.0"})
    seen = [ready(f, n) for n, f in enumerate([facts[0], odd, facts[2]])]
    report = diagnose(seen, LOOPBACK, on_mac=False)
    skew = one(report, "versions", odd.name)
    assert skew.status == "fail" and "mlx 0.31.0" in skew.message
    assert "pip install mlx==0.32.4 mlx-lm==0.32.2" in skew.fix
    assert not report.ok


def test_low_disk_unknown_wired_limit_and_memory_pressure_warn() -> None:
    facts = load_facts("ring4")[0]
    low = NodeFacts(
        **{
            **vars(facts),
            "disk_free_bytes": 3 * 1024**3,
            "memory_pressure": 4,
            "wired_limit_mb": None,
            "unknowns": {"wired_limit_mb": "sysctl: unknown oid 'iogpu.wired_limit_mb'"},
        }
    )
    report = diagnose([ready(low, 0)], LOOPBACK, on_mac=False)
    disk = one(report, "disk")
    assert disk.status == "warn" and "only 3 GB free" in disk.message and "--cache-root" in disk.fix
    memory = find(report, "memory")
    assert [c.status for c in memory] == ["ok", "warn", "warn"]
    assert "unknown oid" in memory[1].message and "critical" in memory[2].message
    assert "Quit apps" in memory[2].fix


# -- finding ------------------------------------------------------------------------------


def lost(name: str, state: ProbeState, error: SSHError | None, ssh_port: int | None = 22) -> Seen:
    node = Node(
        name,
        hostname=f"{name}.local",
        ssh_port=ssh_port,
        sources=frozenset({Source.BONJOUR}),
        probe_state=state,
        probe_message=str(error or ""),
    )
    return Seen(node, error)


def test_each_way_of_not_reaching_a_node_says_its_fix() -> None:
    unknown = UnknownHostKey("new.local", 22, paramiko.ECDSAKey.generate(), Path("/tmp/kh"))
    seen = [
        lost("off", ProbeState.UNREACHABLE, RemoteLoginOff("off.local", "refused on port 22")),
        lost("sleepy", ProbeState.UNREACHABLE, SSHTimeout("sleepy.local", "no answer in 10 s")),
        lost("denied", ProbeState.NEEDS_ACCESS, AuthFailed("denied.local", "key refused")),
        lost(
            "changed",
            ProbeState.HOST_KEY_CHANGED,
            HostKeyChanged("changed.local", "SHA256:b", "SHA256:a", Path("/tmp/kh")),
        ),
        lost("noshh", ProbeState.UNREACHABLE, None, ssh_port=None),
        lost("new", ProbeState.NEEDS_HOST_KEY, unknown),
    ]
    report = diagnose(seen, LOOPBACK, on_mac=False)
    assert not report.ok and report.ready == ()
    off = one(report, "remote-login", "off")
    assert off.status == "fail" and "Remote Login there" in off.fix
    assert one(report, "firewall", "sleepy").status == "fail"
    assert "firewall" in one(report, "firewall", "sleepy").fix
    assert one(report, "remote-login", "sleepy").status == "warn"
    assert one(report, "access", "denied").status == "fail"
    assert "Set up access" in one(report, "access", "denied").fix
    assert one(report, "remote-login", "denied").status == "ok"  # sshd answered
    changed = one(report, "host-key", "changed")
    assert changed.status == "fail" and "CHANGED" in changed.message
    assert "before removing the old one" in changed.fix
    noshh = one(report, "remote-login", "noshh")
    assert noshh.status == "fail" and "Sharing > Remote Login" in noshh.fix
    new = one(report, "host-key", "new")
    assert new.status == "fail" and "fingerprint" in new.fix and unknown.fingerprint in new.message
    assert format_doctor(report).splitlines()[-1] == (
        "Not ready: 6 checks failed; off, sleepy, denied, changed, noshh, new could not be "
        "probed. Fix what each FAIL says, then run macmesh doctor again."
    )


def test_bonjour_says_on_which_of_this_machines_interfaces_each_node_is_seen() -> None:
    """studio-e runs the doctor (probed with its own shell); studio-f is seen at its
    Ethernet address, at an IPv6 link-local address scoped to the cable, and at an
    address no interface of studio-e holds."""
    here, there = load_facts("pair27")
    me = replace(ready(here, 0), node=replace(ready(here, 0).node, is_self=True))
    other = ready(there, 1)
    addresses = ("10.0.0.242", "fe80::f2f2:f2f2:ff:7%en2", "fe80::9", "192.0.2.7")
    other = replace(other, node=replace(other.node, addresses=addresses))
    bonjour = one(diagnose([me, other], LOOPBACK, on_mac=True), "bonjour", "studio-f")
    assert bonjour.status == "ok"
    assert bonjour.message == (
        "studio-f is seen over Bonjour at 10.0.0.242 on this machine's en0 (Ethernet), "
        "fe80::f2f2:f2f2:ff:7%en2 on this machine's en2 (Thunderbolt 1), fe80::9, 192.0.2.7 "
        "(browsing 127.0.0.1)."
    )
    # Without this machine's facts (not probed), the addresses alone.
    alone = one(diagnose([other], LOOPBACK, on_mac=True), "bonjour", "studio-f")
    assert alone.message.startswith("studio-f is seen over Bonjour at 10.0.0.242, fe80::")


def test_local_network_permission() -> None:
    facts = load_facts("pair27")
    by_hand = [ready(f, n, frozenset({Source.MANUAL})) for n, f in enumerate(facts)]
    denied = one(diagnose(by_hand, LOOPBACK, on_mac=True), "local-network", CLUSTER)
    assert denied.status == "warn" and "Local Network permission may be denied" in denied.message
    assert "Privacy & Security > Local Network" in denied.fix
    assert one(diagnose(by_hand, LOOPBACK, on_mac=True), "bonjour", facts[0].name).status == "warn"
    found = [ready(f, n) for n, f in enumerate(facts)]
    assert one(diagnose(found, LOOPBACK, on_mac=True), "local-network").status == "ok"
    linux = one(diagnose(by_hand, LOOPBACK, on_mac=False), "local-network")
    assert linux.status == "ok" and "not a Mac" in linux.message


def test_this_macs_mdns_sends_refused_say_the_permission_is_denied() -> None:
    """The doctor's first sign (``send_errors``, from ``mdns_send_errors``): every send
    refused with EHOSTUNREACH is the permission denied, even with no Mac named."""
    from core.cluster.localnet import MACOS_EHOSTUNREACH

    refused = {"en0": MACOS_EHOSTUNREACH, "en1": MACOS_EHOSTUNREACH}
    check = one(diagnose([], "all", on_mac=True, send_errors=refused), "local-network")
    assert check.status == "warn"
    assert check.message.startswith(
        "Bonjour cannot send on any interface (en0, en1: [Errno 65] No route to host): "
        "macOS's Local Network permission is denied for MacMesh (browsing all)."
    )
    assert check.fix.startswith("On this Mac open System Settings > Privacy & Security")
    facts = load_facts("pair27")
    found = [ready(f, n) for n, f in enumerate(facts)]
    sent = one(diagnose(found, "all", on_mac=True, send_errors={"en0": None}), "local-network")
    assert sent.status == "ok"


def test_the_local_network_check_is_localnets_verdict_with_its_fix() -> None:
    """localnet-denied: healthy nodes that answer over SSH, none seen over Bonjour."""
    facts = load_facts("localnet-denied")
    by_hand = [ready(f, n, frozenset({Source.MANUAL})) for n, f in enumerate(facts)]
    report = diagnose(by_hand, LOOPBACK, on_mac=True)
    check = one(report, "local-network", CLUSTER)
    assert check.status == "warn"
    assert check.message.startswith(
        "Bonjour found none of the Macs that answer over SSH (studio-l, studio-m): macOS's "
        "Local Network permission may be denied for MacMesh, or they are on another network"
    )
    assert check.fix == (
        "On this Mac open System Settings > Privacy & Security > Local Network, switch "
        "MacMesh off and on again, then restart MacMesh."
    )
    assert report.ok  # named by hand, the nodes still run a job
    nothing = one(diagnose([], LOOPBACK, on_mac=True), "local-network")
    assert nothing.status == "warn" and "no Mac was named to compare with" in nothing.message
    assert "--host" in nothing.fix and "Local Network" in nothing.fix


def test_a_hubs_ports_and_cable_say_the_cable_verdicts_fix() -> None:
    report = cluster("tb-hub")
    cable = one(report, "cable")
    assert cable.status == "warn" and "through Thunderbolt Hub runs at 40 Gb/s" in cable.message
    assert cable.fix == (
        "Take out Thunderbolt Hub: plug a Thunderbolt 5 cable from studio-ha port 1 straight "
        "into studio-hb port 1."
    )
    assert "Fix:" not in cable.message  # said once, as the fix
    assert [c.fix for c in find(report, "rdma-port")] == [cable.fix, cable.fix]


def test_no_node_is_not_ok() -> None:
    report = diagnose([], LOOPBACK, on_mac=False)
    assert not report.ok and "No node found" in format_doctor(report)
    assert report.to_dict()["ok"] is False


def test_the_ring_paths_are_tried_and_a_dead_one_is_said_with_the_firewall_fix() -> None:
    """Both nodes on this machine: the listener cannot bind the fixtures' Ethernet
    addresses, so the ring falls back to the address each node is reached at."""
    import sys

    seen = []
    for n, facts in enumerate(load_facts("tb-off")):
        s = ready(facts, n)
        assert s.target is not None
        local = replace(s.target, local=True, python=sys.executable, address="127.0.0.1")
        seen.append(Seen(s.node, None, local))
    report = diagnose(seen, LOOPBACK, on_mac=False, try_links=True)
    paths = find(report, "ring-path")
    assert len(paths) == 2 and all(c.status == "warn" for c in paths)
    assert all("did not answer" in c.message and "127.0.0.1" in c.message for c in paths)
    assert all("firewall" in c.fix for c in paths)
    assert "Ethernet (en0)" in paths[0].message
    untried = find(diagnose(seen, LOOPBACK, on_mac=False), "ring-path")
    assert all(c.status == "ok" and "Ethernet (en0)" in c.message for c in untried)


def test_a_linux_host_has_no_gpu_limit_to_read() -> None:
    from core.cluster.probe.facts import parse_probe
    from tests.fixtures.macos.hosts import ROOT, probe_output

    box = parse_probe("debian-box", probe_output(ROOT / "linux" / "debian-box"))
    report = diagnose([ready(box, 0)], LOOPBACK, on_mac=False)
    [memory] = find(report, "memory")
    assert memory.status == "ok" and "MLX runs on its CPU there" in memory.message
    assert "GPU" not in memory.message
    assert one(report, "blas").name == "blas"  # preflight's own check of a CPU node


# -- gathering: a scanner's nodes, the demo's simulated Macs --------------------------------


class Probing:
    """A scanner's two answers the doctor needs: targets of ready nodes, SSH failures."""

    def __init__(self, errors: dict[str, SSHError]) -> None:
        self.errors = errors
        self.asked: list[str] = []

    def target(self, name: str) -> Target:
        self.asked.append(name)
        if name == "gone":  # stopped being ready after the registry was read
            raise ValueError("gone is not ready")
        return Target(name=name, host=f"{name}.local")

    def probe_error(self, name: str) -> SSHError | None:
        return self.errors.get(name)


def test_seen_by_a_scanner_keeps_each_nodes_failure_and_the_ready_ones_targets() -> None:
    timeout = SSHTimeout("sleepy.local", "no answer in 10 s")
    facts = load_facts("pair27")[0]
    nodes = [
        Node(facts.name, facts=facts, probe_state=ProbeState.READY),
        Node("gone", facts=replace(facts, name="gone"), probe_state=ProbeState.READY),
        Node("sleepy", probe_state=ProbeState.UNREACHABLE),
    ]
    scanner = Probing({"sleepy": timeout})
    seen = seen_by(scanner, nodes)
    assert [s.node for s in seen] == nodes
    assert seen[0].target is not None and seen[0].target.host == f"{facts.name}.local"
    assert seen[1].target is None and seen[2].target is None
    assert seen[2].error is timeout and seen[0].error is None
    assert scanner.asked == [facts.name, "gone"]  # a node not ready has no target to ask


def test_the_demos_simulated_macs_are_checked_with_this_machines_python() -> None:
    here = replace(
        load_facts("ring4")[0],
        python_version="3.12.1",
        python_executable="/opt/here/python3",
        mlx_version="0.30.0",
        mlx_lm_version="0.29.0",
        disk_free_bytes=500 * 1024**3,
    )
    nodes = demo_nodes(2)
    seen = simulated_seen(nodes, here)
    assert [s.node.name for s in seen] == ["Studio A", "Studio B"]
    for s, node in zip(seen, nodes, strict=True):
        assert s.facts is not None and s.target is not None and s.target.local
        assert s.facts.python_executable == "/opt/here/python3" and s.facts.mlx_version == "0.30.0"
        assert s.facts.memory_bytes == node.facts.memory_bytes  # the rest is the simulated Mac's
    report = diagnose(seen, LOOPBACK, on_mac=True)
    bonjour = find(report, "bonjour")
    assert [c.status for c in bonjour] == ["ok", "ok"]
    assert all("simulated Mac of the demo cluster" in c.message for c in bonjour)
    assert not find(report, "remote-login") and not find(report, "host-key")
    python = one(report, "python", "Studio A")
    assert python.status == "ok" and "/opt/here/python3" in python.message
    # The simulated Macs are not Macs Bonjour should have found: no permission blamed.
    assert "answer over SSH" not in one(report, "local-network").message


def test_a_replayed_captures_macs_keep_their_own_python_in_the_report(tmp_path: Path) -> None:
    """``macmesh demo --replay``: a captured Mac's checks are the studio's, so they name
    the Python it ran there, never this machine's (whose path beside the captured
    "command not found" read as a contradiction)."""
    from core.cluster.capture import write_capture
    from core.run.demo import replay_nodes
    from tests.unit.test_capture import fixture_nodes

    capture = write_capture(tmp_path / "c.zip", fixture_nodes("pair27"), log_root=tmp_path)
    here = replace(
        load_facts("ring4")[0],
        python_executable="/opt/here/python3",
        blas_path="/usr/lib/libopenblas.so.0",
        blas_source="system",
    )
    nodes = replay_nodes(capture)
    broken = nodes[1].facts
    assert broken is not None and broken.probe_output
    nodes[1] = replace(
        nodes[1],
        facts=replace(
            broken,
            python_version=None,
            python_executable=None,
            unknowns={**broken.unknowns, "python_version": "python3: command not found"},
        ),
    )
    report = diagnose(simulated_seen(nodes, here), LOOPBACK, on_mac=True)
    ok = one(report, "python", "mac-1")
    assert ok.status == "ok" and "/Users/user-1/mlx/bin/python3" in ok.message
    failed = one(report, "python", "mac-2")
    assert failed.status == "fail" and "/opt/here" not in failed.message
    assert failed.message == (
        "mac-2 has no usable Python at the Python it was probed with (python3: command not found)."
    )
    bonjour = one(report, "bonjour", "mac-1")
    assert bonjour.message.startswith("mac-1 is a Mac of the replayed capture:")
    # Off a Mac their ranks run on this CPU, with this machine's BLAS, not "install
    # Debian's libopenblas0 on mac-1".
    if sys.platform != "darwin":
        blas = one(report, "blas", "mac-1")
        assert blas.status == "ok" and "/usr/lib/libopenblas.so.0" in blas.message
    else:
        assert not find(report, "blas")
