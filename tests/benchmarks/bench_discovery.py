"""Finding and probing the Macs (issue 5's budgets), everything on loopback.

``discovery``: simulated Macs publish ``_ssh._tcp`` + ``_device-info._tcp`` on 127.0.0.1;
from a record's publication (its first announcement leaves the publisher: zeroconf's
name probing is over) to the node in the ``Registry`` (p50 < 300 ms, p99 < 1 s), and
from the goodbye to the node's removal (< 1 s).

``probe``: a ``Scanner`` probing one simulated Mac over the real sshd, against eight at
once (127.0.0.2-.9, mesh4 + ring4 fixtures); the target is 8 in under 1.5 x the time of
one. The "Macs" share this machine's cores, so each probe's own shell work is counted in
both; on real Macs it runs on the Macs. Their sessions get an empty HOME, as a fresh
account has: the test machine's own shell start-up files are not part of what is measured.

Run one: ``python -m tests.benchmarks.bench_discovery discovery|probe``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from zeroconf import ServiceInfo, Zeroconf

from core.cluster import discovery as d
from core.cluster.hosts import HostList
from core.cluster.registry import ProbeState, Registry
from core.cluster.scanner import Scanner
from tests.fixtures.macos.make_bin import make_bin

LOOPBACK = ["127.0.0.1"]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "macos"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


class _Clock:
    """When each node appeared in / left the registry (monotonic seconds)."""

    def __init__(self, registry: Registry) -> None:
        self.added: dict[str, float] = {}
        self.removed: dict[str, float] = {}
        self.cond = threading.Condition()
        registry.added.connect(lambda node: self._mark(self.added, node.name))
        registry.removed.connect(lambda name: self._mark(self.removed, name))

    def _mark(self, table: dict[str, float], name: str) -> None:
        now = time.monotonic()
        with self.cond:
            table.setdefault(name, now)
            self.cond.notify_all()

    def wait(self, table: dict[str, float], names: list[str], timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: all(n in table for n in names), timeout)


def bench_discovery(macs: int = 30, batch: int = 5) -> dict:
    """``macs`` simulated Macs, published ``batch`` at a time."""
    token = uuid.uuid4().hex[:6]
    registry = Registry()
    clock = _Clock(registry)
    browser = d.Discovery(LOOPBACK, advertise=False)
    registry.follow(browser)
    publisher = Zeroconf(interfaces=LOOPBACK)
    published: dict[str, float] = {}
    goodbye: dict[str, float] = {}
    records: dict[str, list[ServiceInfo]] = {}

    async def publish(name: str, infos: list[ServiceInfo]) -> None:
        async def one(info: ServiceInfo) -> None:
            announcing = await publisher.async_register_service(info)  # name probed
            now = time.monotonic()  # its first announcement goes out now
            published[name] = min(published.get(name, now), now)
            await announcing

        await asyncio.gather(*(one(info) for info in infos))

    async def withdraw(name: str, infos: list[ServiceInfo]) -> None:
        goodbye[name] = time.monotonic()
        await asyncio.gather(*[await publisher.async_unregister_service(i) for i in infos])

    def run(coroutines: list) -> None:
        async def together() -> None:
            await asyncio.gather(*coroutines)

        asyncio.run_coroutine_threadsafe(together(), publisher.loop).result(60)

    names = [f"Bench Mac {i:02d} {token}" for i in range(macs)]
    for i, name in enumerate(names):
        host = f"bench-{i:02d}-{token}.local."
        address = f"127.0.1.{i + 1}"
        records[name] = [
            ServiceInfo(d.SSH, f"{name}.{d.SSH}", port=22, parsed_addresses=[address],
                        server=host),
            ServiceInfo(d.DEVICE_INFO, f"{name}.{d.DEVICE_INFO}", port=0,
                        parsed_addresses=[address], server=host,
                        properties={"model": "Mac15,14", "osxvers": "25"}),
        ]  # fmt: skip
    try:
        browser.start()
        time.sleep(1.0)  # the browser's first queries are out: measure steady state
        for start in range(0, macs, batch):
            group = names[start : start + batch]
            run([publish(name, records[name]) for name in group])
        found = clock.wait(clock.added, names, 10)
        late = _late_browser(names)
        for start in range(0, macs, batch):
            group = names[start : start + batch]
            run([withdraw(name, records[name]) for name in group])
        gone = clock.wait(clock.removed, names, 10)
    finally:
        browser.close()
        publisher.close()
    appear = [clock.added[n] - published[n] for n in names if n in clock.added]
    vanish = [clock.removed[n] - goodbye[n] for n in names if n in clock.removed]
    return {
        "macs": macs,
        "all_found": found,
        "all_removed": gone,
        "publish_to_registry_p50_ms": _ms(statistics.median(appear)),
        "publish_to_registry_p99_ms": _ms(_percentile(appear, 99)),
        "publish_to_registry_max_ms": _ms(max(appear)),
        "browser_started_after_to_all_found_ms": late,
        "goodbye_to_removal_p50_ms": _ms(statistics.median(vanish)) if vanish else None,
        "goodbye_to_removal_max_ms": _ms(max(vanish)) if vanish else None,
        "budget": "p50 < 300 ms, p99 < 1000 ms; removal < 1000 ms",
    }


def _late_browser(names: list[str]) -> float | None:
    """A copy started after the Macs announced themselves finds them by querying: the
    time from its start to the last one in its registry (None: not all within 10 s)."""
    registry = Registry()
    clock = _Clock(registry)
    browser = d.Discovery(LOOPBACK, advertise=False)
    registry.follow(browser)
    started = time.monotonic()
    try:
        browser.start()
        if not clock.wait(clock.added, names, 10):
            return None
        return _ms(max(clock.added[n] for n in names) - started)
    finally:
        browser.close()


PROBE_HOSTS = [("mesh4", h) for h in ("studio-a", "studio-b", "studio-c", "studio-d")] + [
    ("ring4", h) for h in ("ring-a", "ring-b", "ring-c", "ring-d")
]


def _probe_time(server, known_hosts: Path, addresses: list[str]) -> float:
    """Seconds from adding ``addresses`` to a Scanner until every one is READY."""
    with tempfile.TemporaryDirectory() as config:
        scanner = Scanner(
            interfaces=LOOPBACK, host_list=HostList(Path(config) / "hosts.json"),
            known_hosts=known_hosts, ssh_dir=server.client_dir, publish=False,
            python="macmesh-python", use_agent=False, max_workers=8,
        )  # fmt: skip
        names = [f"{a}:{server.port}" for a in addresses]
        done = threading.Event()

        def check(_name: str) -> None:
            nodes = [scanner.registry.get(n) for n in names]
            if all(n is not None and n.probe_state is ProbeState.READY for n in nodes):
                done.set()

        scanner.probed.connect(check)
        with scanner:
            started = time.monotonic()
            for name in names:
                scanner.hosts.add(name)
            if not done.wait(120):
                states = {n: scanner.registry.get(n) for n in names}
                raise RuntimeError(f"probes did not all succeed: {states}")
            return time.monotonic() - started


def _slow_profiler(bin_dir: Path, seconds: float) -> None:
    """Make the fake system_profiler take ``seconds`` of wall time, as on a Mac (where
    SPThunderboltDataType takes about a second), without using this machine's CPU."""
    real = bin_dir / "system_profiler"
    real.rename(bin_dir / "system_profiler.fixture")
    real.write_text(
        f'#!/bin/sh\nsleep {seconds}\nexec "$(dirname "$0")/system_profiler.fixture" "$@"\n'
    )
    real.chmod(0o755)


