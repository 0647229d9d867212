"""Find the Macs (and other SSH hosts) on the local network over Bonjour, and advertise us.

A Mac with Remote Login on advertises ``_ssh._tcp`` and ``_sftp-ssh._tcp``; every Mac
advertises ``_device-info._tcp`` with TXT ``model=Mac15,14 osxvers=25``; a running MacMesh
advertises ``_macmesh._tcp``. The records of one machine share its instance name (the
Mac's Computer Name), so they are joined by that name into one ``BonjourPeer``. A peer
is a Mac when its model identifier starts with ``Mac``; a Linux host advertising
``_ssh._tcp`` is kept as another SSH host (it can join a ring job).

Threads: ``added``, ``updated`` and ``removed`` fire on the zeroconf ``ServiceBrowser``'s
own thread (one per ``Discovery``, so events arrive in order), except the ``updated`` that
adds a Mac's model asked for by name, which fires on a ``device-info`` asker thread
(after the node's ``added``, in the order of the snapshots). Resolving a record blocks
that thread (up to ``resolve_timeout``), which is what zeroconf intends; slots must not
block for long and must not call ``close()``. The GUI crosses threads in ``gui/bridge.py``.

Removal relies on zeroconf: a goodbye packet, or the record's TTL running out, gives
``ServiceStateChange.Removed``; a peer is removed when the last of its services is.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from typing import Literal

import psutil
from psygnal import Signal, SignalInstance
from zeroconf import InterfaceChoice, ServiceBrowser, ServiceInfo, ServiceStateChange, Zeroconf

log = logging.getLogger(__name__)

SSH = "_ssh._tcp.local."
SFTP_SSH = "_sftp-ssh._tcp.local."
DEVICE_INFO = "_device-info._tcp.local."
MACMESH = "_macmesh._tcp.local."
#: Every type MacMesh browses; Info.plist's NSBonjourServices must list each (packaging test).
SERVICE_TYPES: tuple[str, ...] = (SSH, SFTP_SSH, DEVICE_INFO, MACMESH)
#: What the ``_macmesh._tcp`` TXT ``proto=`` says: bumped when copies can no longer talk.
PROTOCOL = "1"

Interfaces = Sequence[str] | Literal["all"]
_ASK_FIRST_ROUND_S = 0.025  # asking for a _device-info TXT: one query per round,
_ASK_ROUND_S = 1.0  # rounds doubling up to this (zeroconf repeats a question once a second)
_ASKERS = 4  # threads asking for bare TXT records, so the browser thread never waits


@dataclass(frozen=True)
class BonjourPeer:
    """One machine as its Bonjour records describe it, joined by instance name."""

    name: str
    services: frozenset[str]
    hostname: str | None = None
    addresses: tuple[str, ...] = ()
    ssh_port: int | None = None
    model: str | None = None
    osxvers: int | None = None
    macmesh_version: str | None = None
    is_self: bool = False
    api_port: int | None = None  # a copy of MacMesh sharing its cluster's API on this port

    @property
    def is_mac(self) -> bool:
        return bool(self.model and self.model.startswith("Mac"))


@dataclass
class _Record:
    server: str | None
    port: int | None
    addresses: tuple[str, ...]
    txt: dict[str, str]


@dataclass
class _Entry:
    name: str
    records: dict[str, _Record] = field(default_factory=dict)
    device_info: dict[str, str] | None = None
    asked_device_info: bool = False


class Discovery:
    """Browse ``SERVICE_TYPES`` on ``interfaces`` and (optionally) advertise ``_macmesh._tcp``.

    ``interfaces`` is ``"all"`` (the app on a Mac) or a list of addresses or interface
    names (``"en0"``); tests pass ``["127.0.0.1"]`` so nothing leaves the machine.
    """

    added = Signal(BonjourPeer)
    updated = Signal(BonjourPeer)
    removed = Signal(str)

    def __init__(
        self,
        interfaces: Interfaces = "all",
        *,
        advertise: bool = True,
        instance_name: str | None = None,
        ssh_port: int = 22,
        version: str | None = None,
        resolve_timeout: float = 3.0,
        device_info_timeout: float = 20.0,
    ) -> None:
        self.interfaces = interfaces
        self.advertise = advertise
        self.instance_name = instance_name or computer_name()
        self.ssh_port = ssh_port
        self.version = version or _app_version()
        self._resolve_ms = int(resolve_timeout * 1000)
        self._device_info_ms = int(device_info_timeout * 1000)
        self._lock = threading.Lock()
        # Held from a peer's snapshot to its signal, so the browser thread and the askers
        # emit in the order their snapshots were taken.
        self._emit_lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._zc: Zeroconf | None = None
        self._browser: ServiceBrowser | None = None
        self._own: ServiceInfo | None = None
        self._askers: ThreadPoolExecutor | None = None
        self._closing = threading.Event()
        self.own_name: str | None = None  # our instance name once registered (may be renamed)
        self.api_port: int | None = None  # the API's port in our TXT, while it is shared
        self._revision = 0  # our TXT's changes since registering

    def start(self) -> None:
        """Open zeroconf, register ``_macmesh._tcp`` (blocks ~2 s while zeroconf probes the
        name, so call it off the GUI thread), then browse."""
        if self._zc is not None:
            return
        choice, addresses = _interface_choice(self.interfaces)
        self._zc = Zeroconf(interfaces=choice)
        self._closing.clear()
        self._askers = ThreadPoolExecutor(_ASKERS, thread_name_prefix="device-info")
        try:
            if self.advertise:
                self._own = self._own_info(addresses)
                self._zc.register_service(self._own, allow_name_change=True)
                self.own_name = _instance(self._own.name, MACMESH)
            types = list(SERVICE_TYPES)
            self._browser = ServiceBrowser(self._zc, types, handlers=[self._on_change])
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop browsing, say goodbye for our record, close the sockets. Idempotent.

        Every peer still known is then ``removed`` (on the calling thread), so a registry
        following us forgets what we no longer watch. Never call it from a signal slot: it
        joins the browser thread those run on."""
        browser, zc, own, askers = self._browser, self._zc, self._own, self._askers
        self._browser = self._zc = self._own = self._askers = None
        self._closing.set()
        if browser is not None:
            browser.cancel()
        if askers is not None:  # each ends within one round (at most _ASK_ROUND_S)
            askers.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            gone, self._entries = [e.name for e in self._entries.values()], {}
        for name in gone:
            self._emit(self.removed, name)
        if zc is not None:
            if own is not None:
                with contextlib.suppress(Exception):
                    zc.unregister_service(own)
            zc.close()

    def set_api_port(self, port: int | None) -> None:
        """Say in our ``_macmesh._tcp`` TXT (``api=PORT``) that this Mac shares its
        cluster's API on ``port`` (None: no longer). Blocks while zeroconf announces it:
        call it off the GUI thread."""
        self.api_port = port
        self._revision += 1
        zc, own = self._zc, self._own
        if zc is None or own is None:
            return  # said when registered
        info = self._own_info([str(a) for a in own.parsed_addresses()], own.name)
        zc.update_service(info)
        self._own = info

    def __enter__(self) -> Discovery:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def peers(self) -> list[BonjourPeer]:
        with self._lock:
            return [self._peer(entry) for entry in self._entries.values()]

    # -- the browser thread ------------------------------------------------------------

    def _on_change(
        self, zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange
    ) -> None:
        try:
            with self._emit_lock:
                self._handle(zeroconf, service_type, name, state_change)
        except Exception:  # an exception would end the browser thread: log and keep going
            log.exception("discovery: could not handle %s %s", state_change, name)

    def _handle(
        self, zc: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange
    ) -> None:
        instance = _instance(name, service_type)
        key = instance.lower()
        if state_change is ServiceStateChange.Removed:
            with self._lock:
                entry = self._entries.get(key)
                if entry is None or entry.records.pop(service_type, None) is None:
                    return
                if not entry.records:
                    del self._entries[key]
                    gone = entry.name
                else:
                    gone, peer = None, self._peer(entry)
            if gone is not None:
                self._emit(self.removed, gone)
            else:
                self._emit(self.updated, peer)
            return
        record = self._resolve(zc, service_type, name)
        with self._lock:
            entry = self._entries.get(key)
            is_new = entry is None
            if entry is None:
                entry = self._entries[key] = _Entry(instance)
            before = None if is_new else self._peer(entry)
            entry.records[service_type] = record
            if service_type == DEVICE_INFO and record.txt:
                entry.device_info = record.txt
            ask = entry.device_info is None and not entry.asked_device_info
            entry.asked_device_info = True
            peer = self._peer(entry)
        # The node first, its model after: asking for a bare TXT takes up to
        # device_info_timeout, and the SSH record alone is enough to start probing.
        if is_new:
            self._emit(self.added, peer)
        elif peer != before:
            self._emit(self.updated, peer)
        askers = self._askers
        if ask and askers is not None:
            # A Mac's _device-info may be a bare TXT record, not browsable: ask by name, on
            # an asker thread (the first answer can take seconds on a busy machine).
            with contextlib.suppress(RuntimeError):  # closing: nothing more to ask
                askers.submit(self._ask_device_info, zc, instance, key, entry)

    def _ask_device_info(self, zc: Zeroconf, instance: str, key: str, entry: _Entry) -> None:
        try:
            txt = self._device_info(zc, instance)
        except Exception:  # zeroconf closed under us, or a malformed answer
            log.debug("discovery: asking for %s's device info failed", instance, exc_info=True)
            return
        with self._emit_lock:
            with self._lock:
                if not txt or entry.device_info is not None or self._entries.get(key) is not entry:
                    return  # nothing new, or removed while we asked
                entry.device_info = txt
                peer = self._peer(entry)
            self._emit(self.updated, peer)

    def _resolve(self, zc: Zeroconf, service_type: str, name: str) -> _Record:
        info = ServiceInfo(service_type, name)
        if not info.load_from_cache(zc) and not (service_type == DEVICE_INFO and info.text):
            info.request(zc, self._resolve_ms)
        return _record(info)

    def _device_info(self, zc: Zeroconf, instance: str) -> dict[str, str]:
        """The TXT of ``instance``'s ``_device-info``. A bare TXT record never makes a
        ServiceInfo complete (no SRV, no address), so ``request`` would wait its whole
        timeout even after the TXT came: ask in short rounds until it is here or the
        generous deadline passes (the first question can go unanswered while the peer's
        responder is busy; zeroconf repeats a question at most once a second)."""
        info = ServiceInfo(DEVICE_INFO, f"{instance}.{DEVICE_INFO}")
        deadline = time.monotonic() + self._device_info_ms / 1000
        info.load_from_cache(zc)
        round_s = _ASK_FIRST_ROUND_S  # short first: the TXT usually comes within milliseconds
        while not info.text and not self._closing.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            info.request(zc, max(1, int(min(left, round_s) * 1000)))
            round_s = min(round_s * 2, _ASK_ROUND_S)
        return _record(info).txt

    def _peer(self, entry: _Entry) -> BonjourPeer:
        """The joined view: host and port from SSH first, then SFTP, MacMesh, device-info."""
        order = (SSH, SFTP_SSH, MACMESH, DEVICE_INFO)
        records = [entry.records[t] for t in order if t in entry.records]
        hostname = next((r.server for r in records if r.server), None)
        addresses = next((r.addresses for r in records if r.addresses), ())
        ssh = entry.records.get(SSH) or entry.records.get(SFTP_SSH)
        info = entry.device_info or {}
        own = entry.records.get(MACMESH)
        return BonjourPeer(
            name=entry.name,
            services=frozenset(entry.records),
            hostname=hostname.rstrip(".") if hostname else None,
            addresses=addresses,
            ssh_port=ssh.port if ssh and ssh.port else None,
            model=info.get("model") or None,
            osxvers=_int(info.get("osxvers")),
            macmesh_version=own.txt.get("version", "") if own else None,
            api_port=_int(own.txt.get("api")) if own else None,
            is_self=self.own_name is not None and entry.name.lower() == self.own_name.lower(),
        )

    def _emit(self, signal: SignalInstance, value: object) -> None:
        try:
            signal.emit(value)
        except Exception:
            log.exception("discovery: a slot failed on %r", value)

    def _own_info(self, addresses: list[str], name: str | None = None) -> ServiceInfo:
        if not addresses:
            addresses = _ipv4_addresses() or ["127.0.0.1"]
        properties = {"version": self.version, "proto": PROTOCOL}
        if self.api_port is not None:
            properties["api"] = str(self.api_port)
        if self._revision:
            # A TXT equal to one a browser still caches is not reported as an update
            # (python-zeroconf): each change carries a new revision.
            properties["rev"] = str(self._revision)
        return ServiceInfo(
            MACMESH,
            name or f"{self.instance_name}.{MACMESH}",
            port=self.ssh_port,
            parsed_addresses=addresses,
            # Never the machine's own host name: A records differing from mDNSResponder's
            # would be a conflict, and macOS would rename the Mac.
            server=f"macmesh-{_label(self.instance_name)}.local.",
            properties=properties,
        )


