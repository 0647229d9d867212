"""The worker's wire format: JSON lines, one object per line.

This module is the contract between a rank (``core.worker``) and the
controller (``core.run.job.launcher``, ``core.run.measure.telemetry``). It uses the standard
library only, so it travels with the worker to any node.

Controller -> every rank, the same lines in the same order, on each rank's
stdin (an idle rank waits on a pipe, not inside a spinning MLX collective;
stdin closing tells a rank its controller is gone)::

    {"op": "generate", "id": "r1", "prompt": "...", "max_tokens": 64, "chat": true,
     "temperature": 0.0, "top_p": 1.0, "seed": 7, "stop": ["Q:"]}   (sampling optional)
    (optional: "tokens": [1, 2, ...], the prompt's ids as the controller rendered and
     tokenized it, used instead of prompt/messages; "tenant": "key_ab12cd34", whose prompt
     cache entries the request may reuse and keep, none: the common ones; "grammar": an
     llguidance grammar the answer must follow; "logprobs": 0-20, report each token's
     log-probability and that many alternatives: ``core.worker.constrain``)
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
            ``core.worker.ringwait``; else null), memory_measure ("anonymous resident" on
            Linux, "physical footprint" on a Mac, null when unmeasured), base_bytes (what the
            rank held before reading a weight), peak_load_bytes (the most it held while
            loading; ``core.worker.residency``), weights ({precision, dequantized[,
            from][, reason][, layout ({"OUTxIN" or "head OUTxIN": "rows of 512: 150 vs
            404 µs", "transposed: ..." or "as is: ..."})]})[, adapter
            ({name, type, fused, precision}: the adapter fused in, with --adapter)]
ready       (rank 0, once every rank has loaded and synchronised)
token       request, index (0-based), token (id), text (the new piece of text; empty for
            the end-of-sequence token: one event per generated token)[, logprobs
            (asked for: OpenAI's {token, logprob, bytes, top_logprobs})]
done        request, prompt_tokens, prompt_tps, generation_tokens, generation_tps,
            ttft_s, finish_reason ("stop", "length" or "cancelled"), peak_memory_bytes (MLX's),
            peak_generation_bytes (the process's most since loaded, as peak_load_bytes), text
            [, cached_tokens (batching ranks: the prompt's tokens the prompt cache held)]
            [, logprobs (asked for: the token events' logprobs, in order)]
traffic     interval_s, sent ({peer rank: bytes}), received ({peer rank: bytes})
heartbeat   (every HEARTBEAT_S from the rank's first line, so silence means a hang);
            stage (the ``loading`` stage, until the rank has loaded), peak_bytes (the most
            the rank held while loading, until loaded; since loaded, after; absent where
            unmeasured)
link_test   request, size (ranks), links ([{a, b, points: [{bytes, seconds (one way),
            bytes_per_s}]}]), all_sum ([{bytes, seconds, bytes_per_s (bus bandwidth)}])[,
            cancelled (true: the ranks agreed to stop at a size's end; links empty)]
link_progress (rank 0, during a link test) request, done, total (steps: a pair at a size,
            or the all_sum at a size), bytes, pair ([a, b] or null), elapsed_s
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
stopped     (the rank is exiting cleanly) peak_generation_bytes (once loaded: its most since)
==========  =====================================================================

In code each kind is a ``TypedDict`` below (``Event`` is their union). The worker writes
events through ``EventWriter``'s methods, one per kind, so mypy checks what a rank
sends; ``parse_event`` is the one place a line becomes an ``Event``, and a reader that
narrows on the kind (``if event["event"] == TOKEN:``) reads typed fields.
"""

from __future__ import annotations

