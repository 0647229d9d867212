"""SSH to the peers with paramiko: host keys trusted on first use, key setup, run, start.

Host keys are checked against OpenSSH's ``~/.ssh/known_hosts``, so ``ssh`` and MacMesh
agree about every host. An unknown key raises ``UnknownHostKey`` with its fingerprint (as
``ssh`` prints it) for the app to show; once the person accepts, ``accept_host_key``
appends it to known_hosts. A changed key is refused (``HostKeyChanged``): never auto-add.

Errors are ``SSHError`` subclasses whose message says what happened and what to do.

Threads: a connected ``Connection`` may be used from several threads (paramiko multiplexes
channels over one transport under its own locks; ``connect``/``close`` take ours), so a
``RemoteProcess`` can be killed over a second channel while another thread reads it.
docs/design.md's rule 3 still holds: one serial executor per host keeps a host's work in order.
"""

from __future__ import annotations

import contextlib
import errno
import getpass
import logging
import re
import select
import shlex
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import paramiko

from core.remote.keys import (
    accept_host_key,
    default_ssh_dir,
    ensure_key,
    find_keys,
    read_known_hosts,
)

log = logging.getLogger(__name__)
# paramiko's transport thread logs each failed handshake at ERROR, traceback and all, to
# stderr when nothing else handles it; every failure also reaches the caller, which this
# module turns into one line. So its log stays quiet.
logging.getLogger("paramiko").setLevel(logging.CRITICAL)

DEFAULT_TIMEOUT = 10.0
_PID_MARK = "MACMESH-PGID"
# After the exit status, output quiet this long ends a command whose stream a process it
# left behind holds open (the stream's EOF ends the others at once).
QUIET_AFTER_EXIT_S = 0.5
_UNREACHABLE = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.EADDRNOTAVAIL}


class SSHError(Exception):
    """Talking to ``host`` failed; ``str(error)`` is for a person and says what to do."""

    def __init__(self, host: str, message: str) -> None:
        super().__init__(message)
        self.host = host


class RemoteLoginOff(SSHError):
    """Nothing accepts connections on the SSH port (Remote Login off)."""


class AuthFailed(SSHError):
    """The host refused our key or the password."""


class HostUnreachable(SSHError):
    """No route to the host, or its name is not found."""


class SSHTimeout(SSHError):
    """The host did not answer in time."""


class CommandTimeout(SSHTimeout):
    """A command ran longer than ``run``'s timeout."""


class ConnectionLost(SSHError):
    """The session ended under a running command (sshd stopped, the host went away)."""


class HostKeyChanged(SSHError):
    """The host offered a key other than the one remembered (or a revoked one)."""

    def __init__(
        self, host: str, fingerprint: str, expected: str, known_hosts: Path, port: int = 22
    ) -> None:
        self.fingerprint, self.expected = fingerprint, expected
        # known_hosts names a host on another port "[host]:port": -R needs that form.
        entry = host if port == 22 else f"[{host}]:{port}"
        remove = f"ssh-keygen -R {shlex.quote(entry)} -f {shlex.quote(str(known_hosts))}"
        super().__init__(
            host,
            f"The host key of {host} has CHANGED: it was {expected}, it is now {fingerprint}. "
            "Someone may be intercepting the connection, or the Mac was reinstalled. MacMesh "
            f"will not connect. If you know why it changed, remove the old key with `{remove}` "
            "and connect again.",
        )


class UnknownHostKey(SSHError):
    """First contact: the app shows ``fingerprint`` and, if the person agrees, ``accept()``."""

    def __init__(self, host: str, port: int, key: paramiko.PKey, known_hosts: Path) -> None:
        self.port, self.key, self.known_hosts = port, key, known_hosts
        self.fingerprint = key.fingerprint
        kind = key.get_name().removeprefix("ssh-").upper()
        super().__init__(
            host,
            f"{host} is new to this Mac. Its host key fingerprint is {self.fingerprint} "
            f"({kind}). Compare it with what `ssh-keygen -lf /etc/ssh/ssh_host_"
            f"{kind.split('-')[0].lower()}_key.pub` prints on that Mac, then accept it.",
        )

    def accept(self) -> None:
        accept_host_key(self.host, self.port, self.key, self.known_hosts)


class Result(NamedTuple):
    rc: int
    stdout: str
    stderr: str