def computer_name() -> str:
    """The Mac's Computer Name (what Bonjour instance names use); the host name elsewhere."""
    if sys.platform == "darwin":
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                ["/usr/sbin/scutil", "--get", "ComputerName"],
                capture_output=True,
                text=True,
                timeout=5,
                check=True,
            ).stdout.strip()
            if out:
                return out
    return socket.gethostname().split(".")[0] or "MacMesh"


def default_interfaces() -> Interfaces:
    """Where discovery browses and announces when nobody chose: every interface on macOS
    (the app on a Mac looks for the Macs beside it), only 127.0.0.1 anywhere else. A Linux
    or CI machine running MacMesh is a development box: it must never browse or announce
    on a real network by accident. ``--interfaces`` and ``Settings.interfaces`` override."""
    return "all" if sys.platform == "darwin" else ["127.0.0.1"]


def choose_interfaces(
    given: Sequence[str] | str | None = None, saved: Sequence[str] = ()
) -> Interfaces:
    """What to browse: ``given`` (``--interfaces``: a list, or "en0,en1" / "all" as typed),
    else the saved setting, else ``default_interfaces()``."""
    if isinstance(given, str):
        given = [item.strip() for item in given.split(",") if item.strip()]
    for choice in (given, saved):
        if choice:
            return "all" if list(choice) == ["all"] else tuple(choice)
    return default_interfaces()


