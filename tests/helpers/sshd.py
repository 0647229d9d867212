"""A real OpenSSH server on loopback, one listen address per simulated host.
(docs/design.md, Testing.)

One ``sshd -D -e`` (Debian's ``openssh-server``, ``/usr/sbin/sshd``) listens on 127.0.0.2,
127.0.0.3 and 127.0.0.4 on one free high port, with its own host key, pid file, log and
``authorized_keys`` in a temporary folder: nothing of the system's SSH setup is read or
changed (but ``/run/sshd``, the empty directory sshd needs to run as root, is created
if missing, as the Debian service would). Keys only: no password, so no user is created.

Each simulated host can answer macOS commands from its own fake ``bin``: a
``Match LocalAddress`` block per address sets ``PATH=<bin>:/usr/bin:/bin`` (the user's
shell startup files may still prepend to it). Pass the folders as ``host_bins``, or
override the ``sshd_host_bins`` fixture in a test module.

Fixtures (use with ``pytest_plugins = ["tests.helpers.sshd"]``): ``sshd_server`` (one
server per test module), ``sshd`` (the same server; its log lines from the test are
printed at teardown, which pytest shows only when the test fails). The server is stopped
and every process it started killed, whatever the tests did.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko
import psutil
import pytest

from tests.helpers import prereqs
from tests.helpers.procs import die_with_parent

SSHD = prereqs.sshd_path()  # MACMESH_TEST_SSHD moves it (the skip tests point it nowhere)
ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
REQUIRE_ENV = "MACMESH_REQUIRE_SSHD"  # "1" (CI): a missing sshd fails the SSH tests
INSTALL = prereqs.SSH_INSTALL


def sshd_missing() -> str | None:
    """What this machine lacks to run a test sshd and reach it, or None."""
    lacking = prereqs.missing("sshd")
    return lacking["sshd"].why if lacking else None


def require_sshd() -> None:
    """Skip the calling test on a machine without OpenSSH (``make test`` says so at the
    end, tests/helpers/prereqs.py); fail it where ``MACMESH_REQUIRE_SSHD=1``."""
    prereqs.require("ssh", "sshd")


@dataclass
class SSHServer:
    """A running sshd and what a client needs to reach it."""

    port: int
    addresses: tuple[str, ...]
    user: str
    root: Path
    client_dir: Path  # an ``~/.ssh`` for clients: ``id_ed25519`` is authorized, no known_hosts
    host_key: Path  # the server's public host key
    log_path: Path
    process: subprocess.Popen

    @property
    def client_key(self) -> Path:
        return self.client_dir / "id_ed25519"

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def leftovers(self) -> list[psutil.Process]:
        """Processes this server's sessions started that still run."""
        return session_processes(self.port)

    def known_hosts_lines(self) -> str:
        """known_hosts lines trusting this server's key on every address."""
        kind, key = self.host_key.read_text().split()[:2]
        return "".join(f"[{a}]:{self.port} {kind} {key}\n" for a in self.addresses)

    def ssh_argv(self, address: str, command: str, known_hosts: Path) -> list[str]:
        """OpenSSH's own client, configured by nothing but these options."""
        return [
            "ssh", "-F", "/dev/null", "-p", str(self.port), "-i", str(self.client_key),
            "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            "-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes",
            "-o", "ConnectTimeout=5", f"{self.user}@{address}", command,
        ]  # fmt: skip


