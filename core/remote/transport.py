"""How a model's bytes reach a node, and how the node vouches for them (SHA-256 there).

OpenSSH's client (``OpenSSHProcess``) carries every file on one session to a small Python
receiver on the node (the node's own interpreter) that appends from the resume offset and
hashes as it writes; when the controller agrees with every hash, the receiver runs the one
commit step (``COMMIT_SCRIPT``) in the same session. Fallbacks, slower but complete:
paramiko's channel when there is no ``ssh`` client or it cannot get in; ``cat`` per file,
then ``sha256sum`` / ``shasum -a 256``, when the node has no Python. Why this design (the
measurements, and the benchmark against ``scp``): ``docs/copy-transport.md``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shlex
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from core import units
from core.model.manifest import MARKER, FileEntry, Manifest
from core.remote.keys import default_ssh_dir, find_keys
from core.remote.ssh import Connection, RemoteProcess, SSHError
from core.remote.targets import Target

log = logging.getLogger(__name__)

CHUNK = 1 << 20
HASH_MIN_RATE = 50e6  # bytes/s: hashing timeouts assume at least this on a node


class ModelCopyError(Exception):
    """The copy failed; the message says what happened and what to do."""


class CopyCancelled(ModelCopyError):
    """Stopped by the person; what arrived stays and a new copy resumes from it."""


# A file's mtime on the node as text, the same way wherever it is asked (the commit step
# records it in the marker, the check compares): GNU stat with nanoseconds, else BSD
# (macOS) stat's seconds with their fraction; empty when neither answers.
MTIME_SH = 'mt() { stat -c %.9Y -- "$1" 2>/dev/null || stat -f %Fm -- "$1" 2>/dev/null; }; '

# The one commit step (POSIX sh, so it runs on a node without Python too): move the
# verified files from staging into the folder (``mv`` renames, atomic within a file
# system, keeping each file's mtime), then write the marker, last, and drop the staging
# folder. The marker is the manifest's JSON from stdin (``marker_head``: without its
# closing brace) followed by ``"stat"``: [size, mtime] of each of its files as the node
# sees them now, in its order, so a file rewritten later is caught by its mtime.
# Arguments: folder, staging, marker name, the count N of files to move, those N files,
# then the marker's files. The receiver runs it in its own session (``@commit``);
# ``commit_on_node`` runs it over SSH when no receiver did.
COMMIT_SCRIPT = MTIME_SH + (
    'D=$1; S=$2; M=$3; N=$4; shift 4; mkdir -p "$D" || exit 1; i=0; st=; '
    'for f in "$@"; do i=$((i+1)); if [ "$i" -le "$N" ]; then '
    'mkdir -p "$(dirname "$D/$f")" && mv -f "$S/$f" "$D/$f" || exit 1; '
    "else z=$(wc -c < \"$D/$f\" 2>/dev/null | tr -d ' '); "
    'st="$st${st:+,}[${z:-0},\\"$(mt "$D/$f")\\"]"; fi; done; '
    '{ cat; printf \'[%s]}\\n\' "$st"; } > "$D/$M.tmp" && mv -f "$D/$M.tmp" "$D/$M" || exit 1; '
    'rm -rf "$S"'
)


def marker_head(marker: Manifest) -> str:
    """The marker's JSON up to its ``"stat"`` list, which COMMIT_SCRIPT appends."""
    text = marker.to_json().rstrip()
    return text[:-1].rstrip() + ',\n  "stat": '


def commit_args(folder: str, staging: str, moved: Sequence[str], marker: Manifest) -> list[str]:
    """COMMIT_SCRIPT's arguments."""
    return [folder, staging, MARKER, str(len(moved)), *moved, *marker.names]