import functools
import json
import sys
import threading
import time
import types
from typing import (
    Any,
    Final,
    Literal,
    NotRequired,
    TextIO,
    TypeAlias,
    TypedDict,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

# Event kinds (``Final``: a comparison with one narrows an ``Event`` to that kind).
HELLO: Final = "hello"
LOADING: Final = "loading"
LOADED: Final = "loaded"
READY: Final = "ready"
TOKEN: Final = "token"
DONE: Final = "done"
TRAFFIC: Final = "traffic"
HEARTBEAT: Final = "heartbeat"
LINK_TEST: Final = "link_test"
LINK_PROGRESS: Final = "link_progress"  # a link test's step done: which pair, which size
ERROR: Final = "error"
STOPPED: Final = "stopped"
TRAIN: Final = "train"
VALIDATION: Final = "validation"
CHECKPOINT: Final = "checkpoint"
TRAINED: Final = "trained"
EVENTS = frozenset(
    {HELLO, LOADING, LOADED, READY, TOKEN, DONE, TRAFFIC, HEARTBEAT, LINK_TEST, ERROR, STOPPED}
    | {LINK_PROGRESS}
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
# Requests a rank generates at once (``--batch``; ``core.worker.batching``). Measured on
# the demo's 2-rank pipeline (README, "Measured here"): 8 at once gave 2.4x the tokens/s
# of one, 16 gave 3.4x but twice the KV caches the planner reserves and the time to a
# first token; 8 is the default, 16 where memory has room.
DEFAULT_BATCH = 8
MAX_BATCH = 256
# Tokens of a prompt read in per model call (mlx-lm's prefill step size, 2048 by default),
# on both paths (batching or not: the same chunks give the same greedy answers). A cancel
# (the client left, Stop) takes effect between chunks, and a batch's running streams get a
# token between a newcomer's chunks: smaller chunks end a cancelled prompt and pause the
# others for less. On this CPU path 512 read no slower than 2048 (the demo's 2-rank
# pipeline, a 2,398-token chat: 22 s vs 41 s, at load averages 4.7 and 5.0; a ~5,600-token
# prompt on a wider tiny model: 6.4 s vs 11.2 s): a CPU gains nothing from bigger chunks.
PREFILL_STEP = 512
# The largest chunk while other requests of the batch are generating (rank 0 sizes it
# down to keep a step short on a loaded machine: ``core.worker.batching.Chunks``), so
# their tokens keep coming while a context-sized prompt is read in (issue 33;
# ``make bench``'s ``shared_serve``).
PREFILL_STEP_BESIDE_STREAMS = 128
MAX_PROMPT_IDS = 1 << 21  # a generate command's ``tokens``: more than any model's context
MAX_GRAMMAR_CHARS = 1 << 24  # a generate command's ``grammar`` (the API's body is smaller)
MAX_TOP_LOGPROBS = 20  # a generate command's ``logprobs``: alternatives per token, as OpenAI
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


# -- the events, one TypedDict per kind (the table above) ----------------------------------
#
# These are the schema: ``parse_event`` checks a line against them, so a reader that has
# narrowed an ``Event`` on its kind (``if event["event"] == TOKEN:``) may trust the types
# of the fields below. Nested parts sent as free-form facts (``blas``, ``weights``,
# ``adapter``) are only checked to be objects. Fields a newer worker adds are kept.


class _Stamp(TypedDict):
    """What every event carries besides its kind."""

    rank: int
    t: float  # time.monotonic() on the rank's host


class Hello(_Stamp):
    event: Literal["hello"]
    size: int
    backend: str
    strategy: str
    pid: int
    host: str


class Loading(_Stamp):
    event: Literal["loading"]
    stage: str  # a vocab.LoadingStage value; one this version does not know is kept as is


class Loaded(_Stamp):
    event: Literal["loaded"]
    load_s: float
    memory_bytes: int
    layers: list[int] | None  # [start, end), None for tensor parallelism
    strategy: str
    device: str  # "cpu" or "gpu"
    blas: dict[str, Any] | None  # {name, path, threads, gflops, fast} on the CPU
    ring_wait: NotRequired[bool | None]  # on the CPU (not sent by a fine-tune)
    weights: dict[str, Any]  # {precision, dequantized[, from][, reason][, layout]}
    adapter: NotRequired[dict[str, Any]]  # {name, type, fused, precision}, with --adapter
    # core.worker.residency: how memory is measured here (None: unmeasured), what the rank
    # held before reading a weight, and the most it held while loading (above nothing).
    memory_measure: NotRequired[str | None]
    base_bytes: NotRequired[int | None]
    peak_load_bytes: NotRequired[int | None]


class Ready(_Stamp):
    event: Literal["ready"]


class Token(_Stamp):
    event: Literal["token"]
    request: str
    index: int
    token: int
    text: str
    logprobs: NotRequired[dict[str, Any]]  # asked for: core.worker.constrain


class Done(_Stamp):
    event: Literal["done"]
    request: str
    prompt_tokens: int
    prompt_tps: float
    generation_tokens: int
    generation_tps: float
    ttft_s: float | None
    finish_reason: str | None  # "stop", "length" or CANCELLED (None if mlx-lm gave none)
    peak_memory_bytes: int  # MLX's
    text: str
    peak_generation_bytes: NotRequired[int | None]  # the process's most since loaded
    cached_tokens: NotRequired[int]  # batching ranks: the prompt's tokens the prompt cache held
    logprobs: NotRequired[list[dict[str, Any]]]  # asked for: each token's, in order


class Traffic(_Stamp):
    event: Literal["traffic"]
    interval_s: float
    sent: dict[str, int]  # peer rank (as text) -> bytes
    received: dict[str, int]


class Heartbeat(_Stamp):
    event: Literal["heartbeat"]
    stage: NotRequired[str]  # until the rank has loaded
    peak_bytes: NotRequired[int]  # the most held while loading, then since loaded


class LinkPoint(TypedDict):
    bytes: int
    seconds: float  # one way
    bytes_per_s: float


class LinkResult(TypedDict):
    a: int
    b: int
    points: list[LinkPoint]


class LinkTest(_Stamp):
    event: Literal["link_test"]
    request: str
    size: int  # ranks
    links: list[LinkResult]
    all_sum: list[LinkPoint]  # bytes_per_s: bus bandwidth
    cancelled: NotRequired[bool]  # the ranks agreed to stop at a size's end: nothing kept


class LinkProgress(_Stamp):
    event: Literal["link_progress"]
    request: str
    done: int  # steps done (a pair at a size, or the all_sum at a size)
    total: int
    bytes: int  # the size of that step's messages
    pair: list[int] | None  # [a, b]; None for the all_sum
    elapsed_s: float


class Error(_Stamp):
    event: Literal["error"]
    message: str  # for a person: what happened and what to do
    fatal: bool
    request: NotRequired[str]  # the request it answers: that request failed, the job lives
    code: NotRequired[str]  # for a refused request, when known: CONTEXT_LENGTH_EXCEEDED


class Stopped(_Stamp):
    event: Literal["stopped"]
    peak_generation_bytes: NotRequired[int]  # once loaded: its most since


class Train(_Stamp):
    event: Literal["train"]
    iteration: int
    iters: int
    train_loss: float
    learning_rate: float
    tokens_per_s: float
    trained_tokens: int
    peak_memory_bytes: int


class Validation(_Stamp):
    event: Literal["validation"]
    iteration: int
    val_loss: float


class Checkpoint(_Stamp):
    event: Literal["checkpoint"]
    iteration: int
    path: str


class Trained(_Stamp):
    event: Literal["trained"]
    adapter: str
    iterations: int
    train_loss: float | None
    val_loss: float | None
    stopped: bool


Event: TypeAlias = (
    Hello
    | Loading
    | Loaded
    | Ready
    | Token
    | Done
    | Traffic
    | Heartbeat
    | LinkTest
    | LinkProgress
    | Error
    | Stopped
    | Train
    | Validation
    | Checkpoint
    | Trained
)


class EventWriter:
    """Writes events as JSON lines, one method per kind (so mypy checks what a rank
    sends); safe to call from several threads."""

    def __init__(self, rank: int, stream: TextIO | None = None) -> None:
        self.rank = rank
        self._stream = stream or sys.stdout
        self._lock = threading.Lock()

    def write(self, event: Event) -> None:
        line = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()

    def hello(self, size: int, backend: str, strategy: str, pid: int, host: str) -> None:
        self.write(
            Hello(
                event=HELLO,
                rank=self.rank,
                t=time.monotonic(),
                size=size,
                backend=backend,
                strategy=strategy,
                pid=pid,
                host=host,
            )
        )

    def loading(self, stage: str) -> None:
        self.write(Loading(event=LOADING, rank=self.rank, t=time.monotonic(), stage=stage))

    def loaded(
        self,
        load_s: float,
        memory_bytes: int,
        layers: list[int] | None,
        strategy: str,
        device: str,
        blas: dict[str, Any] | None,
        weights: dict[str, Any],
        ring_wait: bool | None = None,
        adapter: dict[str, Any] | None = None,
        *,
        with_ring_wait: bool = True,
        memory: tuple[str | None, int | None, int | None] | None = None,
    ) -> None:
        """``with_ring_wait=False``: no ``ring_wait`` field (a fine-tune sends none).
        ``memory``: (memory_measure, base_bytes, peak_load_bytes), where measured."""
        event = Loaded(
            event=LOADED,
            rank=self.rank,
            t=time.monotonic(),
            load_s=load_s,
            memory_bytes=memory_bytes,
            layers=layers,
            strategy=strategy,
            device=device,
            blas=blas,
            weights=weights,
        )
        if with_ring_wait:
            event["ring_wait"] = ring_wait
        if adapter:
            event["adapter"] = adapter
        if memory is not None:
            event["memory_measure"], event["base_bytes"], event["peak_load_bytes"] = memory
        self.write(event)

    def ready(self) -> None:
        self.write(Ready(event=READY, rank=self.rank, t=time.monotonic()))

    def token(
        self,
        request: str,
        index: int,
        token: int,
        text: str,
        logprobs: dict[str, Any] | None = None,
    ) -> None:
        event = Token(
            event=TOKEN,
            rank=self.rank,
            t=time.monotonic(),
            request=request,
            index=index,
            token=token,
            text=text,
        )
        if logprobs is not None:
            event["logprobs"] = logprobs
        self.write(event)

    def done(
        self,
        request: str,
        prompt_tokens: int,
        prompt_tps: float,
        generation_tokens: int,
        generation_tps: float,
        ttft_s: float | None,
        finish_reason: str | None,
        peak_memory_bytes: int,
        text: str,
        peak_generation_bytes: int | None = None,
        cached_tokens: int | None = None,
        logprobs: list[dict[str, Any]] | None = None,
    ) -> None:
        event = Done(
            event=DONE,
            rank=self.rank,
            t=time.monotonic(),
            request=request,
            prompt_tokens=prompt_tokens,
            prompt_tps=prompt_tps,
            generation_tokens=generation_tokens,
            generation_tps=generation_tps,
            ttft_s=ttft_s,
            finish_reason=finish_reason,
            peak_memory_bytes=peak_memory_bytes,
            text=text,
        )
        if peak_generation_bytes is not None:
            event["peak_generation_bytes"] = peak_generation_bytes
        if cached_tokens is not None:
            event["cached_tokens"] = cached_tokens
        if logprobs is not None:
            event["logprobs"] = logprobs
        self.write(event)

    def traffic(self, interval_s: float, sent: dict[str, int], received: dict[str, int]) -> None:
        self.write(
            Traffic(
                event=TRAFFIC,
                rank=self.rank,
                t=time.monotonic(),
                interval_s=interval_s,
                sent=sent,
                received=received,
            )
        )

    def heartbeat(self, stage: str | None = None, peak_bytes: int | None = None) -> None:
        event = Heartbeat(event=HEARTBEAT, rank=self.rank, t=time.monotonic())
        if stage is not None:
            event["stage"] = stage
        if peak_bytes is not None:
            event["peak_bytes"] = peak_bytes
        self.write(event)

    def link_test(
        self,
        request: str,
        size: int,
        links: list[LinkResult],
        all_sum: list[LinkPoint],
        cancelled: bool = False,
    ) -> None:
        event = LinkTest(
            event=LINK_TEST,
            rank=self.rank,
            t=time.monotonic(),
            request=request,
            size=size,
            links=links,
            all_sum=all_sum,
        )
        if cancelled:
            event["cancelled"] = True
        self.write(event)

    def link_progress(
        self,
        request: str,
        done: int,
        total: int,
        nbytes: int,
        pair: tuple[int, int] | None,
        elapsed_s: float,
    ) -> None:
        self.write(
            LinkProgress(
                event=LINK_PROGRESS,
                rank=self.rank,
                t=time.monotonic(),
                request=request,
                done=done,
                total=total,
                bytes=nbytes,
                pair=list(pair) if pair else None,
                elapsed_s=round(elapsed_s, 3),
            )
        )

    def error(
        self, message: str, fatal: bool, request: str | None = None, code: str | None = None
    ) -> None:
        event = Error(event=ERROR, rank=self.rank, t=time.monotonic(), message=message, fatal=fatal)
        if request is not None:
            event["request"] = request
        if code is not None:
            event["code"] = code
        self.write(event)

    def stopped(self, peak_generation_bytes: int | None = None) -> None:
        event = Stopped(event=STOPPED, rank=self.rank, t=time.monotonic())
        if peak_generation_bytes is not None:
            event["peak_generation_bytes"] = peak_generation_bytes
        self.write(event)

    def train(
        self,
        iteration: int,
        iters: int,
        train_loss: float,
        learning_rate: float,
        tokens_per_s: float,
        trained_tokens: int,
        peak_memory_bytes: int,
    ) -> None:
        self.write(
            Train(
                event=TRAIN,
                rank=self.rank,
                t=time.monotonic(),
                iteration=iteration,
                iters=iters,
                train_loss=train_loss,
                learning_rate=learning_rate,
                tokens_per_s=tokens_per_s,
                trained_tokens=trained_tokens,
                peak_memory_bytes=peak_memory_bytes,
            )
        )

    def validation(self, iteration: int, val_loss: float) -> None:
        self.write(
            Validation(
                event=VALIDATION,
                rank=self.rank,
                t=time.monotonic(),
                iteration=iteration,
                val_loss=val_loss,
            )
        )

    def checkpoint(self, iteration: int, path: str) -> None:
        self.write(
            Checkpoint(
                event=CHECKPOINT, rank=self.rank, t=time.monotonic(), iteration=iteration, path=path
            )
        )

    def trained(
        self,
        adapter: str,
        iterations: int,
        train_loss: float | None,
        val_loss: float | None,
        stopped: bool,
    ) -> None:
        self.write(
            Trained(
                event=TRAINED,
                rank=self.rank,
                t=time.monotonic(),
                adapter=adapter,
                iterations=iterations,
                train_loss=train_loss,
                val_loss=val_loss,
                stopped=stopped,
            )
        )


def parse_event(line: str) -> Event | None:
    """A stdout line -> its event, or None when the line is not one.

    The one place a line becomes an ``Event``: a JSON object whose ``event`` is a known
    kind and whose fields have the types of that kind's TypedDict (extra fields are kept:
    a newer worker may send more). Anything else is not an event: libraries sometimes
    print to stdout, and a malformed or unknown event is no more use to a reader; the
    launcher keeps such lines in the rank's log rather than breaking the stream.
    """
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("event"), str):
        return None
    kind = _kinds().get(record["event"])
    if kind is None or not _matches(record, kind):
        return None
    return record  # type: ignore[return-value]  # checked against its kind just above


@functools.cache
def _kinds() -> dict[str, type]:
    """Each kind's TypedDict, by its ``event`` value (read from ``Event``, once)."""
    kinds: dict[str, type] = {}
    for each in get_args(Event):
        (kind,) = get_args(get_type_hints(each)["event"])
        kinds[kind] = each
    assert kinds.keys() == EVENTS, "an event kind without its TypedDict (or the reverse)"
    return kinds


@functools.cache
def _fields(typed: type) -> tuple[tuple[str, Any, bool], ...]:
    """A TypedDict's (name, type, required) fields. ``NotRequired`` is read from the
    annotations: ``__required_keys__`` is wrong on Python 3.11 under postponed
    annotations."""
    fields = []
    for name, hint in get_type_hints(typed, include_extras=True).items():
        optional = get_origin(hint) is NotRequired
        fields.append((name, get_args(hint)[0] if optional else hint, not optional))
    return tuple(fields)


def _matches(record: dict[str, Any], typed: type) -> bool:
    return all(
        _is(record[name], hint) if name in record else not required
        for name, hint, required in _fields(typed)
    )


def _is(value: object, hint: Any) -> bool:
    """Whether a JSON value has the type ``hint`` (the types the events use)."""
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint is float:  # JSON writes 2.0 as 2.0, but a number is a number
        return _number(value)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (str, bool):
        return isinstance(value, hint)
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        return any(type(value) is type(a) and value == a for a in args)
    if origin in (Union, types.UnionType):
        return any(_is(value, a) for a in args)
    if origin is list:
        return isinstance(value, list) and all(_is(item, args[0]) for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            _is(k, args[0]) and _is(v, args[1]) for k, v in value.items()
        )
    if is_typeddict(hint):
        return isinstance(value, dict) and _matches(value, hint)
    raise TypeError(f"parse_event cannot check {hint!r}")  # a new field type: teach _is


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
    tokens = record.get("tokens")
    if tokens is not None and (
        not isinstance(tokens, list)
        or len(tokens) > MAX_PROMPT_IDS
        or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens)
    ):
        raise ValueError(f"'tokens' must be a list of up to {MAX_PROMPT_IDS} token ids")
    tenant = record.get("tenant")
    if tenant is not None and (not isinstance(tenant, str) or not 0 < len(tenant) <= 64):
        raise ValueError("'tenant' must be a text of 1 to 64 characters")
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
    if "grammar" in record and not (
        isinstance(record["grammar"], str) and 0 < len(record["grammar"]) <= MAX_GRAMMAR_CHARS
    ):
        raise ValueError(f"'grammar' must be a text of 1 to {MAX_GRAMMAR_CHARS} characters")
    if "logprobs" in record and not (
        isinstance(record["logprobs"], int)
        and not isinstance(record["logprobs"], bool)
        and 0 <= record["logprobs"] <= MAX_TOP_LOGPROBS
    ):
        raise ValueError(f"'logprobs' must be a whole number from 0 to {MAX_TOP_LOGPROBS}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
