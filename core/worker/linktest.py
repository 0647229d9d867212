"""The link test, on the ranks: what each link the job uses carries, through MLX itself.

For every pair of ranks the controller names (default: ring neighbours, the only pairs
MLX's ring backend can send between), and every message size, the first rank of the
pair sends the message and the second sends it back (``mx.distributed.send`` /
``recv_like``): half the round trip is the one-way time. Then ``all_sum`` over the whole
group at each size. Every rank times the pairs it starts; an ``all_sum`` of the timings
gives rank 0 the whole table, which it reports as one ``link_test`` event.

Ranks outside a pair go on to the next pair they belong to: every rank walks the same
list in the same order, so each send meets its receive.

A cancel (the controller's Stop) is agreed by every rank at the end of each size, with a
one-number ``all_sum``: a rank seeing it alone and leaving mid-way would leave its peer
waiting. Rank 0 then reports a ``link_test`` event that says ``cancelled`` (no table).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Sequence

import mlx.core as mx

from core.worker import protocol as p
from core.worker import ringwait

# 4 KiB to 64 MiB, by fours: latency at the small end, bandwidth at the large end.
DEFAULT_SIZES = tuple(4096 * 4**k for k in range(8))
# Each size moves at least this much in all (small messages then repeat enough to time).
BYTES_PER_SIZE = 32 << 20
MIN_ITERS, MAX_ITERS = 3, 200

# Told after each step of the test (a pair at a size, then ``all_sum`` at a size): steps
# done, steps in all, the message size, the pair (None for all_sum), seconds so far.
Progress = Callable[[int, int, int, tuple[int, int] | None, float], None]


def ring_pairs(size: int) -> list[tuple[int, int]]:
    """Ring neighbours: (0, 1), (1, 2), ... and (n-1, 0); one pair for two ranks."""
    if size < 2:
        return []
    if size == 2:
        return [(0, 1)]
    return [(rank, (rank + 1) % size) for rank in range(size)]


def iterations(nbytes: int, scale: float = 1.0) -> int:
    """Round trips at one size: enough bytes to time, bounded both ways."""
    wanted = int(BYTES_PER_SIZE * scale) // max(1, nbytes)
    return max(MIN_ITERS, min(MAX_ITERS, wanted))


def _ping_pong(
    group: mx.distributed.Group, pair: tuple[int, int], message: mx.array, iters: int
) -> float:
    """Mean one-way seconds between the pair, on the pair's first rank (0.0 elsewhere)."""
    first, second = pair
    rank = group.rank()
    if rank not in pair:
        return 0.0
    peer = second if rank == first else first

    def trip() -> None:
        if rank == first:
            mx.eval(mx.distributed.send(message, peer, group=group, stream=mx.cpu))
            mx.eval(mx.distributed.recv_like(message, peer, group=group, stream=mx.cpu))
        else:
            back = mx.distributed.recv_like(message, peer, group=group, stream=mx.cpu)
            mx.eval(mx.distributed.send(back, peer, group=group, stream=mx.cpu))

    trip()  # warm up
    start = time.perf_counter()
    for _ in range(iters):
        trip()
    elapsed = time.perf_counter() - start
    return elapsed / iters / 2 if rank == first else 0.0


def _all_sum(group: mx.distributed.Group, message: mx.array, iters: int) -> float:
    mx.eval(mx.distributed.all_sum(message, group=group, stream=mx.cpu))  # warm up
    start = time.perf_counter()
    for _ in range(iters):
        mx.eval(mx.distributed.all_sum(message, group=group, stream=mx.cpu))
    return (time.perf_counter() - start) / iters


def _stop_agreed(group: mx.distributed.Group, stop: Callable[[], bool] | None) -> bool:
    """Whether any rank was told to stop (every rank calls this at the same points)."""
    local = stop is not None and stop()
    if group.size() < 2:
        return local
    flag = mx.distributed.all_sum(
        mx.array([1 if local else 0], dtype=mx.int32), group=group, stream=mx.cpu
    )
    mx.eval(flag)
    return bool((flag > 0).item())


