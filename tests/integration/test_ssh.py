"""core.remote.ssh against a real OpenSSH server on loopback (and paramiko's server for
passwords)."""

from __future__ import annotations

import errno
import re
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from core.remote import keys as ssh_keys
from core.remote import ssh
from tests.helpers.wait import wait_until

if TYPE_CHECKING:
    from tests.helpers.sshd import SSHServer

# The fixtures (sshd_server, sshd); imported by pytest so its assertion rewriting applies.

STUDIO_A, STUDIO_B, LINUX = "127.0.0.2", "127.0.0.3", "127.0.0.4"


@pytest.fixture(scope="module")
def sshd_host_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two simulated Macs with their own fake ``sw_vers``; the third host has none."""
    bins = {}
    for address, version in ((STUDIO_A, "26.2"), (STUDIO_B, "15.5")):
        folder = tmp_path_factory.mktemp(f"bin-{address}")
        tool = folder / "sw_vers"
        tool.write_text(
            f"#!/bin/sh\necho 'ProductName:\t\tmacOS'\necho 'ProductVersion:\t\t{version}'\n"
        )
        tool.chmod(0o755)
        bins[address] = folder
    return bins


@pytest.fixture
def trusted(sshd: SSHServer, tmp_path: Path) -> Path:
    """A known_hosts that already trusts the server on every address."""
    path = tmp_path / "known_hosts"
    path.write_text(sshd.known_hosts_lines())
    return path


def connection(server: SSHServer, address: str, known_hosts: Path, **kw: object) -> ssh.Connection:
    options = {"known_hosts": known_hosts, "ssh_dir": server.client_dir, "use_agent": False}
    return ssh.Connection(address, server.port, **{**options, **kw})  # type: ignore[arg-type]


def openssh_fingerprint(public_key: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(public_key)], capture_output=True, text=True)
    return out.stdout.split()[1]


# -- host keys -----------------------------------------------------------------------------


def test_connects_with_the_key_and_runs(sshd: SSHServer, trusted: Path) -> None:
    with connection(sshd, STUDIO_A, trusted) as conn:
        rc, out, err = conn.run("echo out; echo err >&2; exit 3", timeout=10)
        assert (rc, out, err) == (3, "out\n", "err\n")
        assert conn.run(["printf", "%s|", "a b", "c'd"]).stdout == "a b|c'd|"
        assert conn.run("cat", stdin=b"piped\n").stdout == "piped\n"
        assert conn.fingerprint == openssh_fingerprint(sshd.host_key)


def test_unknown_host_key_then_accept(sshd: SSHServer, tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    conn = connection(sshd, STUDIO_B, known_hosts)
    with pytest.raises(ssh.UnknownHostKey) as caught:
        conn.connect()
    error = caught.value
    assert error.fingerprint == openssh_fingerprint(sshd.host_key)
    assert error.fingerprint.startswith("SHA256:") and error.fingerprint in str(error)
    assert not known_hosts.exists()  # nothing recorded before the person says yes

    error.accept()
    assert known_hosts.read_text().startswith(f"[{STUDIO_B}]:{sshd.port} ssh-ed25519 ")
    with conn:
        assert conn.run("echo ok").stdout == "ok\n"
    # OpenSSH's own client trusts what we recorded
    done = subprocess.run(sshd.ssh_argv(STUDIO_B, "true", known_hosts), capture_output=True)
    assert done.returncode == 0, done.stderr


def test_changed_host_key_is_refused(sshd: SSHServer, tmp_path: Path) -> None:
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kind, key = (tmp_path / "other.pub").read_text().split()[:2]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"# mine\n[{STUDIO_A}]:{sshd.port} {kind} {key}\n")
    before = known_hosts.read_text()
    with pytest.raises(ssh.HostKeyChanged) as caught:
        connection(sshd, STUDIO_A, known_hosts).connect()
    assert caught.value.expected == openssh_fingerprint(tmp_path / "other.pub")
    assert caught.value.fingerprint == openssh_fingerprint(sshd.host_key)
    assert "CHANGED" in str(caught.value) and "ssh-keygen -R" in str(caught.value)
    assert known_hosts.read_text() == before
    # The command the message gives really removes the old key (a host on another port is
    # "[host]:port" in known_hosts), and the next connection asks about the new one.
    command = re.search(r"`(ssh-keygen -R [^`]+)`", str(caught.value))
    assert command is not None
    subprocess.run(command.group(1), shell=True, check=True, capture_output=True)
    assert key not in known_hosts.read_text()
    with pytest.raises(ssh.UnknownHostKey):
        connection(sshd, STUDIO_A, known_hosts).connect()


def test_garbage_in_known_hosts_is_skipped(sshd: SSHServer, trusted: Path) -> None:
    trusted.write_text(
        "not a line\n|1|bad hash\nhost ssh-ed25519 !!!notbase64\n" + trusted.read_text()
    )
    with connection(sshd, LINUX, trusted) as conn:
        assert conn.run("echo ok").stdout == "ok\n"


def test_revoked_host_key_is_refused(sshd: SSHServer, tmp_path: Path) -> None:
    kind, key = sshd.host_key.read_text().split()[:2]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"@revoked * {kind} {key}\n" + sshd.known_hosts_lines())
    with pytest.raises(ssh.HostKeyChanged):
        connection(sshd, STUDIO_A, known_hosts).connect()


# -- errors a person can act on --------------------------------------------------------------


def test_key_not_accepted(sshd: SSHServer, trusted: Path, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger"
    ssh_keys.ensure_key(stranger)
    conn = ssh.Connection(
        STUDIO_A, sshd.port, known_hosts=trusted, ssh_dir=stranger, use_agent=False
    )
    with pytest.raises(ssh.AuthFailed, match="did not accept your SSH key"):
        conn.connect()


def test_connection_refused_means_remote_login_off(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again below: nothing listens there
    with pytest.raises(ssh.RemoteLoginOff, match=f"port {port}"):
        ssh.Connection("127.0.0.1", port, known_hosts=tmp_path / "kh").connect()


def test_messages_name_the_fix() -> None:
    conn = ssh.Connection("studio-a.local", 22)
    refused = conn._socket_error(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    assert isinstance(refused, ssh.RemoteLoginOff)
    assert "Sharing > Remote Login" in str(refused)
    no_route = conn._socket_error(OSError(errno.EHOSTUNREACH, "No route to host"))
    assert isinstance(no_route, ssh.HostUnreachable) and "studio-a.local" in str(no_route)
    unknown = conn._socket_error(socket.gaierror(socket.EAI_NONAME, "Name not known"))
    assert isinstance(unknown, ssh.HostUnreachable)


def test_silent_server_times_out_within_the_timeout(tmp_path: Path) -> None:
    """The connection's own timeout ends the wait, with a message naming it (how soon:
    ``make bench``, ``remote_timeouts``)."""
    with socket.socket() as mute:  # accepts (the kernel's backlog) but never says a word
        mute.bind(("127.0.0.1", 0))
        mute.listen(1)
        conn = ssh.Connection("127.0.0.1", mute.getsockname()[1], timeout=1.0,
                              known_hosts=tmp_path / "kh", use_agent=False)  # fmt: skip
        with pytest.raises(ssh.SSHTimeout, match="did not answer within 1 s"):
            conn.connect()


def test_a_host_that_takes_the_connection_and_never_speaks_ssh_is_one_line() -> None:
    """Issue 26: paramiko's transport thread printed two tracebacks before the line."""
    code = textwrap.dedent(
        """
        import sys, tempfile, time
        from pathlib import Path
        from core.remote import ssh
        conn = ssh.Connection("127.0.0.1", int(sys.argv[1]), timeout=1.0, use_agent=False,
                              known_hosts=Path(tempfile.mkdtemp()) / "kh")
        try:
            conn.connect()
        except ssh.SSHError as error:
            print(error)
        time.sleep(1.0)  # the transport thread's last words, if any, come by now
        """
    )
    with socket.socket() as mute:  # the kernel takes the connection; nothing speaks
        mute.bind(("127.0.0.1", 0))
        mute.listen(1)
        port = mute.getsockname()[1]
        run = subprocess.run(
            [sys.executable, "-c", code, str(port)], capture_output=True, text=True, timeout=60
        )
    assert run.stderr == ""
    assert run.stdout == (
        f"127.0.0.1 did not answer within 1 s: it took the connection on port {port} but "
        "sent no SSH greeting. Is an SSH server (Remote Login) what listens on that port?\n"
    )