def bench_probe(rounds: int = 3) -> dict:
    """Two cases: the fixture commands as they are (every simulated Mac's shell work runs
    on this machine's cores, so 8 probes compete for 2 cores), and the same with
    system_profiler taking 1 s of wall time on "the Mac", as it does on real ones: there
    the probes' time is the Macs' own, and what is left is MacMesh's parallelism."""
    return {
        "fixture_commands": _bench_probe(rounds, profiler_s=0.0),
        "system_profiler_1s_on_the_mac": _bench_probe(rounds, profiler_s=1.0),
        "budget": "eight in under 1.5 x one",
    }


def _bench_probe(rounds: int, profiler_s: float) -> dict:
    from tests.helpers.sshd import running_sshd

    addresses = [f"127.0.0.{i}" for i in range(2, 2 + len(PROBE_HOSTS))]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bins = {
            a: make_bin(FIXTURES / s / h, root / "bins" / h)
            for a, (s, h) in zip(addresses, PROBE_HOSTS, strict=True)
        }
        if profiler_s:
            for folder in bins.values():
                _slow_profiler(folder, profiler_s)
        home = root / "home"  # a fresh account's HOME: this machine's own shell start-up
        home.mkdir()  # files (pyenv here: ~0.6 s of CPU per session) are not the Macs'
        with running_sshd(root / "sshd", bins, addresses, {"HOME": str(home)}) as server:
            known = root / "known_hosts"
            known.write_text(server.known_hosts_lines())
            _probe_time(server, known, addresses[:1])  # warm caches
            one, eight = [], []
            for i in range(rounds):  # alternate the order: neither always goes first
                pair = [(one, addresses[:1]), (eight, addresses)]
                for times, which in pair if i % 2 == 0 else reversed(pair):
                    times.append(_probe_time(server, known, which))
    t1, t8 = statistics.median(one), statistics.median(eight)
    return {
        "rounds": rounds,
        "one_node_s": round(t1, 3),
        "eight_nodes_s": round(t8, 3),
        "ratio": round(t8 / t1, 2),
        "one_node_runs_s": [round(t, 3) for t in one],
        "eight_nodes_runs_s": [round(t, 3) for t in eight],
    }


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "discovery"
    bench = {"discovery": bench_discovery, "probe": bench_probe}[which]
    print(json.dumps(bench(), indent=2))