def measure(
    group: mx.distributed.Group,
    sizes: Sequence[int] = DEFAULT_SIZES,
    pairs: Sequence[tuple[int, int]] | None = None,
    scale: float = 1.0,
    progress: Progress | None = None,
    stop: Callable[[], bool] | None = None,
) -> tuple[list[p.LinkResult], list[p.LinkPoint], bool]:
    """The link test's table (the same on every rank): ``links`` per pair and size,
    ``all_sum`` per size; seconds one way, bytes/s of what one link carried.
    ``progress`` is told of each step as this rank finishes it (a rank walks on past the
    pairs it is not in, so its count runs ahead within a size, never across one: the
    next size's first pair waits for the last one's ranks)."""
    n = group.size()
    pairs = list(ring_pairs(n) if pairs is None else pairs)
    seconds = [[0.0] * len(sizes) for _ in pairs]
    total = len(sizes) * (len(pairs) + (1 if n > 1 else 0))
    started = time.perf_counter()
    done = 0

    def step(nbytes: int, pair: tuple[int, int] | None) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, nbytes, pair, time.perf_counter() - started)

    for column, nbytes in enumerate(sizes):
        message = mx.zeros((max(1, nbytes // 4),), dtype=mx.float32)
        mx.eval(message)
        for row, pair in enumerate(pairs):
            seconds[row][column] = _ping_pong(group, pair, message, iterations(nbytes, scale))
            step(nbytes, pair)
        if _stop_agreed(group, stop):
            return [], [], True
    # Every rank timed the pairs it starts; the sum is the whole table, on every rank.
    if pairs and n > 1:
        table = mx.distributed.all_sum(mx.array(seconds, dtype=mx.float32), group=group)
        mx.eval(table)
        seconds = [[float(s) for s in row] for row in table.tolist()]  # type: ignore[union-attr, arg-type]
    links = [
        p.LinkResult(
            a=a,
            b=b,
            points=[
                p.LinkPoint(bytes=nbytes, seconds=s, bytes_per_s=nbytes / s if s > 0 else 0.0)
                for nbytes, s in zip(sizes, row, strict=True)
            ],
        )
        for (a, b), row in zip(pairs, seconds, strict=True)
    ]
    reduced: list[p.LinkPoint] = []
    for nbytes in sizes if n > 1 else ():
        message = mx.zeros((max(1, nbytes // 4),), dtype=mx.float32)
        took = _all_sum(group, message, iterations(nbytes, scale))
        # Bus bandwidth: what each link carried, comparable with one link's rate.
        moved = message.nbytes * 2 * (n - 1) / n
        reduced.append(p.LinkPoint(bytes=message.nbytes, seconds=took, bytes_per_s=moved / took))
        step(nbytes, None)
        if _stop_agreed(group, stop):
            return [], [], True
    return links, reduced, False


def link_test(
    group: mx.distributed.Group,
    command: p.LinkTestCommand,
    events: p.EventWriter,
    cancels: Container[str] = (),
) -> None:
    """Run the ``link_test`` command; rank 0 reports the table (``cancels``: the requests
    the controller cancelled, as the stdin reader sees them)."""
    sizes = command.get("sizes") or DEFAULT_SIZES
    raw_pairs = command.get("pairs")
    pairs = [(int(a), int(b)) for a, b in raw_pairs] if raw_pairs else None
    request = command["id"]

    def told(done: int, total: int, nbytes: int, pair: tuple[int, int] | None, s: float) -> None:
        events.write(
            p.LinkProgress(
                event=p.LINK_PROGRESS,
                rank=events.rank,
                t=time.monotonic(),
                request=request,
                done=done,
                total=total,
                bytes=nbytes,
                pair=list(pair) if pair else None,
                elapsed_s=round(s, 3),
            )
        )

    with ringwait.polling():
        links, reduced, cancelled = measure(
            group,
            sizes,
            pairs,
            float(command.get("scale", 1.0)),
            progress=told if group.rank() == 0 else None,
            stop=lambda: request in cancels,
        )
    if group.rank() == 0:
        table = p.LinkTest(
            event=p.LINK_TEST,
            rank=events.rank,
            t=time.monotonic(),
            request=request,
            size=group.size(),
            links=links,
            all_sum=reduced,
        )
        if cancelled:
            table["cancelled"] = True
        events.write(table)