def install_public_key(target: Connection, password: str, public_key: Path | None = None) -> None:
    """Set up access once: log in to ``target``'s host with its ``password`` (used for this
    login only, never kept) and append our public key to its ``~/.ssh/authorized_keys``,
    with the permissions sshd insists on. Host keys are checked as for any connection."""
    public_key = public_key or ensure_key(target.ssh_dir).with_suffix(".pub")
    fields = public_key.read_text(encoding="utf-8").split()
    if len(fields) < 2:
        raise ValueError(f"{public_key} is not an OpenSSH public key")
    script = (
        'umask 077; d="$HOME/.ssh"; f="$d/authorized_keys"; '
        'mkdir -p "$d" && chmod 700 "$d" && touch "$f" && chmod 600 "$f" || exit 1; '
        'grep -qF "$2" "$f" && exit 0; '
        'if [ -s "$f" ] && [ -n "$(tail -c 1 "$f")" ]; then echo >> "$f"; fi; '
        'printf \'%s\\n\' "$1" >> "$f"'
    )
    argv = ["/bin/sh", "-c", script, "sh", " ".join(fields), " ".join(fields[:2])]
    session = Connection(
        target.host, target.port, target.user, known_hosts=target.known_hosts,
        ssh_dir=target.ssh_dir, use_agent=False, timeout=target.timeout,
        address=target.address,
    )  # fmt: skip
    with session.connect(password=password):
        result = session.run(argv, timeout=30)
    if result.rc != 0:
        raise SSHError(
            target.host,
            f"Could not add the key to ~/.ssh/authorized_keys on {target.host}: "
            f"{result.stderr.strip() or f'exit status {result.rc}'}.",
        )


