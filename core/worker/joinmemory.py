"""Memory for a long prompt's join, made ready while the prompt is still being read.

When a prompt that was read beside other streams joins them, mlx-lm's batched KV cache
pads every row to the longest and concatenates them (``BatchKVCache.extend``): for a
context-sized prompt beside one stream, about three times the new row's cache, allocated
in the first step after the join. MLX's CPU backend takes that memory from malloc, and
memory the process has not touched before is slow to hand out on a VM (each page faulted
in: ``tests.benchmarks.bench_join_cost`` touches 1 GiB in 1.4 s the first time, 0.11 s
again). So every other stream's next token waited for the page faults: on the demo
cluster (pipeline, two ranks) a 7,575-token prompt's join was the one gap over 1 s in the
stream beside it, 1.30 s (``tests.benchmarks.bench_shared_serve ... stall``).

``JoinReserve`` moves that cost into the steps that read the prompt, where the chunk
sizing (``batching.Chunks``) already keeps each step short: a few MiB at a time, it holds
as much touched memory as the join will take, and lets it go just before the join, so
the join reuses it. Two malloc settings make that hold: pieces below the mmap threshold
come from the heap (not from ``mmap``, which gives memory back on free), and a freed
heap is not trimmed back to the system. Only CPU ranks on glibc take this: Metal keeps
its own buffer cache.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import sys

import mlx.core as mx

MIB = 1 << 20
PIECE_BYTES = 8 * MIB  # one buffer: below the mmap threshold, so it comes from the heap
SLICE_BYTES = 32 * MIB  # touched in one step at most
MAX_BYTES = 2 << 30  # never held beyond this, whatever the join would take
MMAP_THRESHOLD = 32 * MIB  # glibc's own ceiling for its dynamic threshold
STEP_TOKENS = 256  # mlx-lm's KV cache grows by this many tokens

# mallopt's parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


def join_bytes(rows: int, longest: int, per_token: int) -> int:
    """Bytes the join allocates on one rank: ``rows`` rows padded to the ``longest`` (in
    KV steps), then ``rows + 1`` concatenated with the newcomer, at ``per_token`` bytes a
    token on this rank; at most ``MAX_BYTES``."""
    if rows < 0 or longest <= 0 or per_token <= 0:
        return 0
    padded = math.ceil(longest / STEP_TOKENS) * STEP_TOKENS
    return min(MAX_BYTES, (2 * rows + 1) * padded * per_token)


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed heap memory and serve pieces up to
    ``MMAP_THRESHOLD`` from the heap. False (and nothing changed) off glibc."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    kept = mallopt(M_TRIM_THRESHOLD, 2**31 - 1) == 1
    return bool(kept and mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1)


class JoinReserve:
    """Touched memory held for the next join, ``SLICE_BYTES`` more a step up to what it
    will take, then given back to malloc for the join to reuse. An allocation that fails
    turns it off: it never ends a request, let alone the job."""

    def __init__(
        self, enabled: bool, stream: mx.Stream | mx.ThreadLocalStream | None = None
    ) -> None:
        self.enabled = enabled
        self.stream = stream  # the stream whose thread allocates the join's arrays
        self._held: list[mx.array] = []

    @classmethod
    def for_this_rank(cls, stream: mx.Stream | mx.ThreadLocalStream | None = None) -> JoinReserve:
        """Enabled on a CPU rank whose malloc keeps what it frees."""
        cpu = not mx.metal.is_available()
        return cls(cpu and keep_freed_memory(), stream)

    @property
    def held(self) -> int:
        return sum(piece.nbytes for piece in self._held)

    def grow(self, wanted: int) -> int:
        """Touch up to ``SLICE_BYTES`` more, towards ``wanted`` bytes held; the bytes
        added."""
        if not self.enabled:
            return 0
        more = min(SLICE_BYTES, wanted - self.held)
        if more <= 0:
            return 0
        try:
            pieces = [
                mx.zeros((min(PIECE_BYTES, more - start) // 4,), mx.float32, stream=self.stream)
                for start in range(0, more, PIECE_BYTES)
            ]
            mx.eval(pieces)
        except (RuntimeError, MemoryError):  # no memory to spare: the join fares as before
            self.release()
            self.enabled = False
            return 0
        self._held.extend(pieces)
        return sum(piece.nbytes for piece in pieces)

    def release(self) -> None:
        """Give the memory back to malloc (kept in the heap for the next allocations)."""
        self._held.clear()
