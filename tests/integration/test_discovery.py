"""core.cluster.discovery with real Bonjour records, every socket bound to 127.0.0.1.

Instance names carry a random token: loopback multicast is shared by every process on
the machine, so a parallel test run must not see (or clash with) these "Macs".
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from zeroconf import ServiceInfo, Zeroconf

from core.cluster import discovery as d
from core.cluster.registry import Registry, Source

LOOPBACK = ["127.0.0.1"]
WAIT = 60.0  # generous: a condition, not a timing (the machine may be busy)


class Recorder:
    """Every event a Discovery emits, in order, with a way to wait for a condition."""

    def __init__(self, source: d.Discovery) -> None:
        self.events: list[tuple[str, object]] = []
        self._cond = threading.Condition()
        source.added.connect(lambda peer: self._add("added", peer))
        source.updated.connect(lambda peer: self._add("updated", peer))
        source.removed.connect(lambda name: self._add("removed", name))

    def _add(self, kind: str, value: object) -> None:
        with self._cond:
            self.events.append((kind, value))
            self._cond.notify_all()

    def wait_for(self, what: str, predicate: Callable[[], bool]) -> None:
        with self._cond:
            assert self._cond.wait_for(predicate, WAIT), f"{what}; events: {self.events}"

    def latest(self, name: str) -> d.BonjourPeer | None:
        """The peer as the last event about it left it (None once removed)."""
        peer = None
        for kind, value in self.events:
            if kind == "removed" and value == name:
                peer = None
            elif kind != "removed" and value.name == name:  # type: ignore[attr-defined]
                peer = value
        return peer  # type: ignore[return-value]

    def kinds(self, name: str) -> list[str]:
        return [
            kind
            for kind, value in self.events
            if value == name or getattr(value, "name", None) == name
        ]


@pytest.fixture
def publisher() -> Iterator[Zeroconf]:
    zc = Zeroconf(interfaces=LOOPBACK)
    yield zc
    zc.close()


@pytest.fixture
def token() -> str:
    return uuid.uuid4().hex[:6]


def service(
    kind: str, name: str, host: str, address: str, port: int = 22, **txt: str
) -> ServiceInfo:
    return ServiceInfo(
        kind,
        f"{name}.{kind}",
        port=port,
        parsed_addresses=[address],
        server=f"{host}.local.",
        properties=txt,
    )


def register(zc: Zeroconf, infos: list[ServiceInfo]) -> None:
    """All at once: each registration waits ~2 s for zeroconf's name probing."""
    with ThreadPoolExecutor(len(infos)) as pool:
        list(pool.map(zc.register_service, infos))


def unregister(zc: Zeroconf, infos: list[ServiceInfo]) -> None:
    with ThreadPoolExecutor(len(infos)) as pool:
        list(pool.map(zc.unregister_service, infos))


def test_macs_and_a_linux_host_are_found_joined_and_lost(publisher: Zeroconf, token: str) -> None:
    studio_a, studio_b, linux = f"Studio A {token}", f"Studio B {token}", f"build-{token}"
    a = [
        service(d.SSH, studio_a, f"Studio-A-{token}", "192.0.2.10"),
        service(d.SFTP_SSH, studio_a, f"Studio-A-{token}", "192.0.2.10"),
        service(d.DEVICE_INFO, studio_a, f"Studio-A-{token}", "192.0.2.10", port=0,
                model="Mac15,14", osxvers="25"),
    ]  # fmt: skip
    b = [
        service(d.SSH, studio_b, f"Studio-B-{token}", "192.0.2.11", port=2222),
        service(d.DEVICE_INFO, studio_b, f"Studio-B-{token}", "192.0.2.11", port=0,
                model="Mac16,9", osxvers="24"),
    ]  # fmt: skip
    other = [service(d.SSH, linux, linux, "192.0.2.20")]
    browser = d.Discovery(LOOPBACK, advertise=False, resolve_timeout=2, device_info_timeout=0.5)
    events = Recorder(browser)
    registry = Registry()
    with browser:
        registry.follow(browser)
        register(publisher, a + b + other)
        full = frozenset({d.SSH, d.SFTP_SSH, d.DEVICE_INFO})

        def everyone_complete() -> bool:
            peer_a, peer_b, peer_l = (events.latest(n) for n in (studio_a, studio_b, linux))
            return (
                peer_a is not None and peer_a.services == full and peer_a.model is not None
                and peer_b is not None and peer_b.model is not None and peer_l is not None
            )  # fmt: skip

        events.wait_for("all three found, records joined", everyone_complete)
        peer_a = events.latest(studio_a)
        assert peer_a == d.BonjourPeer(
            name=studio_a,
            services=full,
            hostname=f"Studio-A-{token}.local",
            addresses=("192.0.2.10",),
            ssh_port=22,
            model="Mac15,14",
            osxvers=25,
        )
        assert peer_a.is_mac
        peer_b = events.latest(studio_b)
        assert peer_b is not None and peer_b.is_mac and peer_b.ssh_port == 2222
        peer_l = events.latest(linux)
        assert peer_l is not None and not peer_l.is_mac and peer_l.services == {d.SSH}
        assert peer_l.model is None and peer_l.hostname == f"{linux}.local"
        for name in (studio_a, studio_b, linux):
            assert events.kinds(name)[0] == "added" and events.kinds(name).count("added") == 1

        node = registry.get(studio_a)
        assert node is not None and node.is_mac and node.model_id == "Mac15,14"
        assert node.darwin == 25 and node.macos == "26" and node.sources == {Source.BONJOUR}
        assert node.ssh_host == f"Studio-A-{token}.local" and not node.is_self

        unregister(publisher, a[1:2])  # Remote Login's SFTP record goes: still there
        events.wait_for(
            "an update without SFTP",
            lambda: (p := events.latest(studio_a)) is not None and d.SFTP_SSH not in p.services,
        )
        unregister(publisher, [a[0], a[2]])  # goodbye packets for the rest
        events.wait_for("Studio A removed", lambda: ("removed", studio_a) in events.events)
        assert registry.get(studio_a) is None
        assert events.latest(studio_b) is not None and events.latest(linux) is not None
    # closed: what it no longer watches is forgotten
    assert events.latest(studio_b) is None and registry.get(linux) is None


