"""``macmesh doctor --json`` end to end: simulated Macs from the fixture sets behind a real
sshd on 127.0.0.2-5, announced over Bonjour on 127.0.0.1 (or named with --host), each
verdict and its fix read from the command's JSON and its exit status.

Instance names carry a random token: loopback multicast is shared by every process on
this machine, so only our nodes' checks are read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.cluster.capture import read_capture
from core.cluster.probe.script import SECTIONS
from tests.fixtures.macos.hosts import hosts
from tests.fixtures.macos.make_bin import make_bin
from tests.helpers.sshd import SSHServer, running_sshd
from tests.helpers.testbench import mac_records, published, trusted_known_hosts

ROOT = Path(__file__).resolve().parents[2]


def fake_bins(host_dirs: list[Path], addresses: list[str], root: Path) -> dict[str, Path]:
    pairs = zip(addresses, host_dirs, strict=True)
    return {address: make_bin(host, root / "bin" / host.name) for address, host in pairs}


def client_env(server: SSHServer, tmp_path: Path, known_hosts: str) -> dict[str, str]:
    ssh_dir = tmp_path / "ssh"
    ssh_dir.mkdir(mode=0o700)
    for name in ("id_ed25519", "id_ed25519.pub"):
        (ssh_dir / name).write_bytes((server.client_dir / name).read_bytes())
    (ssh_dir / "known_hosts").write_text(known_hosts)
    env = {
        **os.environ,
        "MACMESH_SSH_DIR": str(ssh_dir),
        "MACMESH_CONFIG_DIR": str(tmp_path / "config"),
        "MACMESH_CACHE_DIR": str(tmp_path / "cache"),
    }
    env.pop("SSH_AUTH_SOCK", None)
    return env


def doctor(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any], str]:
    argv = [sys.executable, "-m", "gui.cli", "doctor", "--json", "--no-publish",
            "--interfaces", "127.0.0.1", "--python", "macmesh-python", *args]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


def checks(report: dict[str, Any], node: str, name: str) -> list[dict[str, str]]:
    return [c for c in report["checks"] if c["node"] == node and c["name"] == name]


def test_doctor_over_bonjour_on_a_healthy_ring(tmp_path: Path) -> None:
    token = uuid.uuid4().hex[:6]
    host_dirs = hosts("ring4")
    addresses = [f"127.0.0.{n + 2}" for n in range(len(host_dirs))]
    bins = fake_bins(host_dirs, addresses, tmp_path)
    names = [f"{h.name}-{token}" for h in host_dirs]
    with running_sshd(tmp_path / "sshd", bins, addresses) as server:
        known = trusted_known_hosts(server, [f"{n}.local" for n in names], tmp_path / "kh")
        env = client_env(server, tmp_path, known.read_text())
        records = []
        for name, address in zip(names, addresses, strict=True):
            records += mac_records(name, name, address, server.port)
        with published(records):
            rc, report, _ = doctor(env, "--wait", "4", "--no-try-paths")
    ours = [c for c in report["checks"] if c["node"] in names or c["node"] == "cluster"]
    assert set(names) <= set(report["ready"])
    assert not [c for c in ours if c["status"] == "fail"], ours
    for name in names:
        bonjour = checks(report, name, "bonjour")[0]
        assert bonjour["status"] == "ok" and "seen over Bonjour" in bonjour["message"]
        assert bonjour["group"] == "finding"
        assert checks(report, name, "remote-login")[0]["status"] == "ok"
        assert checks(report, name, "host-key")[0]["status"] == "ok"
        python = checks(report, name, "python")[0]
        assert python["group"] == "running" and "mlx 0.32.4" in python["message"]
        assert "1.17 TB free" in checks(report, name, "disk")[0]["message"]
        assert checks(report, name, "rdma")[0]["status"] == "ok"
    backend = checks(report, "cluster", "backend")[0]
    assert backend["group"] == "linking" and backend["message"].startswith("jaccl-ring")
    if set(report["nodes"]) == set(names):  # no other program announced itself meanwhile
        assert rc == 0 and report["ok"]


def test_doctor_on_named_hosts_says_each_fix_and_exits_1(tmp_path: Path) -> None:
    host_dirs = hosts("pair27")
    addresses = ["127.0.0.2", "127.0.0.3"]
    bins = fake_bins(host_dirs, addresses, tmp_path)
    with running_sshd(tmp_path / "sshd", bins, addresses) as server:
        env = client_env(server, tmp_path, server.known_hosts_lines())
        named = [f"{a}:{server.port}" for a in addresses]
        capture = tmp_path / "capture.zip"
        hosts_argv = [x for n in named for x in ("--host", n)]
        rc, report, err = doctor(env, "--wait", "0", "--capture", str(capture), *hosts_argv)
    assert rc == 1 and not report["ok"]
    assert f"capture saved to {capture} (redacted)" in err
    saved = read_capture(capture)
    assert sorted(saved.nodes) == ["mac-1", "mac-2"]
    assert len(saved.nodes["mac-1"]) == len(SECTIONS)  # every section: stdout, stderr, rc
    assert saved.nodes["mac-2"]["python"].rc == 0 and saved.nodes["mac-1"]["sw_vers"].rc == 0
    with zipfile.ZipFile(capture) as archive:
        text = "\n".join(archive.read(n).decode() for n in archive.namelist())
    assert "/Users/admin" not in text and "XXXXXXXXXX" not in text
    e, f = named
    # studio-f: Apple's Python without mlx, RDMA off on macOS 27.
    python = checks(report, f, "python")[0]
    assert python["status"] == "fail" and "-m pip install mlx mlx-lm" in python["fix"]
    rdma = checks(report, f, "rdma")[0]
    assert rdma["status"] == "warn" and "System Settings (macOS 27" in rdma["fix"]
    assert checks(report, e, "python")[0]["status"] == "ok"
    # Named by hand: Bonjour does not see them.
    assert checks(report, e, "bonjour")[0]["status"] == "warn"
    assert report["failed"] >= 1


def test_doctor_says_remote_login_off_and_an_unknown_host_key(tmp_path: Path) -> None:
    host_dirs = hosts("pair27")
    bins = {"127.0.0.2": make_bin(host_dirs[0], tmp_path / "bin" / host_dirs[0].name)}
    with running_sshd(tmp_path / "sshd", bins, ["127.0.0.2"]) as server:
        env = client_env(server, tmp_path, "")  # nothing trusted yet
        closed = f"127.0.0.3:{server.port}"  # nothing listens there
        new = f"127.0.0.2:{server.port}"
        rc, report, _ = doctor(env, "--wait", "0", "--host", new, "--host", closed)
    assert rc == 1
    key = checks(report, new, "host-key")[0]
    assert key["status"] == "fail" and "fingerprint" in key["fix"]
    assert checks(report, new, "remote-login")[0]["status"] == "ok"
    off = checks(report, closed, "remote-login")[0]
    assert off["status"] == "fail" and "Remote Login" in off["fix"]
    assert closed not in report["ready"] and new not in report["ready"]


def one(report: dict[str, Any], node: str, name: str) -> dict[str, str]:
    found = checks(report, node, name)
    assert len(found) == 1, (node, name, found)
    return found[0]


def hub(report: dict[str, Any], a: str, b: str) -> None:
    """A Thunderbolt 4 hub between Thunderbolt 5 Macs: take it out, plug them directly."""
    cable = one(report, a, "cable")
    assert (
        cable["status"] == "warn" and "through Thunderbolt Hub runs at 40 Gb/s" in cable["message"]
    )
    fix = (
        f"Take out Thunderbolt Hub: plug a Thunderbolt 5 cable from {a} port 1 straight into "
        f"{b} port 1."
    )
    assert cable["fix"] == fix
    assert [one(report, n, "rdma-port")["fix"] for n in (a, b)] == [fix, fix]
    assert one(report, a, "rdma")["status"] == "ok"  # the Macs are fine


def two_cables(report: dict[str, Any], a: str, b: str) -> None:
    """Two crossed cables: a full mesh, RDMA on over both, the ring given both."""
    cables = checks(report, a, "cable")
    assert [c["message"] for c in cables] == [
        f"{a} port 1 ↔ {b} port 2, 80 Gb/s: RDMA runs over {a} port 1 ↔ {b} port 2 at 80 Gb/s "
        "(rdma_en2 ↔ rdma_en3).",
        f"{a} port 2 ↔ {b} port 1, 80 Gb/s: RDMA runs over {a} port 2 ↔ {b} port 1 at 80 Gb/s "
        "(rdma_en3 ↔ rdma_en2).",
    ]
    assert all(c["status"] == "ok" for c in cables)
    assert len(checks(report, a, "rdma-port")) == 2 == len(checks(report, b, "rdma-port"))
    cabling = one(report, "cluster", "cabling")["message"]
    assert cabling.startswith("Full mesh") and "(2 cables)" in cabling
    assert one(report, "cluster", "backend")["message"].startswith("jaccl: RDMA over Thunderbolt")


def no_ipv4(report: dict[str, Any], a: str, b: str) -> None:
    """Thunderbolt 4 Macs whose cable has no IPv4: the ring takes Wi-Fi, a /30 is offered."""
    cable = one(report, a, "cable")
    assert cable["fix"] == (
        f"Nothing to change: {a} and {b} have only Thunderbolt 4 ports, so jobs use the ring "
        "backend over this cable."
    )
    for node in (a, b):
        ipv4 = one(report, node, "ipv4")
        assert (
            ipv4["status"] == "warn" and "no IPv4 address (IPv6 link-local only)" in ipv4["message"]
        )
        assert "Configure IPv4" in ipv4["fix"]
        path = one(report, node, "ring-path")["message"]
        assert "ring over Wi-Fi (en1)" in path and "carries only IPv6 link-local" in path
        network = one(report, node, "network")
        assert "(192.168.200.0/30)" in network["message"]
        assert (
            "en2 inet 192.168.200." in network["fix"]
            and "netmask 255.255.255.252" in network["fix"]
        )


def thunderbolt_4_cable(report: dict[str, Any], a: str, b: str) -> None:
    """A Thunderbolt 4 cable between Thunderbolt 5 Macs: the ring runs over it meanwhile."""
    cable = one(report, a, "cable")
    assert cable["status"] == "warn" and "runs at 40 Gb/s" in cable["message"]
    assert cable["fix"] == (
        "Both Macs have Thunderbolt 5 ports, so the cable is the slow part: replace it with a "
        f"Thunderbolt 5 cable from {a} port 1 straight into {b} port 1."
    )
    assert one(report, "cluster", "backend")["message"].startswith("Ring over Thunderbolt (en2)")
    assert all(c["status"] == "ok" for n in (a, b) for c in checks(report, n, "ring-path"))


def users_pythons(report: dict[str, Any], a: str, b: str) -> None:
    """Different Python paths: MacMesh runs each node's own; mlx.launch by hand needs one."""
    paths = one(report, "cluster", "python-paths")
    assert paths["status"] == "warn" and "/Users/alice/.venv/bin/python3" in paths["message"]
    assert "/opt/homebrew/bin/python3" in paths["message"] and "--python PATH" in paths["fix"]
    assert [one(report, n, "python")["status"] for n in (a, b)] == ["ok", "ok"]


