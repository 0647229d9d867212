"""The worker's wire format: JSON lines, one object per line.

This module is the contract between a rank (``core.worker``) and the
controller (``core.run.job.launcher``, ``core.run.measure.telemetry``). It uses the standard
library only, so it travels with the worker to any node.

Controller -> every rank, the same lines in the same order, on each rank's
stdin (an idle rank waits on a pipe, not inside a spinning MLX collective;
stdin closing tells a rank its controller is gone)::

    {"op": "generate", "id": "r1", "prompt": "...", "max_tokens": 64, "chat": true,
     "temperature": 0.0, "top_p": 1.0, "seed": 7, "stop": ["Q:"]}   (sampling optional)
    {"op": "cancel", "id": "r1"}   (end that answer at its next token: done, "cancelled")
    {"op": "link_test", "id": "t1", "sizes": [4096, 67108864], "pairs": [[0, 1]], "scale": 1}
    {"op": "stop"}
    {"op": "join"}          (once every rank is up: join the group now; see ENV_JOIN)

Every rank -> controller, on stdout (logs go to stderr). Every event carries
``event`` (its kind), ``rank`` and ``t``: ``time.monotonic()`` on the rank's
host, so intervals between events of one rank are exact; never compare ``t``
across hosts.

==========  =====================================================================
event       fields
==========  =====================================================================
hello       size, backend, strategy (``vocab`` values), pid, host
loading     stage (a ``vocab.LoadingStage`` value: "joining", "reading", "weights", ...)
loaded      load_s, memory_bytes, layers ([start, end) or null for tensor), strategy,
            device ("cpu" or "gpu"), blas (on the CPU: {name, path, threads, gflops, fast};
            else null), ring_wait (on the CPU: whether its ring waits sleep, from
            ``core.worker.ringwait``; else null), weights ({precision, dequantized[,
            from][, reason][, layout ({"OUTxIN" or "head OUTxIN": "rows of 512: 150 vs
            404 µs", "transposed: ..." or "as is: ..."})]})[, adapter
            ({name, type, fused, precision}: the adapter fused in, with --adapter)]
ready       (rank 0, once every rank has loaded and synchronised)
token       request, index (0-based), token (id), text (the new piece of text)
done        request, prompt_tokens, prompt_tps, generation_tokens, generation_tps,
            ttft_s, finish_reason ("stop", "length" or "cancelled"), peak_memory_bytes, text
            [, cached_tokens (batching ranks: the prompt's tokens the prompt cache held)]
traffic     interval_s, sent ({peer rank: bytes}), received ({peer rank: bytes})
heartbeat   (every HEARTBEAT_S from the rank's first line, so silence means a hang);
            stage (the ``loading`` stage, until the rank has loaded)
link_test   request, size (ranks), links ([{a, b, points: [{bytes, seconds (one way),
            bytes_per_s}]}]), all_sum ([{bytes, seconds, bytes_per_s (bus bandwidth)}])
train       (fine-tune; every rank, every ``steps_per_report`` iterations) iteration, iters,
            train_loss (the group's mean), learning_rate, tokens_per_s (the group's trained
            tokens/s), trained_tokens (the group's, so far), peak_memory_bytes (this rank's)
validation  (fine-tune; rank 0) iteration, val_loss
checkpoint  (fine-tune; rank 0) iteration, path (the adapter file on rank 0's node)
trained     (fine-tune; rank 0, once training ended or was stopped) adapter (the adapter
            folder on rank 0's node), iterations, train_loss, val_loss (or null),
            stopped (true when a stop command ended it before ``iters``)
error       message (for a person: what happened and what to do), fatal,
            request (when it answers one request: that request failed, the job lives on),
            code (for a refused request, when known: "context_length_exceeded")
stopped     (the rank is exiting cleanly)
==========  =====================================================================
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, TextIO

# Event kinds.
HELLO = "hello"
LOADING = "loading"
LOADED = "loaded"
READY = "ready"
TOKEN = "token"
DONE = "done"
TRAFFIC = "traffic"
HEARTBEAT = "heartbeat"
LINK_TEST = "link_test"
ERROR = "error"
STOPPED = "stopped"
TRAIN = "train"
VALIDATION = "validation"
CHECKPOINT = "checkpoint"
TRAINED = "trained"
EVENTS = frozenset(
    {HELLO, LOADING, LOADED, READY, TOKEN, DONE, TRAFFIC, HEARTBEAT, LINK_TEST, ERROR, STOPPED}
    | {TRAIN, VALIDATION, CHECKPOINT, TRAINED}
)

# Command ops.
OP_GENERATE = "generate"
OP_LINK_TEST = "link_test"
OP_STOP = "stop"
OP_JOIN = "join"
OP_CANCEL = "cancel"
OPS = frozenset({OP_GENERATE, OP_LINK_TEST, OP_STOP, OP_JOIN, OP_CANCEL})

# A done event's finish_reason for an answer ended by a cancel command.
CANCELLED = "cancelled"
# An error event's code for a prompt that does not fit the model's context.
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"

HEARTBEAT_S = 1.0
MAX_LINK_SIZES = 16  # message sizes in one link test
MAX_LINK_BYTES = 1 << 30
DEFAULT_MAX_TOKENS = 128  # a generate command without max_tokens
# Requests a rank generates at once (``--batch``; ``core.worker.batching``): 8 measured
# best on the demo's 2-rank pipeline (README, "Serving many at once").
DEFAULT_BATCH = 8
MAX_BATCH = 256
# The batching ranks' prompt cache (``--prompt-cache-mb``): conversations' KV caches kept
# between requests, at most this many MB a rank (``core.worker.promptcache``).
DEFAULT_PROMPT_CACHE_MB = 256
TRAFFIC_S = 0.5

# Environment the worker reads besides MLX's own (MLX_RANK, MLX_HOSTFILE, ...).
ENV_TELEMETRY = "MACMESH_TELEMETRY"  # "0" turns token events and traffic counting off
# "1": wait for the ``join`` command before joining the group. MLX's init blocks with the
# GIL held (no heartbeat) until every peer is there; joining once all are up keeps that
# silence short, so a rank that hangs before joining is the only one silent.
ENV_JOIN = "MACMESH_JOIN_WHEN_TOLD"
# The pid of the controller that started a local rank: the rank ends with it, whatever
# holds its GIL (``core.worker.lifeline``). Remote ranks end with their SSH session.
ENV_CONTROLLER = "MACMESH_CONTROLLER_PID"


class EventWriter:
    """Writes events as JSON lines; safe to call from several threads."""

    def __init__(self, rank: int, stream: TextIO | None = None) -> None:
        self.rank = rank
        self._stream = stream or sys.stdout
        self._lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        record = {"event": event, "rank": self.rank, "t": time.monotonic(), **fields}
        line = json.dumps(record, separators=(",", ":"), ensure_ascii=False)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()


def parse_event(line: str) -> dict[str, Any] | None:
    """A stdout line -> an event dict, or None when the line is not an event.

    Libraries sometimes print to stdout; such lines are not events and are
    kept as log lines by the caller rather than breaking the stream.
    """
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("event") not in EVENTS:
        return None
    return record


def encode_command(op: str, **fields: Any) -> str:
    if op not in OPS:
        raise ValueError(f"unknown worker command {op!r}")
    return json.dumps({"op": op, **fields}, separators=(",", ":"), ensure_ascii=False) + "\n"


def parse_command(line: str) -> dict[str, Any]:
    """A stdin line -> a command dict. Raises ValueError with a readable reason."""
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(record, dict) or record.get("op") not in OPS:
        raise ValueError(f"not a command (expected 'op' in {sorted(OPS)})")
    if record["op"] == OP_GENERATE:
        _check_generate(record)
    elif record["op"] == OP_CANCEL:
        if not isinstance(record.get("id"), str):
            raise ValueError("'id' must name the request to cancel")
    elif record["op"] == OP_LINK_TEST:
        _check_link_test(record)
    return record


def _check_link_test(record: dict[str, Any]) -> None:
    sizes = record.get("sizes")
    if sizes is not None and (
        not isinstance(sizes, list)
        or not 0 < len(sizes) <= MAX_LINK_SIZES
        or not all(_positive_int(n) and n <= MAX_LINK_BYTES for n in sizes)
    ):
        raise ValueError(
            f"'sizes' must list 1 to {MAX_LINK_SIZES} message sizes of 1 byte to 1 GiB"
        )
    pairs = record.get("pairs")
    if pairs is not None and (
        not isinstance(pairs, list)
        or not all(
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in pair)
            and pair[0] != pair[1]
            for pair in pairs
        )
    ):
        raise ValueError("'pairs' must list pairs of two different ranks, e.g. [[0, 1]]")
    scale = record.get("scale", 1)
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not 0 < scale <= 10:
        raise ValueError("'scale' must be a number above 0, at most 10")


def _check_generate(record: dict[str, Any]) -> None:
    """A request that would fail mid-generation on every rank is refused up front."""
    if "max_tokens" in record and not _positive_int(record["max_tokens"]):
        raise ValueError("'max_tokens' must be a positive whole number")
    messages = record.get("messages")
    if messages is not None:
        if not isinstance(messages, list) or not all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
            for m in messages
        ):
            raise ValueError("'messages' must be a list of {role, content} texts")
    elif not isinstance(record.get("prompt", ""), str):
        raise ValueError("'prompt' must be text")
    for key in ("temperature", "top_p"):
        if key in record and not _number(record[key]):
            raise ValueError(f"{key!r} must be a number")
    if "seed" in record and not (
        isinstance(record["seed"], int) and not isinstance(record["seed"], bool)
    ):
        raise ValueError("'seed' must be a whole number")
    stop = record.get("stop", [])
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise ValueError("'stop' must be a list of non-empty texts")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
