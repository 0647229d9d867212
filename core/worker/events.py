"""The worker's events (``core.worker.protocol`` describes the wire; its table of events
is there): each kind a ``TypedDict`` (``Event`` is their union), written by a rank through
``EventWriter`` and read by the controller through ``parse_event``, the one place a line
becomes an event (a known kind whose fields have their declared types)."""

from __future__ import annotations

import functools
import json
import sys
import threading
from typing import (
    Any,
    Final,
    Literal,
    NotRequired,
    TextIO,
    TypeAlias,
    TypedDict,
    get_args,
    get_type_hints,
)

from core.worker.typedjson import matches

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

# A done event's finish_reason for an answer ended by a cancel command.
CANCELLED = "cancelled"
# An error event's code for a prompt that does not fit the model's context.
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"


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
    """Writes typed events as JSON lines: ``write(Token(...))``, mypy checking each kind's
    fields where the event is made (``stamp`` gives its rank and time); safe to call from
    several threads."""

    def __init__(self, rank: int, stream: TextIO | None = None) -> None:
        self.rank = rank
        self._stream = stream or sys.stdout
        self._lock = threading.Lock()

    def write(self, event: Event) -> None:
        line = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()


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
    except (ValueError, RecursionError):  # RecursionError: nested deeper than json goes
        return None
    if not isinstance(record, dict) or not isinstance(record.get("event"), str):
        return None
    kind = _kinds().get(record["event"])
    if kind is None or not matches(record, kind):
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