def local_network_denied(report: dict[str, Any], a: str, b: str) -> None:
    """The nodes' outputs are a healthy pair: what is wrong shows on the Mac running the
    doctor (Bonjour does not see them); on Linux no permission is asked for."""
    assert one(report, a, "cable")["status"] == "ok"
    for node in (a, b):
        bonjour = one(report, node, "bonjour")
        assert bonjour["status"] == "warn" and "Bonjour does not see it" in bonjour["message"]
        assert "Local Network permission" in bonjour["fix"]
    local = one(report, "cluster", "local-network")
    assert local["status"] == "ok" and "not a Mac" in local["message"]


@pytest.mark.parametrize(
    ("fixture_set", "verdict"),
    [
        ("tb-hub", hub),
        ("two-cables", two_cables),
        ("tb-noip4", no_ipv4),
        ("tb4-cable", thunderbolt_4_cable),
        ("users-pythons", users_pythons),
        ("localnet-denied", local_network_denied),
    ],
)
def test_doctor_names_each_field_sets_verdict_and_fix(
    fixture_set: str,
    verdict: Callable[[dict[str, Any], str, str], None],
    tmp_path: Path,
) -> None:
    """The first-contact sets (issue 27 item 4) served behind the real sshd, named by
    hand; the ring's paths are not tried (they are the fixtures' addresses, not loopback)."""
    host_dirs = hosts(fixture_set)
    addresses = ["127.0.0.2", "127.0.0.3"]
    bins = fake_bins(host_dirs, addresses, tmp_path)
    with running_sshd(tmp_path / "sshd", bins, addresses) as server:
        env = client_env(server, tmp_path, server.known_hosts_lines())
        a, b = (f"{address}:{server.port}" for address in addresses)
        rc, report, _ = doctor(env, "--wait", "0", "--no-try-paths", "--host", a, "--host", b)
    assert report["ready"] == [a, b]
    verdict(report, a, b)
    assert rc == 0 and report["ok"]  # each set can run a job: the fixes make it faster


