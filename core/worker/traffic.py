"""Bytes moved by MLX collectives, per peer.

RDMA over Thunderbolt bypasses the IP stack, so interface counters see
nothing: the only place every backend's traffic can be counted is the
collective calls themselves. ``TrafficCounter.install()`` wraps the
``mx.distributed`` functions the models and mlx.nn call (they look them up on
the module at call time) and attributes each call's bytes to peers by the
backend's algorithm:

* ``all_sum`` of n bytes: ring reduce-scatter + all-gather sends
  2(N-1)/N * n to the next rank (ring backends) or 2n/N to every peer (mesh).
* ``all_gather`` of n bytes per rank: (N-1) * n to the next rank (ring) or n
  to every peer (mesh).
* ``send``/``recv_like``/``recv``: n bytes to / from that peer.

Bytes are counted when the call is made (graph construction), which for
token-by-token generation is one step ahead of evaluation: fine for rates
over a reporting interval, and free of any synchronisation.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import mlx.core as mx

from core.worker.vocab import Backend

_WRAPPED = ("all_sum", "all_gather", "send", "recv_like", "recv")


class TrafficCounter:
    """Per-peer byte counts of this rank's collectives since the last ``take()``."""

    def __init__(self, rank: int, size: int, backend: Backend | str) -> None:
        self.rank = rank
        self.size = size
        self.ring = Backend(backend).is_ring
        self._lock = threading.Lock()
        self._sent: dict[int, float] = defaultdict(float)
        self._received: dict[int, float] = defaultdict(float)
        self._originals: dict[str, Callable[..., Any]] = {}

    # -- accounting (pure arithmetic, unit-tested without MLX collectives) --

    def all_sum(self, nbytes: int) -> None:
        n = self.size
        if n < 2:
            return
        if self.ring:
            volume = 2 * (n - 1) / n * nbytes
            self._add(self._next, volume, self._prev, volume)
        else:
            for peer in self._peers:
                self._add(peer, 2 * nbytes / n, peer, 2 * nbytes / n)

    def all_gather(self, nbytes: int) -> None:
        n = self.size
        if n < 2:
            return
        if self.ring:
            self._add(self._next, (n - 1) * nbytes, self._prev, (n - 1) * nbytes)
        else:
            for peer in self._peers:
                self._add(peer, nbytes, peer, nbytes)

    def send(self, nbytes: int, dst: int) -> None:
        self._add(dst, nbytes, None, 0)

    def recv(self, nbytes: int, src: int) -> None:
        self._add(None, 0, src, nbytes)

    def take(self) -> tuple[dict[int, int], dict[int, int]]:
        """(sent, received) per peer since the last call, and reset."""
        with self._lock:
            sent = {peer: round(b) for peer, b in self._sent.items() if b}
            received = {peer: round(b) for peer, b in self._received.items() if b}
            self._sent.clear()
            self._received.clear()
        return sent, received

    @property
    def _next(self) -> int:
        return (self.rank + 1) % self.size

    @property
    def _prev(self) -> int:
        return (self.rank - 1) % self.size

    @property
    def _peers(self) -> list[int]:
        return [peer for peer in range(self.size) if peer != self.rank]

    def _add(self, to: int | None, sent: float, frm: int | None, received: float) -> None:
        with self._lock:
            if to is not None:
                self._sent[to] += sent
            if frm is not None:
                self._received[frm] += received

    # -- hooking mx.distributed --

    def install(self) -> None:
        """Wrap the collectives on ``mx.distributed``; ``uninstall()`` undoes it."""
        dist = mx.distributed
        for name in _WRAPPED:
            original = getattr(dist, name)
            self._originals[name] = original
            setattr(dist, name, self._wrap(name, original))

    def uninstall(self) -> None:
        for name, original in self._originals.items():
            setattr(mx.distributed, name, original)
        self._originals.clear()

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        counter = self

        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            # Counting must never break a forward pass.
            with contextlib.suppress(Exception):
                counter._count(name, args, kwargs, out)
            return out

        return counted

    def _count(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        group = kwargs.get("group")
        if group is not None and group.size() != self.size:
            return  # a sub-group: not this job's links
        if name == "all_sum":
            self.all_sum(args[0].nbytes)
        elif name == "all_gather":
            self.all_gather(args[0].nbytes)
        elif name == "send":
            self.send(args[0].nbytes, _peer(args, kwargs, "dst", 1))  # send(x, dst)
        elif name == "recv_like":
            self.recv(args[0].nbytes, _peer(args, kwargs, "src", 1))  # recv_like(x, src)
        elif name == "recv":
            self.recv(out.nbytes, _peer(args, kwargs, "src", 2))  # recv(shape, dtype, src)


def _peer(args: tuple[Any, ...], kwargs: dict[str, Any], key: str, position: int) -> int:
    return int(kwargs[key] if key in kwargs else args[position])