def test_our_own_record_is_seen_by_another_copy(token: str) -> None:
    name = f"MacMesh Test {token}"
    ours = d.Discovery(LOOPBACK, instance_name=name, version="9.9", device_info_timeout=0.2)
    mine = Recorder(ours)
    theirs = d.Discovery(LOOPBACK, advertise=False, device_info_timeout=0.2)
    seen = Recorder(theirs)
    with theirs:
        ours.start()
        try:
            assert ours.own_name == name
            seen.wait_for("the other copy sees us", lambda: seen.latest(name) is not None)
            peer = seen.latest(name)
            assert peer is not None and peer.services == {d.MACMESH}
            assert peer.macmesh_version == "9.9" and not peer.is_self and not peer.is_mac
            assert peer.hostname == f"macmesh-macmesh-test-{token}.local"
            mine.wait_for("we see ourselves", lambda: mine.latest(name) is not None)
            assert mine.latest(name).is_self  # type: ignore[union-attr]
        finally:
            ours.close()
        seen.wait_for("goodbye on close", lambda: ("removed", name) in seen.events)
    ours.close()  # twice is fine


def test_device_info_is_asked_by_name_when_not_browsable(
    publisher: Zeroconf, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Mac's _device-info may be a bare TXT record that no browse finds: discovery asks
    for it by the instance name. Here it is simply not browsed."""
    monkeypatch.setattr(d, "SERVICE_TYPES", (d.SSH, d.SFTP_SSH, d.MACMESH))
    name = f"Studio C {token}"
    register(publisher, [
        service(d.DEVICE_INFO, name, f"Studio-C-{token}", "192.0.2.12", port=0,
                model="Mac16,9", osxvers="25"),
        service(d.SSH, name, f"Studio-C-{token}", "192.0.2.12"),
    ])  # fmt: skip
    browser = d.Discovery(LOOPBACK, advertise=False, device_info_timeout=30)
    events = Recorder(browser)
    with browser:
        # The node comes first (SSH is enough to start probing), its model in an update.
        events.wait_for(
            "Studio C found with its model",
            lambda: (p := events.latest(name)) is not None and p.model is not None,
        )
        peer = events.latest(name)
        assert peer is not None and peer.services == {d.SSH}
        assert peer.is_mac and peer.model == "Mac16,9" and peer.osxvers == 25


def test_service_types_are_the_four_we_browse() -> None:
    assert d.SERVICE_TYPES == (
        "_ssh._tcp.local.",
        "_sftp-ssh._tcp.local.",
        "_device-info._tcp.local.",
        "_macmesh._tcp.local.",
    )


def test_an_unknown_interface_is_refused() -> None:
    with pytest.raises(ValueError, match="no network interface 'nope0'"):
        d.Discovery(["nope0"], advertise=False).start()
    with pytest.raises(ValueError, match="at least one"):
        d.Discovery([], advertise=False).start()


def test_a_shared_api_port_is_announced_in_our_txt_and_withdrawn(token: str) -> None:
    name = f"MacMesh API {token}"
    ours = d.Discovery(LOOPBACK, instance_name=name, device_info_timeout=0.2)
    theirs = d.Discovery(LOOPBACK, advertise=False, device_info_timeout=0.2)
    seen = Recorder(theirs)
    with theirs:
        ours.start()
        try:
            seen.wait_for("the other copy sees us", lambda: seen.latest(name) is not None)
            assert seen.latest(name).api_port is None  # type: ignore[union-attr]
            ours.set_api_port(8123)
            seen.wait_for(
                "the API port in our TXT",
                lambda: getattr(seen.latest(name), "api_port", None) == 8123,
            )
            ours.set_api_port(None)
            seen.wait_for(
                "the API port withdrawn",
                lambda: seen.latest(name) is not None and seen.latest(name).api_port is None,
            )
        finally:
            ours.close()
