"""A link test's figures, on the controller: each link's latency and bandwidth, set
against what the link is rated for (the task that runs it: ``core.run.tasks.linktest``).

The ranks measure (``core.worker.linktest``: ping-pong over MLX's send/recv per pair,
``all_sum`` over the group, 4 KiB to 64 MiB); this module turns their table into one
result per link: its latency (half the round trip of the smallest message), its
bandwidth (the largest message's one-way rate) and the share of its nominal rate:
80 Gb/s for a Thunderbolt 5 cable, 40 Gb/s for Thunderbolt 4, the speed the port
reports otherwise. The demo's links are loopback: their "nominal" is what a plain TCP
socket pair carries on this machine, measured with the same ping-pong
(``tcp_ping_pong``), which is also the bench's baseline.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.cluster.topology import Topology
from core.units import bytes_per_s
from core.worker import protocol

# The same sizes as the ranks' default (core.worker.linktest.DEFAULT_SIZES).
SIZES = tuple(4096 * 4**k for k in range(8))
BYTES_PER_SIZE = 32 << 20
THUNDERBOLT = {80: "Thunderbolt 5", 40: "Thunderbolt 4", 20: "Thunderbolt 3"}


@dataclass(frozen=True)
class Nominal:
    """What a link is rated for: a label for people, and bytes/s (None: unknown)."""

    label: str
    bytes_per_s: float | None

    def describe(self) -> str:
        return self.label


@dataclass(frozen=True)
class LinkResult:
    """One link the job uses: ranks ``a`` and ``b`` on ``nodes``."""

    a: int
    b: int
    nodes: tuple[str, str]
    latency_s: float  # one way, the smallest message
    bytes_per_s: float  # one way, the largest message
    points: tuple[dict[str, float], ...]  # every size: bytes, seconds, bytes_per_s
    nominal: Nominal

    @property
    def share(self) -> float | None:
        """Of the nominal rate, 0..1 (and above, when the nominal is an underestimate)."""
        if not self.nominal.bytes_per_s:
            return None
        return self.bytes_per_s / self.nominal.bytes_per_s

    def describe(self) -> str:
        """One line, e.g. ``studio-a ↔ studio-b: 8.6 GB/s (93 % of Thunderbolt 5), 9 µs``."""
        share = f" ({self.share:.0%} of {self.nominal.label})" if self.share is not None else ""
        share = share.replace("%", " %")
        latency = self.latency_s * 1e6
        return (
            f"{self.nodes[0]} ↔ {self.nodes[1]}: {bytes_per_s(self.bytes_per_s)}{share}, "
            f"latency {latency:.0f} µs"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ranks": [self.a, self.b],
            "nodes": list(self.nodes),
            "latency_us": round(self.latency_s * 1e6, 1),
            "bytes_per_s": round(self.bytes_per_s, 1),
            "nominal": self.nominal.label,
            "nominal_bytes_per_s": self.nominal.bytes_per_s,
            "share": None if self.share is None else round(self.share, 4),
            "points": [dict(point) for point in self.points],
        }


def link_results(
    event: protocol.LinkTest,
    nodes: Sequence[str],
    nominal: Mapping[frozenset[str], Nominal] | Nominal,
) -> list[LinkResult]:
    """The ranks' ``link_test`` event as one result per link. ``nodes`` names the ranks
    (rank order); ``nominal`` is one rate for all links, or one per pair of node names
    (a pair missing gets "unknown")."""
    results = []
    for link in event["links"]:
        a, b = int(link["a"]), int(link["b"])
        points = sorted(
            (
                {
                    "bytes": float(p["bytes"]),
                    "seconds": float(p["seconds"]),
                    "bytes_per_s": float(p["bytes_per_s"]),
                }
                for p in link["points"]
            ),
            key=lambda p: p["bytes"],
        )
        if not points:
            continue
        pair = (nodes[a], nodes[b])
        rated = (
            nominal
            if isinstance(nominal, Nominal)
            else nominal.get(frozenset(pair), Nominal("rate unknown", None))
        )
        results.append(
            LinkResult(
                a=a,
                b=b,
                nodes=pair,
                latency_s=points[0]["seconds"],
                bytes_per_s=points[-1]["bytes_per_s"],
                points=tuple(points),
                nominal=rated,
            )
        )
    return results


def cable_nominals(
    topology: Topology, pairs: Sequence[tuple[str, str]]
) -> dict[frozenset[str], Nominal]:
    """Each pair's rate from its Thunderbolt cable (the fastest, when there are two);
    pairs with no cable are left out (their rate is unknown)."""
    rated = {}
    for a, b in pairs:
        if a not in topology.nodes or b not in topology.nodes:
            continue
        speeds = [c.speed_gbps for c in topology.between(a, b) if c.speed_gbps]
        if speeds:
            gbps = max(speeds)
            label = THUNDERBOLT.get(gbps, f"{gbps} Gb/s Thunderbolt")
            rated[frozenset((a, b))] = Nominal(label, gbps * 1e9 / 8)
    return rated


def all_sum_results(event: protocol.LinkTest) -> list[dict[str, float]]:
    return [
        {
            "bytes": float(p["bytes"]),
            "seconds": float(p["seconds"]),
            "bytes_per_s": float(p["bytes_per_s"]),
        }
        for p in event["all_sum"]
    ]


def iterations(nbytes: int, scale: float = 1.0) -> int:
    """Round trips at one size, as the ranks do (core.worker.linktest.iterations)."""
    return max(3, min(200, int(BYTES_PER_SIZE * scale) // max(1, nbytes)))


def tcp_ping_pong(
    host: str = "127.0.0.1", sizes: Sequence[int] = SIZES, scale: float = 1.0
) -> list[dict[str, float]]:
    """A plain TCP socket pair on ``host``, timed like the ranks time a link: the
    message there and back, half the round trip one way. The demo's nominal rate and
    the bench's baseline."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as server:
        server.bind((host, 0))
        server.listen(1)
        port = server.getsockname()[1]
        echo = threading.Thread(target=_echo, args=(server, sizes, scale), daemon=True)
        echo.start()
        with socket.create_connection((host, port), timeout=30) as client:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            points = []
            for nbytes in sizes:
                message = bytes(nbytes)
                buffer = bytearray(nbytes)
                iters = iterations(nbytes, scale)
                for turn in range(iters + 1):  # the first is a warm-up
                    if turn == 1:
                        start = time.perf_counter()
                    client.sendall(message)
                    _receive(client, buffer)
                one_way = (time.perf_counter() - start) / iters / 2
                points.append(
                    {"bytes": float(nbytes), "seconds": one_way, "bytes_per_s": nbytes / one_way}
                )
        echo.join(timeout=30)
    return points


def loopback_nominal(scale: float = 1.0) -> Nominal:
    """The demo's links are loopback: rated at what a plain TCP stream carries here."""
    points = tcp_ping_pong("127.0.0.1", SIZES[-1:], scale)
    return Nominal("loopback TCP", points[-1]["bytes_per_s"])


def _echo(server: socket.socket, sizes: Sequence[int], scale: float) -> None:
    connection, _ = server.accept()
    with connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for nbytes in sizes:
            buffer = bytearray(nbytes)
            for _ in range(iterations(nbytes, scale) + 1):
                _receive(connection, buffer)
                connection.sendall(buffer)


def _receive(sock: socket.socket, buffer: bytearray) -> None:
    view = memoryview(buffer)
    while view:
        got = sock.recv_into(view)
        if not got:
            raise ConnectionError("the other end closed the socket")
        view = view[got:]