# Receives files on the node, one after another on stdin, each after a header line
# "<offset> <size> <name>": hashes what is already there (a resumed file), appends the
# rest, hashing as it writes, and prints "<sha256>  <name>" for the whole file, so
# verifying needs no second pass over it, and one session carries every file. Then, if
# the controller agrees with every hash, "@commit <length>" and a JSON (``commit_payload``)
# for COMMIT_SCRIPT, run right there: no extra round trip to finish.
_RECEIVER = r"""
import hashlib, json, os, subprocess, sys
staging, source = sys.argv[1], sys.stdin.buffer
print("ready", flush=True)
while header := source.readline():
    if header.startswith(b"@commit "):
        spec = json.loads(source.read(int(header.split()[1])))
        done = subprocess.run(["/bin/sh", "-c", spec["script"], "sh", *spec["args"]],
                              input=spec["marker"].encode(), capture_output=True)
        if done.returncode:
            sys.exit("moving the files in failed: " + done.stderr.decode(errors="replace"))
        print("committed", flush=True)
        continue
    offset, size, name = header.decode().rstrip("\n").split(" ", 2)
    offset, size = int(offset), int(size)
    path = os.path.join(staging, name)
    digest = hashlib.sha256()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if offset:
            with open(path, "rb") as old:
                for block in iter(lambda: old.read(1 << 20), b""):
                    digest.update(block)
        left = size - offset
        with open(path, "ab" if offset else "wb") as out:
            while left > 0:
                block = source.read(min(left, 1 << 20))
                if not block:
                    sys.exit("the stream ended inside " + name)
                out.write(block)
                digest.update(block)
                left -= len(block)
    except OSError as error:  # one line for the controller to show (ENOSPC: disk full)
        sys.exit(f"writing {path}: {error.strerror or error}")
    print(digest.hexdigest() + "  " + name, flush=True)
"""


def send_files(
    conn: Connection,
    target: Target,
    source: Path,
    staging: str,
    files: Sequence[tuple[FileEntry, int]],
    on_bytes: Callable[[int, str], None],
    stopped: Callable[[], bool],
    python: str | None,
    early: EarlyReceiver | None = None,
    commit: Callable[[dict[str, str]], bytes | None] | None = None,
) -> tuple[int, dict[str, str], bool]:
    """Send each (entry, offset)'s bytes from ``offset`` to the node's staging copy:
    (bytes sent, the node's SHA-256 of each whole file). With the node's ``python``, one
    session carries every file and hashes as it writes (over OpenSSH's client when this
    machine has one and it gets in, else paramiko); without, one ``cat`` per file
    (hashed afterwards by ``_hash_on_node``). ``early``: a receiver already started.
    ``commit(digests)``: once every file's hash is in, the finishing step for the
    receiver to run (``@commit``'s JSON), or None; the result says if it ran."""
    files = [(entry, offset) for entry, offset in files if offset < entry.size or not entry.size]
    if not files:
        return 0, {}, False
    if python is None:
        sent = 0
        for entry, offset in files:
            remote = f"{staging}/{entry.name}"
            parent = shlex.quote(str(Path(remote).parent))
            how = ">>" if offset else ">"
            command = f"mkdir -p {parent} && exec cat {how} {shlex.quote(remote)}"
            one = [(entry, offset)]
            piped = _pipe(
                conn.start(command), conn, source, one, on_bytes, stopped, node=target.name
            )
            sent += piped[0]
        return sent, {}, False
    command = receiver_command(python, staging)
    ssh = early.take() if early is not None else OpenSSHProcess.start(target, command)
    link: _Link = ssh if ssh is not None else conn
    process = ssh if ssh is not None else conn.start(command)
    return _pipe(process, link, source, files, on_bytes, stopped, True, commit, node=target.name)


def commit_payload(folder: str, staging: str, moved: Sequence[str], marker: Manifest) -> bytes:
    """What the receiver's ``@commit`` runs: COMMIT_SCRIPT with its arguments."""
    spec = {
        "script": COMMIT_SCRIPT,
        "args": commit_args(folder, staging, moved, marker),
        "marker": marker_head(marker),
    }
    return json.dumps(spec).encode()


def commit_on_node(
    conn: Connection, folder: str, staging: str, moved: Sequence[str], marker: Manifest
) -> None:
    """COMMIT_SCRIPT over ``conn``: when no receiver committed (nothing was sent, the node
    has no Python, or a file needed sending twice)."""
    argv = ["/bin/sh", "-c", COMMIT_SCRIPT, "sh", *commit_args(folder, staging, moved, marker)]
    result = conn.run(argv, timeout=60.0, stdin=marker_head(marker).encode())
    if result.rc != 0:
        raise ModelCopyError(
            f"On {conn.host}, moving the copied files into {folder} failed: "
            f"{result.stderr.strip() or f'exit status {result.rc}'}. Is the disk full or "
            "the cache folder not writable?"
        )


def receiver_command(python: str, staging: str) -> str:
    return shlex.join([python, "-c", _RECEIVER, staging])


