"""core.cluster.scanner end to end: Bonjour records on 127.0.0.1, a real sshd serving simulated
Macs and a Debian box on 127.0.0.2-.5, paramiko's password server on 127.0.0.6.

Instance names carry a random token (loopback multicast is shared by every process on
the machine). Every wait polls a condition with a generous limit: the machine is busy.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from core.cluster import discovery as d
from core.cluster.hosts import HostList
from core.cluster.registry import Node, ProbeState, Registry
from core.cluster.scanner import NodeNotReady, Scanner
from core.remote import ssh
from tests.fixtures.macos.make_bin import make_bin
from tests.helpers.procs import command_line
from tests.helpers.sshd import SSHServer, password_server, running_sshd, session_processes
from tests.helpers.testbench import mac_records, published, service

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "macos"
LOOPBACK = ["127.0.0.1"]
MACS = {"127.0.0.2": "studio-a", "127.0.0.3": "studio-b", "127.0.0.4": "studio-c"}
LINUX = "127.0.0.5"
WAIT = 60.0


@pytest.fixture(scope="module")
def sshd_addresses() -> tuple[str, ...]:
    return (*MACS, LINUX)


@pytest.fixture(scope="module")
def sshd_host_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("scanner-bins")
    bins = {a: make_bin(FIXTURES / "mesh4" / h, root / h) for a, h in MACS.items()}
    bins[LINUX] = make_bin(FIXTURES / "linux" / "debian-box", root / "debian-box")
    return bins


@pytest.fixture
def token() -> str:
    return uuid.uuid4().hex[:6]


@pytest.fixture(autouse=True)
def private_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never the person's own hosts.json or ~/.ssh."""
    monkeypatch.setenv("MACMESH_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("MACMESH_SSH_DIR", str(tmp_path / "no-ssh"))


def wait_until(what: str, predicate: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def state(scanner: Scanner, name: str) -> ProbeState | None:
    node = scanner.registry.get(name)
    return node.probe_state if node else None


class States:
    """Every probe state each node went through, in order."""

    def __init__(self, registry: Registry) -> None:
        self.seen: dict[str, list[ProbeState]] = {}
        self._lock = threading.Lock()
        registry.added.connect(self._node)
        registry.updated.connect(self._node)

    def _node(self, node: Node) -> None:
        with self._lock:
            states = self.seen.setdefault(node.name, [])
            if not states or states[-1] != node.probe_state:
                states.append(node.probe_state)

    def of(self, name: str) -> list[ProbeState]:
        with self._lock:
            return list(self.seen.get(name, []))


def make_scanner(server: SSHServer, known_hosts: Path, **kw: object) -> Scanner:
    options: dict[str, object] = {
        "interfaces": LOOPBACK,
        "host_list": HostList(),
        "known_hosts": known_hosts,
        "ssh_dir": server.client_dir,
        "publish": False,
        "python": "macmesh-python",
        "use_agent": False,
        "max_workers": 4,
    }
    return Scanner(**{**options, **kw})  # type: ignore[arg-type]


def trusting(server: SSHServer, path: Path, names: list[str]) -> Path:
    """known_hosts trusting the server's key under ``names`` (and its addresses)."""
    kind, key = server.host_key.read_text().split()[:2]
    lines = [f"[{name.lower()}]:{server.port} {kind} {key}\n" for name in names]
    path.write_text(server.known_hosts_lines() + "".join(lines))
    return path


def no_leftovers(server: SSHServer) -> None:
    wait_until("the probes' processes to end", lambda: server.leftovers() == [], 10)


# -- the whole path ----------------------------------------------------------------------


def test_macs_and_a_linux_host_found_over_bonjour_probed_over_ssh_and_lost(
    sshd: SSHServer, tmp_path: Path, token: str
) -> None:
    names = {address: f"Studio {host[-1].upper()} {token}" for address, host in MACS.items()}
    hosts = {address: f"{host}-{token}" for address, host in MACS.items()}
    linux_name, linux_host = f"debian-box-{token}", f"debian-box-{token}"
    records = {
        address: mac_records(names[address], hosts[address], address, sshd.port) for address in MACS
    }
    linux = [service(d.SSH, linux_name, linux_host, LINUX, sshd.port)]
    known = trusting(
        sshd, tmp_path / "known_hosts", [f"{h}.local" for h in [*hosts.values(), linux_host]]
    )
    scanner = make_scanner(sshd, known)
    states = States(scanner.registry)
    probed: list[str] = []
    scanner.probed.connect(probed.append)
    everyone = [*names.values(), linux_name]
    with published([info for infos in records.values() for info in infos] + linux) as zc:
        scanner.start()
        try:
            wait_until(
                "every node READY",
                lambda: all(state(scanner, n) is ProbeState.READY for n in everyone),
            )
            for name in everyone:
                assert states.of(name)[-2:] == [ProbeState.PROBING, ProbeState.READY], name
            a = scanner.registry.get(names["127.0.0.2"])
            assert a is not None and a.is_mac and a.kind == "Mac" and a.macos == "26.2"
            assert a.chip == "Apple M3 Ultra" and a.memory_bytes == 512 * 1024**3 and a.rdma
            box = scanner.registry.get(linux_name)
            assert box is not None and box.kind == "Linux" and box.is_mac is False
            assert box.facts.is_macos is False and box.facts.mlx_version == "0.32.4"
            assert box.rdma is False and box.facts.unknowns["macos_version"].endswith(
                "command not found"
            )

            topology = scanner.topology()  # the Linux host has no Thunderbolt: left out
            assert sorted(topology.nodes) == sorted(names.values())
            assert topology.shape == "full mesh" and len(topology.cables) == 3

            target = scanner.target(names["127.0.0.2"])
            assert (target.host, target.address) == (f"{hosts['127.0.0.2']}.local", "127.0.0.2")
            assert target.port == sshd.port and target.python == "macmesh-python"
            assert not target.local
            with target.connection() as connection:  # the key is known under the name
                assert connection.run("uname -sr").stdout.startswith("Darwin")

            gone = names["127.0.0.4"]
            for info in records["127.0.0.4"]:
                zc.unregister_service(info)  # goodbye packets
            wait_until(f"{gone} removed", lambda: scanner.registry.get(gone) is None, 15)
            assert len(scanner.topology().nodes) == 2
            with pytest.raises(NodeNotReady, match="No node"):
                scanner.target(gone)
        finally:
            scanner.close()
    assert scanner.registry.nodes() == []  # closed: it forgets what it no longer watches
    assert set(probed) >= set(everyone)
    no_leftovers(sshd)


def test_a_moved_node_is_probed_again_and_a_departed_one_never_returns(
    sshd: SSHServer, tmp_path: Path
) -> None:
    """Bonjour changes go straight into the registry here (no multicast needed)."""
    known = trusting(sshd, tmp_path / "known_hosts", ["studio-a.local", "studio-b.local"])
    scanner = make_scanner(sshd, known)
    states = States(scanner.registry)
    peer = d.BonjourPeer(
        "Studio A", frozenset({d.SSH}), "studio-a.local", ("127.0.0.9",), sshd.port,
        model="Mac15,14", osxvers=25,
    )  # fmt: skip
    with scanner:
        scanner.registry.peer_seen(peer)  # an address nothing listens on
        wait_until("unreachable", lambda: state(scanner, "Studio A") is ProbeState.UNREACHABLE)
        assert (
            "No SSH server answers on studio-a.local"
            in scanner.registry.get("Studio A").probe_message
        )  # type: ignore[union-attr]
        scanner.registry.peer_seen(replace(peer, addresses=("127.0.0.2",)))  # moved: again
        wait_until("ready", lambda: state(scanner, "Studio A") is ProbeState.READY)
        assert states.of("Studio A") == [
            ProbeState.NEW, ProbeState.PROBING, ProbeState.UNREACHABLE,
            ProbeState.PROBING, ProbeState.READY,
        ]  # fmt: skip

        # Remote Login off: the Mac announces only _device-info; no connection is tried.
        quiet = d.BonjourPeer("Mini", frozenset({d.DEVICE_INFO}), "mini.local", ("127.0.0.3",),
                              None, model="Mac16,10", osxvers=25)  # fmt: skip
        before = sshd.log_text().count(f"on 127.0.0.3 port {sshd.port}")
        scanner.registry.peer_seen(quiet)
        wait_until("Remote Login off", lambda: state(scanner, "Mini") is ProbeState.UNREACHABLE)
        message = scanner.registry.get("Mini").probe_message  # type: ignore[union-attr]
        assert "Remote Login is off on Mini" in message and "Sharing > Remote Login" in message
        assert sshd.log_text().count(f"on 127.0.0.3 port {sshd.port}") == before

        # Leaves while it is probed: the result is dropped, the node stays gone.
        slow = d.BonjourPeer("Studio B", frozenset({d.SSH}), "studio-b.local", ("127.0.0.3",),
                             sshd.port, model="Mac15,14")  # fmt: skip
        scanner.registry.peer_seen(slow)
        wait_until("probing", lambda: state(scanner, "Studio B") is ProbeState.PROBING)
        scanner.registry.peer_gone("Studio B")
        count = states.of("Studio B")
        scanner.wait_idle(WAIT)
        assert scanner.registry.get("Studio B") is None and states.of("Studio B") == count
    no_leftovers(sshd)


# -- host keys and access ----------------------------------------------------------------


def test_unknown_host_key_waits_for_the_person_then_is_recorded(
    sshd: SSHServer, tmp_path: Path
) -> None:
    known = tmp_path / "known_hosts"
    scanner = make_scanner(sshd, known)
    name = f"127.0.0.2:{sshd.port}"
    asked: list[tuple[str, object]] = []
    # Only this host's questions: other suites' Macs announced on loopback may ask too.
    scanner.host_key_needed.connect(
        lambda node, error: asked.append((node, error)) if node == name else None
    )
    with scanner:
        scanner.add_host(name)
        wait_until("a host key question", lambda: bool(asked))
        assert state(scanner, name) is ProbeState.NEEDS_HOST_KEY
        (asked_name, error), = asked  # fmt: skip
        assert asked_name == name and isinstance(error, ssh.UnknownHostKey)
        assert error.fingerprint.startswith("SHA256:")
        assert error.fingerprint in scanner.registry.get(name).probe_message  # type: ignore[union-attr]
        assert not known.exists()  # nothing recorded before the person says yes

        scanner.reject_host_key(name)
        assert state(scanner, name) is ProbeState.UNREACHABLE
        assert "not to trust" in scanner.registry.get(name).probe_message  # type: ignore[union-attr]
        with pytest.raises(ValueError, match="waiting to be trusted"):
            scanner.accept_host_key(name)

        scanner.reprobe(name)  # Retry: asked again
        wait_until("asked again", lambda: len(asked) == 2)
        scanner.accept_host_key(name)
        wait_until("ready", lambda: state(scanner, name) is ProbeState.READY)
    kind, key = sshd.host_key.read_text().split()[:2]
    assert known.read_text() == f"[127.0.0.2]:{sshd.port} {kind} {key}\n"


def test_a_changed_host_key_is_refused(sshd: SSHServer, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kind, key = (tmp_path / "other_key.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.3]:{sshd.port} {kind} {key}\n")
    scanner = make_scanner(sshd, known)
    name = f"127.0.0.3:{sshd.port}"
    with scanner:
        scanner.add_host(name)
        wait_until("refused", lambda: state(scanner, name) is ProbeState.HOST_KEY_CHANGED)
        message = scanner.registry.get(name).probe_message  # type: ignore[union-attr]
        assert "CHANGED" in message and "ssh-keygen -R" in message
    assert known.read_text() == f"[127.0.0.3]:{sshd.port} {kind} {key}\n"  # untouched


def test_no_key_then_set_up_access_with_the_password(tmp_path: Path) -> None:
    ssh_dir = tmp_path / "me"  # no key at all yet
    with password_server(tmp_path / "peer", "ada", "s3cret", address="127.0.0.6") as peer:
        scanner = Scanner(
            interfaces=LOOPBACK, host_list=HostList(), known_hosts=tmp_path / "known_hosts",
            ssh_dir=ssh_dir, publish=False, use_agent=False, python="python3",
        )  # fmt: skip
        keys: list[ssh.UnknownHostKey] = []
        scanner.host_key_needed.connect(lambda name, error: keys.append(error))
        name = f"127.0.0.6:{peer.port}"
        with scanner:
            scanner.add_host(f"ada@{name}")
            wait_until("host key", lambda: state(scanner, name) is ProbeState.NEEDS_HOST_KEY)
            scanner.accept_host_key(name)
            wait_until("needs access", lambda: state(scanner, name) is ProbeState.NEEDS_ACCESS)
            assert "Set up access" in scanner.registry.get(name).probe_message  # type: ignore[union-attr]

            with pytest.raises(ssh.AuthFailed, match="did not accept the password"):
                scanner.set_up_access(name, "wrong")
            scanner.set_up_access(name, "s3cret")
            wait_until("ready", lambda: state(scanner, name) is ProbeState.READY)
            facts = scanner.registry.get(name).facts  # type: ignore[union-attr]
            assert facts.os_name == "Linux" and facts.python_version  # the probe really ran
        public = (ssh_dir / "id_ed25519.pub").read_text().split()[:2]
        installed = (peer.home / ".ssh" / "authorized_keys").read_text()
        assert " ".join(public) in installed and "s3cret" not in installed
        assert "s3cret" not in (tmp_path / "known_hosts").read_text()


# -- faults ------------------------------------------------------------------------------


def test_sshd_stopped_mid_probe_is_unreachable_and_leaves_nothing(tmp_path: Path) -> None:
    slow = tmp_path / "slow-bin"
    slow.mkdir()
    tool = slow / "system_profiler"
    tool.write_text("#!/bin/sh\nsleep 60\n")
    tool.chmod(0o755)
    scanner = None
    with running_sshd(tmp_path / "sshd", {"127.0.0.2": slow}, ("127.0.0.2",)) as server:
        port = server.port
        known = tmp_path / "known_hosts"
        known.write_text(server.known_hosts_lines())
        scanner = make_scanner(server, known)
        name = f"127.0.0.2:{port}"
        scanner.start()
        scanner.add_host(name)
        wait_until(
            "the probe to reach system_profiler",
            lambda: any("sleep 60" in command_line(p) for p in server.leftovers()),
        )
        assert state(scanner, name) is ProbeState.PROBING
    try:  # sshd is stopped, its sessions with it
        wait_until("unreachable", lambda: state(scanner, name) is ProbeState.UNREACHABLE, 30)
        message = scanner.registry.get(name).probe_message  # type: ignore[union-attr]
        assert message.startswith("Lost the connection to 127.0.0.2") and "Try again" in message
    finally:
        scanner.close()
    wait_until("nothing left", lambda: session_processes(port) == [], 10)


def test_hand_added_hosts_are_remembered_across_scanners(tmp_path: Path) -> None:
    first = Scanner(interfaces=LOOPBACK, publish=False, known_hosts=tmp_path / "kh")
    with first:
        with pytest.raises(ValueError, match="neither a host name nor an IP address"):
            first.add_host("studio b!")
        first.add_host("ml@127.0.0.7:2222")  # nothing listens there
        name = "127.0.0.7:2222"
        wait_until("refused", lambda: state(first, name) is ProbeState.UNREACHABLE)
        assert (
            "No SSH server answers on 127.0.0.7 port 2222" in first.registry.get(name).probe_message
        )  # type: ignore[union-attr]
    assert (tmp_path / "config" / "hosts.json").exists()
    second = Scanner(interfaces=LOOPBACK, publish=False, known_hosts=tmp_path / "kh")
    with second:
        node = second.registry.get(name)
        assert node is not None and node.user == "ml" and node.ssh_port == 2222
        assert second.remove_host(name) and second.registry.get(name) is None
        assert not second.remove_host(name)
    assert HostList().hosts() == []


def test_this_machine_is_probed_locally(tmp_path: Path, token: str) -> None:
    scanner = Scanner(
        interfaces=LOOPBACK, host_list=HostList(), known_hosts=tmp_path / "kh",
        instance_name=f"MacMesh Self {token}",
    )  # fmt: skip
    with scanner:
        name = scanner.discovery.own_name
        assert name is not None
        wait_until("this machine ready", lambda: state(scanner, name) is ProbeState.READY)
        node = scanner.registry.get(name)
        assert node is not None and node.is_self
        assert node.facts.python_executable == sys.executable  # local: no SSH, our Python
        target = scanner.target(name)
        assert target.local and target.python == sys.executable


# -- macmesh nodes ---------------------------------------------------------------------


def test_macmesh_nodes_json_probes_the_hosts_it_is_given(sshd: SSHServer, tmp_path: Path) -> None:
    ssh_dir = tmp_path / "ssh"
    ssh_dir.mkdir(mode=0o700)
    for name in ("id_ed25519", "id_ed25519.pub"):
        (ssh_dir / name).write_bytes((sshd.client_dir / name).read_bytes())
    (ssh_dir / "known_hosts").write_text(sshd.known_hosts_lines())
    env = {
        **os.environ,
        "MACMESH_SSH_DIR": str(ssh_dir),
        "MACMESH_CONFIG_DIR": str(tmp_path / "config"),
        "MACMESH_CACHE_DIR": str(tmp_path / "cache"),
    }
    env.pop("SSH_AUTH_SOCK", None)
    hosts = [f"127.0.0.2:{sshd.port}", f"127.0.0.3:{sshd.port}", f"{LINUX}:{sshd.port}"]
    argv = [sys.executable, "-m", "gui.cli", "nodes", "--json", "--no-publish", "--wait", "0",
            "--interfaces", "127.0.0.1", "--python", "macmesh-python"]  # fmt: skip
    for host in hosts:
        argv += ["--host", host]
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=180, cwd=ROOT.parent
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # Other programs on this machine may announce themselves on loopback: only ours count.
    by_name = {node["name"]: node for node in report["nodes"] if node["name"] in hosts}
    assert sorted(by_name) == sorted(hosts)
    a, box = by_name[hosts[0]], by_name[hosts[2]]
    assert a["state"] == "ready" and a["kind"] == "Mac" and a["chip"] == "Apple M3 Ultra"
    assert a["macos"] == "26.2" and a["mlx"] == "0.32.4" and a["rdma"]["state"] == "on"
    assert box["state"] == "ready" and box["kind"] == "Linux" and box["os"] == "Linux"
    assert box["rdma"]["state"] == "unusable" and "not macOS" in box["rdma"]["reason"]
    assert report["topology"]["shape"] == "full mesh"
    assert report["topology"]["nodes"] == sorted(hosts[:2])
    assert not (tmp_path / "config" / "hosts.json").exists()  # --host is not remembered
    no_leftovers(sshd)


def test_macmesh_nodes_refuses_bad_arguments_in_one_line(tmp_path: Path) -> None:
    from core.cli.nodes import nodes_cli

    for argv, said in (
        (["--host", "bad host!"], "neither a host name nor an IP address"),
        (["--interfaces", "nope0", "--no-publish", "--wait", "0"], "no network interface"),
    ):
        err = tmp_path / "err"
        with open(err, "w") as stream, contextlib.redirect_stderr(stream):
            assert nodes_cli(argv) == 2
        lines = err.read_text().splitlines()
        assert len(lines) == 1 and lines[0].startswith("macmesh nodes: ") and said in lines[0]
