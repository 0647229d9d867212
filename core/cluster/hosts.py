"""Hosts a person added by hand, by name or address, remembered between runs.

Bonjour finds the Macs on the local link; a host behind a router, or a Linux box that
does not advertise SSH, is added by hand. The list is ``hosts.json`` in
``core.paths.config_dir()`` (docs/design.md, rule 6)::

    {
      "version": 1,
      "hosts": [
        {"host": "studio-b.local", "port": 22, "user": null},
        {"host": "192.168.1.40", "port": 2222, "user": "ml"}
      ]
    }

``host`` is a DNS or ``.local`` name (kept lower-case) or an IPv4/IPv6 address; ``user``
null means the same user name as on this Mac. Reading never fails: a missing file is an
empty list; a corrupt file is an empty list and a warning, and is moved aside to
``hosts.json.corrupt`` on the next save rather than overwritten; an entry that does not
parse is skipped with a warning. Writes are atomic (temporary file, fsync, rename).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psygnal import Signal

from core import paths
from core.jsonfile import read_json, write_json_atomic

log = logging.getLogger(__name__)

FILE_NAME = "hosts.json"
VERSION = 1
HOSTS_CAP = 1 << 20  # the hand-added hosts: a few lines each
_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
_USER = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class ManualHost:
    """One host added by hand: where to reach its SSH server, and as whom."""

    host: str
    port: int = 22
    user: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "host", check_host(self.host))
        if isinstance(self.port, bool) or not isinstance(self.port, int):
            raise ValueError(f"the port must be a number, not {self.port!r}")
        if not 1 <= self.port <= 65535:
            raise ValueError(f"the port must be from 1 to 65535, not {self.port}")
        if self.user is not None and not _USER.match(self.user):
            raise ValueError(f"{self.user!r} is not a user name")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and self.port != 22 else self.host
        user = f"{self.user}@" if self.user else ""
        return f"{user}{host}" + (f":{self.port}" if self.port != 22 else "")

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "port": self.port, "user": self.user}


def check_host(text: str) -> str:
    """``text`` as a host name (lower-case, no trailing dot) or address; ValueError if neither."""
    host = text.strip().rstrip(".") if isinstance(text, str) else ""
    if not host:
        raise ValueError("type a host name (studio-b.local) or an address (192.168.1.40)")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    host = host.lower()
    labels = host.split(".")
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise ValueError(f"{text.strip()!r} is neither a host name nor an IP address")
    if labels[-1].isdecimal():
        raise ValueError(f"{text.strip()!r} is not a valid IP address")
    return host


def parse_host(text: str) -> ManualHost:
    """What a person types: ``host``, ``user@host``, ``host:port``, ``[ipv6]:port``."""
    rest = text.strip()
    user = None
    if "@" in rest:
        user, rest = rest.rsplit("@", 1)
    port = 22
    if rest.startswith("["):
        host, sep, tail = rest[1:].partition("]")
        if not sep or (tail and not tail.startswith(":")):
            raise ValueError(f"{text.strip()!r}: write an IPv6 address with a port as [addr]:port")
        if tail:
            port = _port(tail[1:], text)
    elif rest.count(":") == 1:
        rest, port_text = rest.split(":")
        host, port = rest, _port(port_text, text)
    else:
        host = rest  # a name, an IPv4 address, or a bare IPv6 address
    return ManualHost(host, port, user or None)


def hosts_path() -> Path:
    return paths.config_dir() / FILE_NAME


def load_hosts(path: Path | None = None) -> list[ManualHost]:
    """The remembered hosts; an empty list when the file is missing or unreadable."""
    return _read(path or hosts_path())[0]


def save_hosts(hosts: Iterable[ManualHost], path: Path | None = None) -> None:
    """Write the list atomically: a reader sees the old file or the new one, never half."""
    path = path or hosts_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"version": VERSION, "hosts": [h.to_json() for h in hosts]}
    write_json_atomic(path, data)


class HostList:
    """The remembered hosts as an object the app holds: add, remove, and a ``changed`` signal.

    ``changed(hosts)`` fires on the thread that called ``add`` or ``remove``, after the file
    is written, with the whole new list (the registry takes it as is). Thread-safe.
    """

    changed = Signal(list)

    def __init__(self, path: Path | None = None, *, remember: bool = True) -> None:
        """``remember`` False: start from the file but never write it (``macmesh nodes
        --host`` looks at a host once without adding it for good)."""
        self.path = path or hosts_path()
        self.remember = remember
        self._lock = threading.Lock()
        self._hosts, self._corrupt = _read(self.path)

    def hosts(self) -> list[ManualHost]:
        with self._lock:
            return list(self._hosts)

    def add(self, host: ManualHost | str) -> ManualHost:
        """Remember ``host`` (text is parsed); the same host and port replaces the old entry."""
        new = parse_host(host) if isinstance(host, str) else host
        with self._lock:
            kept = [h for h in self._hosts if (h.host, h.port) != (new.host, new.port)]
            self._store([*kept, new])
            hosts = list(self._hosts)
        self.changed.emit(hosts)
        return new

    def remove(self, host: ManualHost) -> bool:
        """Forget ``host`` (matched by host and port); False if it was not in the list."""
        with self._lock:
            kept = [h for h in self._hosts if (h.host, h.port) != (host.host, host.port)]
            if len(kept) == len(self._hosts):
                return False
            self._store(kept)
            hosts = list(self._hosts)
        self.changed.emit(hosts)
        return True

    def _store(self, hosts: list[ManualHost]) -> None:
        if not self.remember:
            self._hosts = hosts
            return
        if self._corrupt:
            aside = self.path.with_name(self.path.name + ".corrupt")
            os.replace(self.path, aside)
            log.warning("moved the unreadable %s aside to %s", self.path, aside)
            self._corrupt = False
        save_hosts(hosts, self.path)
        self._hosts = hosts


def _port(text: str, original: str) -> int:
    if not text.isdecimal():
        raise ValueError(f"{original.strip()!r}: the port must be a number, not {text!r}")
    return int(text)


def _read(path: Path) -> tuple[list[ManualHost], bool]:
    """The hosts in ``path``, and whether the file exists but could not be read as a list."""
    if not path.exists():
        return [], False
    try:  # a FIFO, a huge or damaged file: one line naming it (FileProblem), no hang
        data = read_json(path, HOSTS_CAP)
    except (OSError, ValueError) as error:
        log.warning("cannot read %s (%s); starting with no manual hosts", path, error)
        return [], True
    entries = data.get("hosts") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        log.warning("%s has no list of hosts; starting with no manual hosts", path)
        return [], True
    hosts: list[ManualHost] = []
    for entry in entries:
        try:
            if not isinstance(entry, dict):
                raise ValueError(f"{entry!r} is not an object")
            host = ManualHost(entry.get("host", ""), entry.get("port", 22), entry.get("user"))
        except (ValueError, TypeError) as error:
            log.warning("%s: skipping a host entry: %s", path, error)
            continue
        if all((h.host, h.port) != (host.host, host.port) for h in hosts):
            hosts.append(host)
    return hosts, False