class EarlyReceiver:
    """Starts the OpenSSH receiver on a thread while the caller checks the node: its
    handshake and the node's Python start-up (0.3-2 s on a busy machine) overlap that
    round trip. ``take()`` it, or ``discard()`` it: it then exits having written nothing
    (it creates folders only for files it is sent)."""

    def __init__(self, target: Target, staging: str) -> None:
        self._process: OpenSSHProcess | None = None
        command = receiver_command(target.interpreter, staging)
        self._thread = threading.Thread(
            target=self._start, args=(target, command), name="macmesh-receiver", daemon=True
        )
        self._thread.start()

    def _start(self, target: Target, command: str) -> None:
        with contextlib.suppress(OSError):
            self._process = OpenSSHProcess.start(target, command)

    def take(self) -> OpenSSHProcess | None:
        self._thread.join()
        process, self._process = self._process, None
        return process

    def discard(self) -> None:
        process = self.take()
        if process is not None:
            process.close()


class _Link(Protocol):
    host: str

    @property
    def is_connected(self) -> bool: ...


def _pipe(
    process: Any,
    link: _Link,
    source: Path,
    files: Sequence[tuple[FileEntry, int]],
    on_bytes: Callable[[int, str], None],
    stopped: Callable[[], bool],
    framed: bool = False,
    commit: Callable[[dict[str, str]], bytes | None] | None = None,
    node: str | None = None,
) -> tuple[int, dict[str, str], bool]:
    """Feed ``files`` to a started remote ``process`` (``RemoteProcess`` or
    ``OpenSSHProcess``), a header before each when ``framed``: (bytes sent, the digests
    it printed, whether it committed). ``node``: its name in messages (else the host)."""
    sent = 0
    digests: dict[str, str] = {}
    committed = False
    try:
        lines = process.stdout_lines()
        for entry, offset in files:
            if framed:
                process.write(f"{offset} {entry.size} {entry.name}\n".encode())
            with open(source / entry.name, "rb") as file:
                file.seek(offset)
                left = entry.size - offset
                while left > 0 and (chunk := file.read(min(CHUNK, left))):
                    if stopped():
                        end_process(process)
                        raise CopyCancelled("stopped")
                    process.write(chunk)
                    sent += len(chunk)
                    left -= len(chunk)
                    on_bytes(len(chunk), entry.name)
                    if process.poll() is not None or not link.is_connected:
                        break  # the node's end is gone: its status (below) says why
        if framed and commit is not None and process.poll() is None:
            for line in lines:
                _digest_line(line, digests)
                if len(digests) == len(files):
                    break
            payload = commit(dict(digests)) if len(digests) == len(files) else None
            if payload is not None:
                process.write(f"@commit {len(payload)}\n".encode() + payload)
        process.close_stdin()
        for line in lines:
            _digest_line(line, digests)
            committed = committed or line.strip() == "committed"
        total = sum(entry.size - offset for entry, offset in files)
        status = process.wait(timeout=max(60.0, total / HASH_MIN_RATE))
        said = "" if status == 0 else "".join(process.stderr_lines()).strip()
    except BaseException:
        end_process(process)
        raise
    finally:
        process.close()
    if status != 0:
        node = node or link.host
        last = said.splitlines()[-1].strip() if said else f"exit status {status}"
        if _NO_SPACE.search(said):
            left = sum(entry.size - offset for entry, offset in files) - sent
            raise ModelCopyError(
                f"{node} ran out of disk space while receiving the model ({last}). Free at "
                f"least {units.size(max(left, 0))} more there, or choose another cache "
                "folder for it, then copy again: it continues where it stopped."
            )
        # OpenSSH's client says 255 for its own failures; its end of a lost link is
        # gone too. Any other status is the receiver's, with its reason on stderr.
        lost = (
            status is None or status == 255
            if isinstance(link, OpenSSHProcess)
            else (not link.is_connected)
        )
        if lost:
            why = f" ({last})" if said else ""
            raise ModelCopyError(
                f"Lost the connection to {node} while copying the model{why}. Check the "
                "node and copy again: it continues where it stopped."
            )
        raise ModelCopyError(
            f"Writing the model on {node} failed ({last}). Check its disk and the cache "
            "folder, then copy again: it continues where it stopped."
        )
    return sent, digests, committed


# ENOSPC as the receiver (Python), cat or a shell says it, on Linux and macOS.
_NO_SPACE = re.compile(r"No space left on device|ENOSPC|Errno 28\b|Disk quota exceeded", re.I)


def _digest_line(line: str, digests: dict[str, str]) -> None:
    digest, _, name = line.rstrip("\n").partition("  ")
    if re.fullmatch(r"[0-9a-f]{64}", digest):
        digests[name] = digest