def test_on_a_mac_the_doctor_sends_on_each_browsed_interface_and_says_a_refusal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command's wiring of the Local Network check: its mDNS sends are tried on the
    browsed interfaces (here loopback, with every send refused as macOS refuses them)."""
    import core.cli.doctor as command
    import core.cluster.localnet as localnet
    from core.cluster.localnet import MACOS_EHOSTUNREACH

    tried: list[dict[str, str]] = []

    def refused(addresses: dict[str, str]) -> dict[str, int | None]:
        tried.append(dict(addresses))
        return dict.fromkeys(addresses, MACOS_EHOSTUNREACH)

    monkeypatch.setattr(command, "running_on_mac", lambda: True)
    monkeypatch.setattr(localnet, "mdns_send_errors", refused)
    argv = ["--json", "--no-publish", "--interfaces", "127.0.0.1", "--wait", "0"]
    assert command.doctor_cli(argv) == 1
    report = json.loads(capsys.readouterr().out)
    assert [list(t.values()) for t in tried] == [["127.0.0.1"]]
    local = checks(report, "cluster", "local-network")[0]
    assert local["status"] == "warn" and "Local Network permission is denied" in local["message"]
    assert "Privacy & Security > Local Network" in local["fix"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--host", "bad host!"], "neither a host name nor an IP address"),
        (["--interfaces", "nope0", "--no-publish", "--wait", "0"], "no network interface"),
        (["--capture", "report.txt"], "wants a .zip file name"),
        (["--capture", "/no/such/folder/c.zip"], "does not exist"),
    ],
)
def test_doctor_refuses_bad_arguments_in_one_line(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from core.cli.doctor import doctor_cli

    assert doctor_cli(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("macmesh doctor: ") and said in lines[0]