def _interface_choice(interfaces: Interfaces) -> tuple[InterfaceChoice | list[str], list[str]]:
    """zeroconf's interface choice, and the addresses we advertise (empty: all of ours)."""
    if interfaces == "all":
        return InterfaceChoice.All, []
    addresses: list[str] = []
    for item in interfaces:
        try:
            addresses.append(str(ipaddress.ip_address(item)))
        except ValueError:
            nics = psutil.net_if_addrs().get(item, [])
            found = [nic.address for nic in nics if nic.family == socket.AF_INET]
            if not found:
                raise ValueError(f"no network interface {item!r} with an IPv4 address") from None
            addresses.extend(found)
    if not addresses:
        raise ValueError("discovery needs at least one interface, or 'all'")
    return addresses, addresses


def _ipv4_addresses() -> list[str]:
    """This machine's IPv4 addresses, loopback excluded."""
    return [
        nic.address
        for nics in psutil.net_if_addrs().values()
        for nic in nics
        if nic.family == socket.AF_INET and not nic.address.startswith("127.")
    ]


def _record(info: ServiceInfo) -> _Record:
    txt = {k: v or "" for k, v in info.decoded_properties.items()} if info.text else {}
    return _Record(
        server=info.server or None,
        port=info.port or None,
        addresses=tuple(info.parsed_scoped_addresses()),
        txt=txt,
    )


def _instance(name: str, service_type: str) -> str:
    suffix = "." + service_type
    return name[: -len(suffix)] if name.endswith(suffix) else name


def _label(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:50] or "mac"


def _int(text: str | None) -> int | None:
    return int(text) if text and text.strip().isdecimal() else None


def _app_version() -> str:
    try:
        return metadata.version("macmesh")
    except metadata.PackageNotFoundError:
        return "0"


__all__ = [
    "DEVICE_INFO",
    "MACMESH",
    "SERVICE_TYPES",
    "SFTP_SSH",
    "SSH",
    "BonjourPeer",
    "Discovery",
    "choose_interfaces",
    "computer_name",
    "default_interfaces",
]