class OpenSSHProcess:
    """The receiver run through OpenSSH's own client (``ssh``) with the target's port,
    user, keys and known_hosts and nothing else (``-F /dev/null``, BatchMode, strict host
    keys: the trust ``core.remote.ssh`` applies). It moves bytes in C, so it keeps up with
    ``scp``; paramiko is the fallback. When the client ends, the node's receiver sees
    its stdin close and exits: nothing stays behind."""

    def __init__(self, host: str, proc: subprocess.Popen[bytes]) -> None:
        # Started with three PIPEs: the `ignore[union-attr]`s below are for their
        # Optional types, never None here.
        self.host, self._proc = host, proc

    @classmethod
    def start(cls, target: Target, command: str) -> OpenSSHProcess | None:
        """The running receiver once it said "ready"; None when ``ssh`` is missing or
        cannot get in (a password-only host...): the caller falls back to paramiko."""
        ssh = shutil.which("ssh")
        if ssh is None:
            return None
        ssh_dir = target.ssh_dir or default_ssh_dir()
        known = target.known_hosts or ssh_dir / "known_hosts"
        argv = [ssh, "-F", "/dev/null", "-T", "-p", str(target.port)]
        for key in find_keys(ssh_dir):
            argv += ["-i", str(key)]
        argv += [
            "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={known}", "-o", f"ConnectTimeout={int(target.timeout)}",
            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
        ]  # fmt: skip
        if target.user:
            argv += ["-l", target.user]
        argv += [target.host, "exec /bin/sh -c " + shlex.quote(command)]
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert proc.stdout is not None and proc.stderr is not None
        if proc.stdout.readline().strip() != b"ready":
            proc.kill()
            proc.wait()
            why = proc.stderr.read().decode("utf-8", "replace").strip()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                with contextlib.suppress(OSError):
                    pipe.close()  # type: ignore[union-attr]
            log.info("ssh did not start the receiver on %s (%s): paramiko then", target.host, why)
            return None
        return cls(target.host, proc)

    @property
    def is_connected(self) -> bool:
        return self._proc.poll() is None

    def write(self, data: bytes) -> None:
        with contextlib.suppress(OSError):  # gone: its exit status says why
            self._proc.stdin.write(data)  # type: ignore[union-attr]
            self._proc.stdin.flush()  # type: ignore[union-attr]

    def poll(self) -> int | None:
        return self._proc.poll()

    def close_stdin(self) -> None:
        with contextlib.suppress(OSError):
            self._proc.stdin.close()  # type: ignore[union-attr]

    def stdout_lines(self) -> Iterator[str]:
        for raw in self._proc.stdout:  # type: ignore[union-attr]
            yield raw.decode("utf-8", "replace")

    def stderr_lines(self) -> Iterator[str]:
        for raw in self._proc.stderr:  # type: ignore[union-attr]
            yield raw.decode("utf-8", "replace")

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        self._proc.kill()

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        for pipe in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def end_process(process: OpenSSHProcess | RemoteProcess) -> None:
    with contextlib.suppress(SSHError, OSError):
        process.kill()


_HASH_SCRIPT = r"""
cd "$1" || exit 3; py=$2; shift 2
if ! command -v "$py" >/dev/null 2>&1; then
  if command -v sha256sum >/dev/null 2>&1; then exec sha256sum -- "$@"; fi
  if command -v shasum >/dev/null 2>&1; then exec shasum -a 256 -- "$@"; fi
fi
exec "$py" -c '
import hashlib, sys
for name in sys.argv[1:]:
    h = hashlib.sha256()
    with open(name, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    print(h.hexdigest() + "  " + name)
' "$@"
"""


def hash_on_node(
    conn: Connection, target: Target, folder: str, manifest: Manifest, names: Sequence[str]
) -> dict[str, str]:
    """SHA-256 of ``names`` under ``folder``, computed by the node."""
    size = sum(e.size for e in manifest.files if e.name in names)
    argv = ["/bin/sh", "-c", _HASH_SCRIPT, "sh", folder, target.interpreter, *names]
    result = conn.run(argv, timeout=max(60.0, size / HASH_MIN_RATE))
    digests = {}
    for line in result.stdout.splitlines():
        digest, _, name = line.partition("  ")
        if not name and " *" in line:
            digest, _, name = line.partition(" *")
        if re.fullmatch(r"[0-9a-f]{64}", digest.strip().lower()):
            digests[name] = digest.strip().lower()
    if result.rc != 0 and not digests:
        raise ModelCopyError(
            f"Could not compute file hashes on {target.name}: "
            f"{result.stderr.strip() or f'exit status {result.rc}'}."
        )
    return digests