def sshd_config(
    root: Path,
    port: int,
    addresses: Sequence[str],
    host_bins: Mapping[str, Path],
    session_env: Mapping[str, str] | None = None,
) -> str:
    lines = [
        f"Port {port}",
        *(f"ListenAddress {address}" for address in addresses),
        f"HostKey {root / 'ssh_host_ed25519_key'}",
        f"PidFile {root / 'sshd.pid'}",
        f"AuthorizedKeysFile {root / 'authorized_keys'}",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "PermitRootLogin yes",
        "AllowTcpForwarding no",
        "X11Forwarding no",
        "PrintMotd no",
        "AcceptEnv none",
        "LogLevel VERBOSE",
        "MaxStartups 50",
        "Subsystem sftp internal-sftp",
    ]
    for address, folder in host_bins.items():
        if address not in addresses:
            raise ValueError(f"{address} is not one of the server's addresses {addresses}")
        extra = "".join(f" {name}={value}" for name, value in (session_env or {}).items())
        lines += [
            f"Match LocalAddress {address}",
            f"    SetEnv PATH={folder}:/usr/bin:/bin{extra}",
        ]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def running_sshd(
    root: Path,
    host_bins: Mapping[str, Path] | None = None,
    addresses: Sequence[str] = ADDRESSES,
    session_env: Mapping[str, str] | None = None,
) -> Iterator[SSHServer]:
    """Start sshd under ``root`` and yield it once every address accepts connections.
    ``session_env``: more variables for the sessions of hosts in ``host_bins`` (e.g. a
    fresh ``HOME``, so the test user's shell start-up files do not run in each session)."""
    require_sshd()
    root.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    _keygen(root / "ssh_host_ed25519_key")
    client_dir = root / "client"
    client_dir.mkdir(mode=0o700)
    _keygen(client_dir / "id_ed25519")
    shutil.copy(client_dir / "id_ed25519.pub", root / "authorized_keys")
    log_path = root / "sshd.log"
    process = None
    try:
        for _attempt in range(5):
            port = _free_port(addresses)
            config = root / "sshd_config"
            config.write_text(sshd_config(root, port, addresses, host_bins or {}, session_env))
            with open(log_path, "ab") as log:
                process = subprocess.Popen(
                    [str(SSHD), "-D", "-e", "-f", str(config)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                    preexec_fn=die_with_parent,
                )
            if _wait_listening(process, addresses, port):
                break
            _stop(process)
            process = None
            if "Address already in use" not in log_path.read_text(errors="replace"):
                break
        if process is None:
            pytest.fail(f"sshd did not start:\n{log_path.read_text(errors='replace')}")
        yield SSHServer(
            port=port,
            addresses=tuple(addresses),
            user=getpass.getuser(),
            root=root,
            client_dir=client_dir,
            host_key=root / "ssh_host_ed25519_key.pub",
            log_path=log_path,
            process=process,
        )
    finally:
        if process is not None:
            _stop(process, port)


@pytest.fixture(scope="module")
def sshd_host_bins() -> dict[str, Path]:
    """Address → folder of fake commands for that host; override in a test module."""
    return {}


@pytest.fixture(scope="module")
def sshd_addresses() -> tuple[str, ...]:
    """The loopback addresses the module's server listens on; override for more hosts."""
    return ADDRESSES


@pytest.fixture(scope="module")
def sshd_server(
    tmp_path_factory: pytest.TempPathFactory,
    sshd_host_bins: dict[str, Path],
    sshd_addresses: tuple[str, ...],
) -> Iterator[SSHServer]:
    root = tmp_path_factory.mktemp("sshd")
    with running_sshd(root, sshd_host_bins, sshd_addresses) as server:
        yield server


@pytest.fixture
def sshd(sshd_server: SSHServer) -> Iterator[SSHServer]:
    """The module's server; what it logged during the test is shown if the test fails."""
    start = sshd_server.log_path.stat().st_size
    yield sshd_server
    with open(sshd_server.log_path, "rb") as log:
        log.seek(start)
        text = log.read().decode("utf-8", "replace")
    if text:
        sys.stderr.write(f"--- sshd log during this test ---\n{text}")


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "macmesh-test", "-f", str(path)],
        check=True,
        capture_output=True,
    )


