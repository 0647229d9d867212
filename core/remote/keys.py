"""The user's SSH keys and known hosts: trust on first use, never silently.

Host keys are checked against ``~/.ssh/known_hosts`` (OpenSSH's file, so
Terminal's ``ssh`` and MacMesh agree); a new key is only ever appended after
the person accepted its fingerprint. ``ensure_key`` creates the user's key
when they have none, for the one-time "set up access" step.
"""

from __future__ import annotations

import getpass
import logging
import os
import socket
from pathlib import Path

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.envvars import ENV_SSH_DIR

log = logging.getLogger(__name__)

KEY_NAMES = ("id_ed25519", "id_ecdsa", "id_rsa")


def default_ssh_dir() -> Path:
    """``~/.ssh``, or ``$MACMESH_SSH_DIR`` (tests and ``macmesh nodes`` subprocesses use it
    so they never read or write the person's own keys and known_hosts)."""
    override = os.environ.get(ENV_SSH_DIR)
    return Path(override) if override else Path.home() / ".ssh"


def host_key_name(host: str, port: int) -> str:
    """How known_hosts names a host: ``host``, or ``[host]:port`` off port 22 (lower-case,
    as OpenSSH writes and matches it)."""
    host = host.lower()
    return host if port == 22 else f"[{host}]:{port}"


def accept_host_key(host: str, port: int, key: paramiko.PKey, known_hosts: Path) -> None:
    """Remember ``key`` for ``host`` by appending one line (the file is never rewritten)."""
    known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    line = f"{host_key_name(host, port)} {key.get_name()} {key.get_base64()}\n"
    with open(known_hosts, "a+b") as file:
        file.seek(0, os.SEEK_END)
        if file.tell():
            file.seek(-1, os.SEEK_END)
            if file.read(1) != b"\n":
                line = "\n" + line
        file.write(line.encode())


def read_known_hosts(path: Path) -> tuple[paramiko.HostKeys, set[str]]:
    """The keys in ``path`` and the revoked ones; lines that do not parse are skipped."""
    keys, revoked = paramiko.HostKeys(), set[str]()
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return keys, revoked
    except OSError as error:
        log.warning("cannot read %s (%s); no host is known", path, error)
        return keys, revoked
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        marker = line.split(maxsplit=1)[0]
        if marker in ("@revoked", "@cert-authority"):
            fields = line.split()
            if marker == "@revoked" and len(fields) >= 4:
                revoked.add(fields[3])
            continue
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line, number)
        except Exception:  # paramiko raises a plain Exception on bad base64
            entry = None
        if entry is None:
            log.info("%s:%d does not parse; skipped", path, number)
            continue
        for name in entry.hostnames:
            keys.add(name, entry.key.get_name(), entry.key)
    return keys, revoked


def find_keys(ssh_dir: Path) -> list[Path]:
    """The user's private keys under the usual names, best first."""
    return [ssh_dir / name for name in KEY_NAMES if (ssh_dir / name).is_file()]


def ensure_key(ssh_dir: Path | None = None, comment: str | None = None) -> Path:
    """The user's key, generating ``id_ed25519`` (no passphrase) if they have none."""
    ssh_dir = ssh_dir or default_ssh_dir()
    existing = find_keys(ssh_dir)
    if existing:
        return existing[0]
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    comment = comment or f"{getpass.getuser()}@{socket.gethostname()} (MacMesh)"
    path = ssh_dir / "id_ed25519"
    _write_new(path, private, 0o600)
    _write_new(path.with_name(path.name + ".pub"), public + f" {comment}\n".encode(), 0o644)
    return path


def _write_new(path: Path, data: bytes, mode: int) -> None:
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(handle, "wb") as file:
        file.write(data)