def test_command_timeout_kills_the_command(sshd: SSHServer, trusted: Path, tmp_path: Path) -> None:
    """Past its timeout the command is ended with everything it started, and the
    connection stays usable. Its sleeps outlast the test's own time limit: a run that
    waited for them would fail by that limit, one that left them behind by the waits
    below. (How soon it returns is a figure of ``make bench``, not a test.)"""
    group_file = tmp_path / "pgid"  # loopback: the "remote" host shares our file system
    with connection(sshd, STUDIO_A, trusted) as conn:
        with pytest.raises(ssh.CommandTimeout, match=r"did not finish within 0\.5 s"):
            conn.run(f"echo $$ > {group_file}; sleep 600 & sleep 601", timeout=0.5)
        pgid = int(group_file.read_text())
        wait_until(lambda: _live_in_group(pgid) == [], 30, "the timed-out command's group to end")
        assert conn.run("echo still usable").stdout == "still usable\n"
    wait_until(lambda: sshd.leftovers() == [], 30, "the server's sessions to end")


# -- per-host commands, processes ------------------------------------------------------------


def test_a_long_output_arrives_whole(sshd: SSHServer, trusted: Path) -> None:
    """sshd may send the exit status while output still waits behind the channel's
    window: ``run`` reads on to the end of the stream, losing nothing."""
    with connection(sshd, STUDIO_A, trusted) as conn:
        for _ in range(5):
            out = conn.run("head -c 3000000 /dev/zero | tr '\\0' x; echo; echo end", timeout=60)
            assert out.rc == 0, out.stderr
            assert len(out.stdout) == 3_000_000 + len("\nend\n") and out.stdout.endswith("end\n")
        # A command that leaves a process holding the stream returns once it exited (the
        # timeout is shorter than the process's life), and the process is ended here.
        started = conn.run("(sleep 8.5 &) ; echo started", timeout=5)
        assert started.stdout == "started\n"
        conn.run("pkill -f 'sleep 8.5'; true")
    wait_until(lambda: sshd.leftovers() == [], 30, "the held process to end")