def _free_port(addresses: Sequence[str]) -> int:
    """A port free on every address (the kernel picks it on the first)."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind((addresses[0], 0))
            port = first.getsockname()[1]
            if port >= 1024 and all(_bindable(a, port) for a in addresses[1:]):
                return port
    raise RuntimeError("no port is free on all loopback test addresses")


def _bindable(address: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


def _wait_listening(process: subprocess.Popen, addresses: Sequence[str], port: int) -> bool:
    deadline = time.monotonic() + 10
    waiting = list(addresses)
    while waiting and time.monotonic() < deadline and process.poll() is None:
        try:
            socket.create_connection((waiting[0], port), timeout=1).close()
            waiting.pop(0)
        except OSError:
            time.sleep(0.05)
    return not waiting and process.poll() is None


def _stop(process: subprocess.Popen, port: int | None = None) -> None:
    """End sshd and every process its sessions started: its descendants (listed first,
    they outlive the listener) and, by their ``SSH_CONNECTION``, orphans that left it."""
    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)
    strays = children + (session_processes(port) if port else [])
    for stray in strays:
        with contextlib.suppress(psutil.NoSuchProcess):
            stray.kill()
    deadline = time.monotonic() + 5
    while any(_alive(stray) for stray in strays) and time.monotonic() < deadline:
        time.sleep(0.05)


def session_processes(port: int) -> list[psutil.Process]:
    """Live processes started by a session of the sshd on ``port`` (sshd itself excluded)."""
    found = []
    for proc in psutil.process_iter(["name"]):
        try:
            connection = proc.environ().get("SSH_CONNECTION", "").split()
            if connection[-1:] == [str(port)] and proc.info["name"] != "sshd" and _alive(proc):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def _alive(process: psutil.Process) -> bool:
    """Running, or about to: a zombie has ended (a container's init may never reap it)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# -- a password-only server: paramiko's, for "set up access with the peer's password" ---------


@dataclass
class PasswordServer:
    """A paramiko SSH server on 127.0.0.5 for one user, whose commands run under ``home``."""

    address: str
    port: int
    home: Path


@contextlib.contextmanager
def password_server(
    root: Path, user: str, password: str, address: str = "127.0.0.5"
) -> Iterator[PasswordServer]:
    """Accepts ``user``/``password``, or a key listed in ``home/.ssh/authorized_keys``; runs
    each command with ``/bin/sh -c`` and ``HOME=home``, as sshd would (no system user)."""
    home = root / "home"
    home.mkdir(parents=True)
    host_key = paramiko.ECDSAKey.generate()
    listener = socket.socket()
    listener.bind((address, 0))
    listener.listen(8)
    listener.settimeout(0.2)
    transports: list[paramiko.Transport] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                sock, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            transport = paramiko.Transport(sock)
            transport.add_server_key(host_key)
            transports.append(transport)
            with contextlib.suppress(paramiko.SSHException, OSError, EOFError):
                transport.start_server(server=_Interface(user, password, home))

    thread = threading.Thread(target=serve, name="password-server", daemon=True)
    thread.start()
    try:
        yield PasswordServer(address, listener.getsockname()[1], home)
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        for transport in transports:
            transport.close()


class _Interface(paramiko.ServerInterface):
    def __init__(self, user: str, password: str, home: Path) -> None:
        self.user, self.password, self.home = user, password, home

    def get_allowed_auths(self, username: str) -> str:
        return "publickey,password"

    def check_auth_password(self, username: str, password: str) -> int:
        ok = (username, password) == (self.user, self.password)
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        keys = self.home / ".ssh" / "authorized_keys"
        known = keys.read_text().split() if keys.exists() else []
        ok = username == self.user and key.get_base64() in known
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return paramiko.OPEN_SUCCEEDED
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        threading.Thread(target=self._run, args=(channel, command), daemon=True).start()
        return True

    def _run(self, channel: paramiko.Channel, command: bytes) -> None:
        env = {"HOME": str(self.home), "PATH": "/usr/bin:/bin", "USER": self.user}
        data = b"".join(iter(lambda: channel.recv(65536), b""))  # the client's stdin, to EOF
        done = subprocess.run(
            ["/bin/sh", "-c", command.decode()],
            cwd=self.home, env=env, capture_output=True, input=data,
            timeout=30, check=False,
        )  # fmt: skip
        channel.sendall(done.stdout)
        channel.sendall_stderr(done.stderr)
        channel.send_exit_status(done.returncode)
        channel.close()