class Connection:
    """One SSH session to a host: ``connect()``, then ``run``/``start``; ``close()`` ends it.

    Keys: the agent (``use_agent``) and ``ssh_dir``'s ``id_ed25519``/``id_ecdsa``/``id_rsa``.
    ``known_hosts`` and ``ssh_dir`` default to the user's ``~/.ssh``; tests inject theirs.
    ``address``: where to open the socket when it is not ``host`` (Bonjour gives a Mac's
    address with its name: connecting there skips a name lookup, while the host key is
    still checked and remembered under the name ``ssh`` users know).
    """

    def __init__(
        self,
        host: str,
        port: int = 22,
        user: str | None = None,
        *,
        known_hosts: Path | None = None,
        ssh_dir: Path | None = None,
        use_agent: bool = True,
        timeout: float = DEFAULT_TIMEOUT,
        address: str | None = None,
    ) -> None:
        self.host, self.port, self.address = host, port, address
        self.user = user or getpass.getuser()
        self.ssh_dir = ssh_dir or default_ssh_dir()
        self.known_hosts = known_hosts or self.ssh_dir / "known_hosts"
        self.use_agent, self.timeout = use_agent, timeout
        self._lock = threading.Lock()
        self._client: paramiko.SSHClient | None = None

    def connect(self, password: str | None = None) -> Connection:
        """Open the session (no-op when open). Raises an ``SSHError`` subclass."""
        with self._lock:
            if self._client is None:
                self._client = self._open(password)
            return self

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> Connection:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def is_connected(self) -> bool:
        """Whether the session is still up (False once the peer or the network dropped it)."""
        return self._alive()

    @property
    def fingerprint(self) -> str:
        return self._transport().get_remote_server_key().fingerprint

    def run(
        self, command: str | Sequence[str], timeout: float = 60.0, stdin: bytes = b""
    ) -> Result:
        """Run ``command`` (a shell line, or argv to quote) to the end: ``(rc, stdout, stderr)``.

        ``rc`` is -1 when the command was ended by a signal. Past ``timeout`` its process
        group is killed and ``CommandTimeout`` raised, so no probe outlives its caller."""
        chan = self._exec(_wrapped(command))
        try:
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            done, out, err = _collect(chan, time.monotonic() + timeout)
            pgid, out = _split_mark(out)
            if done and chan.exit_status == -1 and not self._alive():
                raise ConnectionLost(
                    self.host,
                    f"Lost the connection to {self.host} while `{_command_line(command)[:60]}` "
                    "ran. Is it still on and on this network? Try again.",
                )
            if not done:
                if pgid is not None:
                    with contextlib.suppress(SSHError):
                        self.kill_group(pgid, "KILL")
                raise CommandTimeout(
                    self.host,
                    f"`{_command_line(command)}` on {self.host} did not finish "
                    f"within {timeout:g} s.",
                )
            return Result(chan.recv_exit_status(), out, err)
        finally:
            chan.close()

    def start(
        self,
        command: str | Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> RemoteProcess:
        """Start ``command`` and return once it runs, with its process group id.

        sshd makes every session's command a session leader (``setsid``), and the wrapper
        ``exec``s ``/bin/sh`` in that process and prints its pid first: that pid is the
        group id, so ``kill_group`` over another channel ends the command and all it
        started, even when this channel hangs."""
        chan = self._exec(_wrapped(command, env))
        return RemoteProcess(self, chan, timeout or self.timeout)

    def kill_group(self, pgid: int, sig: str = "TERM", timeout: float | None = None) -> None:
        """Send ``sig`` to the remote process group ``pgid`` (then CONT: a stopped one sees it).

        Waits at most ``timeout`` (default: the connection's) for the channel and for the
        command to end; ``SSHTimeout`` when the host did not confirm in that time."""
        if sig not in ("TERM", "KILL", "INT", "HUP", "CONT"):
            raise ValueError(f"unexpected signal {sig!r}")
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        line = f"kill -{sig} -{int(pgid)} 2>/dev/null; kill -CONT -{int(pgid)} 2>/dev/null; true"
        chan = self._exec(shlex.join(["/bin/sh", "-c", line]), timeout)
        try:
            chan.shutdown_write()
            done, _, _ = _collect(chan, deadline)
        finally:
            chan.close()
        if not done:
            raise SSHTimeout(
                self.host, f"{self.host} did not confirm a signal within {timeout:g} s."
            )

    # -- inside ----------------------------------------------------------------------------

    def _exec(self, command: str, timeout: float | None = None) -> paramiko.Channel:
        """A new channel running ``command``; a lost session becomes an ``SSHError``."""
        try:
            chan = self._transport().open_session(
                timeout=self.timeout if timeout is None else timeout
            )
            chan.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as error:
            raise ConnectionLost(
                self.host, f"Lost the connection to {self.host} ({error})."
            ) from error
        return chan

    def _alive(self) -> bool:
        client = self._client
        transport = client.get_transport() if client else None
        return transport is not None and transport.is_active()

    def _transport(self) -> paramiko.Transport:
        client = self._client
        transport = client.get_transport() if client else None
        if transport is None or not transport.is_active():
            raise SSHError(self.host, f"Not connected to {self.host}: connect first.")
        return transport

    def _open(self, password: str | None) -> paramiko.SSHClient:
        deadline = time.monotonic() + self.timeout
        try:
            where = (self.address or self.host, self.port)
            sock = socket.create_connection(where, timeout=self.timeout)
        except OSError as error:
            raise self._socket_error(error) from error
        client = paramiko.SSHClient()
        known, revoked = read_known_hosts(self.known_hosts)
        for name, keys in known.items():
            for kind, key in keys.items():
                client.get_host_keys().add(name, kind, key)
        client.set_missing_host_key_policy(_AskPerson(self))
        left = max(0.1, deadline - time.monotonic())
        key_files = [str(path) for path in find_keys(self.ssh_dir)]
        try:
            # key_filename takes a list (paramiko's docs); types-paramiko says str only.
            client.connect(  # with ``sock``, the host name only names the host key
                self.host.lower(), self.port, self.user, password=password, sock=sock,
                timeout=left, banner_timeout=left, auth_timeout=self.timeout,
                channel_timeout=self.timeout, key_filename=key_files,  # type: ignore[arg-type]
                allow_agent=self.use_agent, look_for_keys=False,
            )  # fmt: skip
            transport = client.get_transport()
            assert transport is not None  # connect() returned: it has one
            key = transport.get_remote_server_key()
            if key.get_base64() in revoked:
                raise HostKeyChanged(
                    self.host, key.fingerprint, "revoked", self.known_hosts, self.port
                )
        except BaseException as error:
            transport = client.get_transport()
            greeted = bool(transport is not None and transport.remote_version)
            client.close()
            sock.close()
            if isinstance(error, SSHError | KeyboardInterrupt | SystemExit):
                raise
            late = time.monotonic() >= deadline
            raise self._ssh_error(error, password is not None, late, greeted) from error
        return client

    def _socket_error(self, error: OSError) -> SSHError:
        host, port = self.host, self.port
        if isinstance(error, ConnectionRefusedError):
            if port == 22:
                return RemoteLoginOff(
                    host,
                    f"Remote Login is off on {host} (it refused a connection on port 22). Turn "
                    "it on there: System Settings > General > Sharing > Remote Login.",
                )
            return RemoteLoginOff(host, f"No SSH server answers on {host} port {port}.")
        if isinstance(error, socket.gaierror):
            return HostUnreachable(host, f"Cannot find {host} on the network ({error.strerror}).")
        if isinstance(error, TimeoutError):
            return SSHTimeout(host, self._silent())
        if error.errno in _UNREACHABLE:
            return HostUnreachable(
                host, f"Cannot reach {host} ({error.strerror}). Is it on and on this network?"
            )
        return SSHError(host, f"Cannot connect to {host} port {port}: {error}.")

    def _ssh_error(
        self, error: BaseException, with_password: bool, late: bool, greeted: bool = True
    ) -> SSHError:
        """``late``: the deadline had passed (paramiko's handshake may end its wait quietly
        and then fail with "No existing session"). ``greeted``: the host sent its SSH
        version line (the connection itself was taken: else ``_socket_error``)."""
        host, user = self.host, self.user
        if isinstance(error, paramiko.BadHostKeyException):
            return HostKeyChanged(
                host,
                error.key.fingerprint,
                error.expected_key.fingerprint,
                self.known_hosts,
                self.port,
            )
        if isinstance(error, paramiko.PasswordRequiredException):
            keys = " ".join(str(k) for k in find_keys(self.ssh_dir)) or "<your key>"
            return AuthFailed(
                host,
                "Your SSH key has a passphrase: add it to the agent once "
                f"(`ssh-add --apple-use-keychain {keys}`), then try again.",
            )
        if isinstance(error, paramiko.AuthenticationException):
            if with_password:
                return AuthFailed(
                    host,
                    f"{host} did not accept the password for user {user!r}. Check the user "
                    "name and that Mac's login password.",
                )
            return AuthFailed(
                host,
                f"{host} did not accept your SSH key for user {user!r}. Set up access once "
                "with that Mac's password (MacMesh installs your key), or check the user name.",
            )
        if "no authentication methods available" in str(error).lower():
            return AuthFailed(  # paramiko's word for "you have no key and gave no password"
                host,
                f"You have no SSH key {host} could accept. Set up access once with that "
                "Mac's password (MacMesh creates your key and installs it).",
            )
        cause = error.__context__ or error.__cause__
        timed_out = isinstance(error, TimeoutError) or isinstance(cause, TimeoutError)
        timed_out = late or timed_out or "timed out" in str(error).lower()
        if timed_out and not greeted:  # connected, but no "SSH-2.0-..." came
            return SSHTimeout(
                host,
                f"{host} did not answer within {self.timeout:g} s: it took the connection on "
                f"port {self.port} but sent no SSH greeting. Is an SSH server (Remote Login) "
                "what listens on that port?",
            )
        if timed_out:
            return SSHTimeout(host, self._silent())
        if isinstance(error, OSError) and error.errno in _UNREACHABLE:
            return self._socket_error(error)
        return SSHError(
            host, f"{host} port {self.port} did not talk SSH as expected ({error or type(error)})."
        )

    def _silent(self) -> str:
        return (
            f"{self.host} did not answer within {self.timeout:g} s. Is it asleep, or is a "
            "firewall dropping SSH?"
        )


class RemoteProcess:
    """A command running on a host: stdin, stdout/stderr lines, exit status, and a way to
    end its whole process group. ``stdout_lines`` and ``stderr_lines`` may be read on two
    threads at once; closing the channel ends the command's stdin (the worker exits)."""

    def __init__(self, connection: Connection, chan: paramiko.Channel, timeout: float) -> None:
        self._connection, self._chan = connection, chan
        self._stdout, self._stderr = chan.makefile("rb"), chan.makefile_stderr("rb")
        self._send_lock = threading.Lock()
        chan.settimeout(timeout)
        seen: list[str] = []  # shell start-up files may print before our mark
        try:
            while len(seen) < 100:
                line = self._stdout.readline().decode("utf-8", "replace")
                seen.append(line)
                if not line or line.startswith(_PID_MARK):
                    break
        except TimeoutError:
            pass
        finally:
            chan.settimeout(None)
        match = re.fullmatch(rf"{_PID_MARK} (\d+)\s*", seen[-1] if seen else "")
        if match is None:
            said = chan.recv_stderr(4096) if chan.recv_stderr_ready() else b""
            chan.close()
            reason = said.decode("utf-8", "replace").strip() or "".join(seen).strip()
            raise SSHError(
                connection.host,
                f"Could not start the command on {connection.host}: {reason or 'no answer'}.",
            )
        self.pid = self.pgid = int(match.group(1))

    def write(self, data: str | bytes) -> None:
        with self._send_lock, contextlib.suppress(OSError):  # gone: its exit status says why
            self._chan.sendall(data.encode() if isinstance(data, str) else data)

    send = write  # the launcher's RankProcess name

    def close_stdin(self) -> None:
        self._chan.shutdown_write()

    def stdout_lines(self) -> Iterator[str]:
        yield from _lines(self._stdout)

    def stderr_lines(self) -> Iterator[str]:
        yield from _lines(self._stderr)

    def poll(self) -> int | None:
        """The exit status once ended (-1: ended by a signal), else None."""
        return self._chan.recv_exit_status() if self._chan.exit_status_ready() else None

    def wait(self, timeout: float | None = None) -> int | None:
        self._chan.status_event.wait(timeout)
        return self.poll()

    def terminate(self) -> None:
        self._connection.kill_group(self.pgid, "TERM")

    def kill(self) -> None:
        self._connection.kill_group(self.pgid, "KILL")

    def close(self) -> None:
        self._chan.close()


class _AskPerson(paramiko.MissingHostKeyPolicy):
    """Never add a key silently: raise for the app to ask the person."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        c = self._connection
        raise UnknownHostKey(c.host, c.port, key, c.known_hosts)


def _collect(chan: paramiko.Channel, deadline: float) -> tuple[bool, str, str]:
    """Both streams until the command ends, or what came before ``deadline``:
    ``(ended, stdout, stderr)``.

    sshd may send the exit status while output still waits behind the channel's window
    (it is sent as we read), so the end is the stream's EOF, not the exit status; a
    command that left a process holding the stream open ends once its output has been
    quiet for ``QUIET_AFTER_EXIT_S`` after it exited."""
    out, err = bytearray(), bytearray()
    exited_at: float | None = None

    def drain() -> bool:
        got = False
        while chan.recv_ready():
            out.extend(chan.recv(65536))
            got = True
        while chan.recv_stderr_ready():
            err.extend(chan.recv_stderr(65536))
            got = True
        return got

    while True:
        got = drain()
        now = time.monotonic()
        if chan.exit_status_ready():
            exited_at = now if exited_at is None or got else exited_at
            if chan.eof_received or chan.closed or now - exited_at >= QUIET_AFTER_EXIT_S:
                drain()  # what arrived with the EOF
                return True, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        left = deadline - now
        if left <= 0:
            return False, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        select.select([chan], [], [], min(left, 0.05))


def _wrapped(command: str | Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """``command`` under ``/bin/sh`` (whatever the login shell), its pid printed first."""
    exports = "".join(f"export {_env_name(k)}={shlex.quote(v)}; " for k, v in (env or {}).items())
    inner = f'echo "{_PID_MARK} $$"; {exports}{_command_line(command)}'
    return "exec /bin/sh -c " + shlex.quote(inner)


def _split_mark(out: str) -> tuple[int | None, str]:
    """The pid line's group id, and the output after it."""
    match = re.search(rf"^{_PID_MARK} (\d+)\n", out, re.MULTILINE)
    if match is None:
        return None, out
    return int(match.group(1)), out[match.end() :]


def _lines(stream: paramiko.ChannelFile) -> Iterator[str]:
    try:
        for raw in stream:
            yield raw.decode("utf-8", "replace")
    except (OSError, EOFError, ValueError):
        return


def _command_line(command: str | Sequence[str]) -> str:
    return command if isinstance(command, str) else shlex.join(command)


def _env_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"{name!r} is not an environment variable name")
    return name