def test_each_host_sees_its_own_commands(sshd: SSHServer, trusted: Path) -> None:
    versions = {}
    for address in (STUDIO_A, STUDIO_B, LINUX):
        with connection(sshd, address, trusted) as conn:
            versions[address] = conn.run("sw_vers 2>/dev/null | grep ProductVersion").stdout
    assert "26.2" in versions[STUDIO_A]
    assert "15.5" in versions[STUDIO_B]
    assert versions[LINUX] == ""


def test_start_streams_and_exits(sshd: SSHServer, trusted: Path) -> None:
    with connection(sshd, STUDIO_B, trusted) as conn:
        proc = conn.start('read line; echo "got $line $RANK"; echo oops >&2; exit 4',
                          env={"RANK": "1"})  # fmt: skip
        assert proc.poll() is None
        proc.write("hello\n")
        assert list(proc.stdout_lines()) == ["got hello 1\n"]
        assert list(proc.stderr_lines()) == ["oops\n"]
        assert proc.wait(10) == 4


def test_kill_group_ends_everything(sshd: SSHServer, trusted: Path) -> None:
    with connection(sshd, STUDIO_A, trusted) as conn:
        proc = conn.start("sleep 300 & sleep 301 & echo started; wait")
        assert next(proc.stdout_lines()) == "started\n"
        group = _live_in_group(proc.pgid)
        assert len(group) == 3  # the shell and both sleeps, all in the reported group
        proc.terminate()
        assert proc.wait(10) == -1  # ended by a signal
        wait_until(lambda: _live_in_group(proc.pgid) == [], 30, "the group to end")
        assert conn.run("echo still usable").rc == 0
    assert sshd.leftovers() == []


# -- setting up access -------------------------------------------------------------------------


def test_ensure_key_generates_an_openssh_key_once(tmp_path: Path) -> None:
    ssh_dir = tmp_path / ".ssh"
    key = ssh_keys.ensure_key(ssh_dir)
    assert key == ssh_dir / "id_ed25519"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(ssh_dir.stat().st_mode) == 0o700
    derived = subprocess.run(["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True)
    public = (ssh_dir / "id_ed25519.pub").read_text()
    assert derived.returncode == 0 and derived.stdout.split()[:2] == public.split()[:2]
    assert (
        ssh_keys.ensure_key(ssh_dir) == key and (ssh_dir / "id_ed25519.pub").read_text() == public
    )


def test_install_key_with_password(tmp_path: Path) -> None:
    from tests.helpers.sshd import password_server

    ssh_dir = tmp_path / "me"
    ssh_keys.ensure_key(ssh_dir)
    with password_server(tmp_path / "peer", user="ada", password="s3cret") as peer:
        (peer.home / ".ssh").mkdir(mode=0o755)
        (peer.home / ".ssh" / "authorized_keys").write_text("ssh-ed25519 AAAAother ada@old")
        target = ssh.Connection(peer.address, peer.port, "ada", ssh_dir=ssh_dir, use_agent=False)
        with pytest.raises(ssh.UnknownHostKey) as caught:
            ssh.install_public_key(target, "s3cret")  # the host key first, password or not
        caught.value.accept()
        with pytest.raises(ssh.AuthFailed, match="did not accept your SSH key"):
            target.connect()  # no key installed yet
        with pytest.raises(ssh.AuthFailed, match="password"):
            ssh.install_public_key(target, "wrong")

        ssh.install_public_key(target, "s3cret")
        ssh.install_public_key(target, "s3cret")  # twice: still one line

        lines = (peer.home / ".ssh" / "authorized_keys").read_text().splitlines()
        public = (ssh_dir / "id_ed25519.pub").read_text().strip()
        assert lines == ["ssh-ed25519 AAAAother ada@old", public]
        assert stat.S_IMODE((peer.home / ".ssh").stat().st_mode) == 0o700
        assert stat.S_IMODE((peer.home / ".ssh" / "authorized_keys").stat().st_mode) == 0o600
        with target:  # the key alone now
            assert target.run("echo in").stdout == "in\n"


def _live_in_group(pgid: int) -> list[int]:
    """Pids in process group ``pgid`` that have not ended (zombies have)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry.name))
    return found
