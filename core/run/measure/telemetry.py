"""Live numbers from worker events: tokens/s, link bytes/s, memory per rank.

``Telemetry`` turns the events of ``core.worker.protocol`` into fixed-size
numpy series for the plots and a few headline numbers. Memory stays bounded
however long a job runs: every series is a ``RingBuffer``, a request's text is
a bounded tail, finished requests sit in a bounded deque.

Threads: nothing here starts a thread and ``RingBuffer`` is not thread-safe.
``Telemetry`` guards its state with one lock: the launcher's reader thread
calls ``feed`` (and the controller ``request_started``), the GUI thread reads
copies through the accessors, typically from a redraw timer. Every call holds
the lock briefly: no I/O and no callbacks under it.

Figures: this module is the one definition of an answer's figures; the big numbers, the
chat line under an answer, the history, the CLI's summary and the API's ``usage`` all read
them (``answer_figures``), never the worker's raw fields:

- tokens generated: the worker's count (every token the model generated, the
  end-of-sequence one included; the worker sends one token event per token, so the count
  of token events is the same number while an answer streams);
- tokens/s: (n - 1) tokens over the time from the first token to the last, from the token
  events' timestamps (``RateEstimator.average``); mlx-lm's own ``generation_tps`` counts n
  tokens over those n - 1 gaps and reads higher by n / (n - 1), so it is only a fallback
  (converted) when token events are off;
- cached tokens: the worker's count of the prompt's tokens its prompt cache held (0 when
  it keeps none), so not prefilled again;
- time to first token: from the moment the request was sent (``request_started``) to the
  first token's arrival here, the worker's own figure when the send time is unknown;
- the cluster's aggregate tokens/s (issue 35): the sum of the smoothed rates of every
  request generating now (each as the card shows the current one; a request whose last
  token is older than ``GENERATING_S`` no longer counts), with how many are generating;
  and a batch's own figure, its tokens over its span (from the first token while none was
  generating to the last before none is again): what History keeps for a batch.

Clocks: an event's ``t`` is ``time.monotonic()`` on the rank's own host. Rates
use differences of one rank's ``t`` only (exact on any host). The times of the
series are moved onto this process's clock: per rank, the offset is the
smallest ``received_at - t`` seen so far (the fastest delivery), so series from
several hosts, ``request_started`` times and the GUI's ``time.monotonic()``
share one timeline. ``clock=None`` takes ``t`` as it is (every rank on this
host, or tests).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from core.run.measure.series import (
    DEFAULT_TAU_S,
    RateEstimator,
    RingBuffer,
    Series,
)
from core.worker import protocol

log = logging.getLogger(__name__)

DEFAULT_CAPACITY = 36_000  # one hour at 10 samples/s
TEXT_LIMIT = 64 * 1024  # characters of a request's text kept (its tail)
MAX_FINISHED = 256  # finished request summaries kept
MAX_ACTIVE = 32  # unfinished requests tracked; a lost "done" must not leak
STALE_INTERVALS = 3.0  # a sender's rate counts until this many of its intervals pass
GENERATING_S = 2.0  # a request with no token for this long is not generating any more
MAX_POINTS = 2048  # a request's own tokens/s points kept (halved, every other, beyond)


class _TextTail:
    """The last ``limit`` characters of a growing text, in bounded memory."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._pieces: list[str] = []
        self._size = 0

    def add(self, piece: str) -> None:
        if not piece:
            return
        self._pieces.append(piece)
        self._size += len(piece)
        if self._size > 2 * self._limit:
            self._pieces = [self.value()]
            self._size = len(self._pieces[0])

    def value(self) -> str:
        return "".join(self._pieces)[-self._limit :]


@dataclass(frozen=True)
class RequestSummary:
    """One request as the chat and history panes show it."""

    id: str
    prompt_tokens: int | None
    prompt_tps: float | None  # from the worker's done event
    generation_tokens: int  # the worker's count when done, else tokens seen so far
    generation_tps: float | None  # mlx-lm's, from the worker's done event, as given
    avg_tps: float | None  # ours, from token timestamps
    ttft_s: float | None
    text: str  # the tail, at most the text limit
    finish_reason: str | None
    finished: bool
    # Its own span and series (this process's clock): sent (None: unknown), first and
    # newest token, and its smoothed tokens/s at each token (bounded: ``MAX_POINTS``).
    started_at: float | None = None
    first_at: float | None = None
    last_at: float | None = None
    rates: tuple[tuple[float, float], ...] = ()

    @property
    def tokens_per_s(self) -> float | None:
        """The answer's tokens/s as every surface shows it (see the module docstring):
        from the token timestamps, else mlx-lm's figure converted to the same definition
        (token events off), else None (fewer than two tokens)."""
        if self.avg_tps is not None:
            return self.avg_tps
        n = self.generation_tokens
        if self.generation_tps and n >= 2:
            return self.generation_tps * (n - 1) / n
        return None


@dataclass(frozen=True)
class Headline:
    """The few numbers shown big; a snapshot, safe to keep on any thread."""

    tokens_per_s: float  # smoothed, of the request generating now; 0 when idle
    last_avg_tps: float | None  # the last finished request's ``tokens_per_s``
    ttft_s: float | None  # the current request's, else the last finished one's
    prompt_tps: float | None  # the last finished request's
    total_tokens: int
    link_bytes_per_s: Mapping[str, float] = field(default_factory=dict)
    total_bytes_per_s: float = 0.0
    aggregate_tps: float = 0.0  # the cluster's: every request generating now, together
    generating: int = 0  # how many requests are generating now
    last_batch: Batch | None = None  # the last batch (or answer alone), once it ended


@dataclass(frozen=True)
class Batch:
    """Requests generating together, from the first token while none was generating to
    the last before none was: its tokens over its span are the cluster's throughput."""

    first_at: float  # this process's clock
    last_at: float
    tokens: int
    most: int  # the most requests generating at once in it

    @property
    def tokens_per_s(self) -> float | None:
        """Tokens after the first over the span (as one answer's tokens/s is)."""
        span = self.last_at - self.first_at
        return (self.tokens - 1) / span if self.tokens > 1 and span > 0 else None


@dataclass(frozen=True)
class RankPeak:
    """One rank's own measure of its memory (``core.worker.residency``: anonymous
    resident on Linux, the footprint on a Mac), in bytes: what it held before reading any
    weight (``base``), its peak while loading and its peak since (None: not reported)."""

    base: int | None
    load: int | None
    generation: int | None

    @property
    def model_peak(self) -> int | None:
        """The most the rank held for the model (above its base): what its plan promised."""
        peaks = [p for p in (self.load, self.generation) if p is not None]
        if not peaks:
            return None
        return max(0, max(peaks) - (self.base or 0))


class TokenRates(NamedTuple):
    """Both token-rate series; the smoothed one drops to 0 when a request ends."""

    instant: Series
    smoothed: Series


def link_id(a: int, b: int) -> str:
    """A stable, undirected label: the lower rank first."""
    low, high = sorted((a, b))
    return f"{low}↔{high}"


@dataclass
class _Request:
    id: str
    rates: RateEstimator
    text: _TextTail
    started_at: float | None = None  # this process's clock
    first_at: float | None = None  # when its first token arrived, this process's clock
    last_at: float | None = None  # when its newest token arrived, this process's clock
    ttft_s: float | None = None
    points: list[tuple[float, float]] = field(default_factory=list)  # its own tokens/s


@dataclass
class _Direction:
    """What one rank last reported sending to one peer."""

    bytes_per_s: float
    at: float  # this process's clock
    interval_s: float

    def fresh_at(self, now: float) -> bool:
        return now - self.at <= STALE_INTERVALS * self.interval_s


class Telemetry:
    """Rates, series and headline numbers of one job, fed event by event.

    Thread-safe through its own lock (see the module docstring): ``feed`` on
    the launcher's reader thread, the accessors on any thread, all returning
    copies. Tokens and requests count from ``token_rank`` alone (other ranks
    would repeat them); memory and traffic count from every rank.
    """

    def __init__(
        self,
        *,
        capacity: int = DEFAULT_CAPACITY,
        tau_s: float = DEFAULT_TAU_S,
        clock: Callable[[], float] | None = time.monotonic,
        token_rank: int = 0,
        text_limit: int = TEXT_LIMIT,
        max_requests: int = MAX_FINISHED,
    ) -> None:
        self._lock = threading.Lock()
        self._capacity = capacity
        self._tau_s = tau_s
        self._clock = clock
        self._token_rank = token_rank
        self._text_limit = text_limit
        self._offsets: dict[int, float] = {}
        self._instant = RingBuffer(capacity)
        self._smoothed = RingBuffer(capacity)
        self._aggregate = RingBuffer(capacity)  # the cluster's tokens/s, all requests
        self._token_log = RingBuffer(capacity)  # each token's arrival, how many generated
        self._batch: list[float | int] | None = None  # first_at, last_at, tokens, most
        self._last_batch: Batch | None = None
        self._active: OrderedDict[str, _Request] = OrderedDict()
        self._current: str | None = None
        self._finished: deque[RequestSummary] = deque(maxlen=max_requests)
        self._total_tokens = 0
        self._directions: dict[tuple[int, int], _Direction] = {}
        self._links: dict[tuple[int, int], RingBuffer] = {}
        self._link_totals: dict[tuple[int, int], int] = {}
        self._link_total_series = RingBuffer(capacity)
        self._loaded_memory: dict[int, int] = {}
        self._peak_memory: dict[int, int] = {}
        self._base: dict[int, int] = {}
        self._load_peak: dict[int, int] = {}
        self._generation_peak: dict[int, int] = {}
        self._rank_facts: dict[int, dict[str, Any]] = {}
        self._malformed = 0

    # -- input (the launcher's reader thread) --------------------------------

    def feed(self, event: protocol.Event, received_at: float | None = None) -> None:
        """Takes one event of any rank. Malformed events are logged and dropped.

        ``protocol.parse_event`` checked the fields' types; their values are checked
        here (a finite ``t``, counts not negative, real peers). Never raises on bad
        input: the reader thread calling it must keep reading. ``received_at`` (this
        process's clock) defaults to now.
        """
        if received_at is None and self._clock is not None:
            received_at = self._clock()
        with self._lock:
            try:
                self._feed(event, received_at)
                return
            except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
                self._malformed += 1
                count, problem = self._malformed, exc
        # Logged outside the lock; the first few in full, then only counted.
        level = logging.WARNING if count <= 10 else logging.DEBUG
        log.log(level, "ignoring malformed worker event (%s): %.200r", problem, event)

    def request_started(self, request_id: str, t: float) -> None:
        """Records when the controller sent a request (``clock``'s time), for TTFT.

        Its id is known only once it is sent, so its first token may be in already (a
        fast answer, a busy thread): the TTFT is then taken from that token's arrival. A
        request already finished keeps its figures (and is not tracked anew)."""
        with self._lock:
            request = self._active.get(request_id)
            if request is None and any(done.id == request_id for done in self._finished):
                return
            request = request or self._request(request_id)
            request.started_at = float(t)
            if request.first_at is not None:
                ttft = request.first_at - request.started_at
                request.ttft_s = ttft if ttft >= 0 else None

    # -- snapshots (any thread) ------------------------------------------------

    def tokens_per_s(self) -> TokenRates:
        with self._lock:
            return TokenRates(self._instant.arrays(), self._smoothed.arrays())

    def batch(self) -> Batch | None:
        """The batch generating now (so far), else the last one."""
        with self._lock:
            if self._batch is not None:
                first, last, tokens, most = self._batch
                return Batch(float(first), float(last), int(tokens), int(most))
            return self._last_batch

    def cluster_between(self, first_at: float, last_at: float) -> Batch | None:
        """The cluster's tokens over ``first_at``…``last_at`` (an answer's first to last
        token, this process's clock): every request's tokens that arrived then, and the
        most generating at once. Final once ``last_at`` has passed, unlike ``batch()`` while
        others still stream. None when the window is empty or older than the log holds."""
        with self._lock:
            times, counts = self._token_log.arrays()
        if not len(times) or (len(times) == self._token_log.capacity and times[0] > first_at):
            return None
        inside = (times >= first_at) & (times <= last_at)
        if not inside.any():
            return None
        chosen = times[inside]
        return Batch(
            float(chosen[0]), float(chosen[-1]), int(inside.sum()), int(counts[inside].max())
        )

    def aggregate_series(self) -> Series:
        """The cluster's tokens/s over time (every request generating, together); it
        falls to 0 when the last one ends."""
        with self._lock:
            return self._aggregate.arrays()

    def current(self) -> Headline:
        with self._lock:
            last = self._finished[-1] if self._finished else None
            active = self._active.get(self._current) if self._current else None
            links = {link_id(*key): buf.last() for key, buf in sorted(self._links.items())}
            total = self._link_total_series.last()
            now = self._clock() if self._clock is not None else None
            aggregate, generating = self._generating(now)
            return Headline(
                tokens_per_s=(active.rates.smoothed or 0.0) if active else 0.0,
                last_avg_tps=last.tokens_per_s if last else None,
                ttft_s=active.ttft_s if active else (last.ttft_s if last else None),
                prompt_tps=last.prompt_tps if last else None,
                total_tokens=self._total_tokens,
                link_bytes_per_s=MappingProxyType(
                    {name: sample[1] for name, sample in links.items() if sample}
                ),
                total_bytes_per_s=total[1] if total else 0.0,
                aggregate_tps=aggregate,
                generating=generating,
                last_batch=self._last_batch,
            )

    def link_series(self) -> dict[str, Series]:
        """Bytes/s per link, both directions together, ordered by ranks."""
        with self._lock:
            return {link_id(*key): buf.arrays() for key, buf in sorted(self._links.items())}

    def total_link_series(self) -> Series:
        """Bytes/s over all links together."""
        with self._lock:
            return self._link_total_series.arrays()

    def link_totals(self) -> dict[str, int]:
        """Bytes moved per link since the job began, as the senders counted them."""
        with self._lock:
            return {link_id(*key): n for key, n in sorted(self._link_totals.items())}

    def memory(self) -> dict[int, int]:
        """Per rank, the most memory it reported: after loading, or its peak."""
        with self._lock:
            ranks = sorted(self._loaded_memory.keys() | self._peak_memory.keys())
            return {
                r: max(self._loaded_memory.get(r, 0), self._peak_memory.get(r, 0)) for r in ranks
            }

    def peaks(self) -> dict[int, RankPeak]:
        """Per rank, its own measure of the memory it held: base, load and generation
        peaks (``RankPeak``), for the ranks that reported any."""
        with self._lock:
            ranks = self._base.keys() | self._load_peak.keys() | self._generation_peak.keys()
            return {
                r: RankPeak(self._base.get(r), self._load_peak.get(r), self._generation_peak.get(r))
                for r in sorted(ranks)
            }

    def peak_memory(self) -> dict[int, int]:
        """Per rank, the most it held for the model (``RankPeak.model_peak``) where it
        measured that, else the most MLX reported (``memory``): what its plan compares to."""
        measured = {r: p.model_peak for r, p in self.peaks().items()}
        shown = self.memory()
        shown.update({r: peak for r, peak in measured.items() if peak is not None})
        return dict(sorted(shown.items()))

    def rank_facts(self) -> list[dict[str, Any]]:
        """What each loaded rank runs on (``rank_facts``), in rank order."""
        with self._lock:
            return [self._rank_facts[r] for r in sorted(self._rank_facts)]

    def requests(self) -> list[RequestSummary]:
        """Finished requests (oldest first, bounded), then the unfinished ones."""
        with self._lock:
            return [*self._finished, *(self._summary(r) for r in self._active.values())]

    def now(self) -> float | None:
        """This process's time on the series' timeline; None without a clock (tests feed
        times of their own)."""
        return self._clock() if self._clock is not None else None

    @property
    def malformed_events(self) -> int:
        with self._lock:
            return self._malformed

    # -- event handling (under the lock) ----------------------------------------

    def _feed(self, event: protocol.Event, received_at: float | None) -> None:
        rank = _count(event["rank"], "rank")
        t = _finite(event["t"], "t")
        at = self._to_local(rank, t, received_at)
        if event["event"] != protocol.TOKEN:  # tokens are frequent; the rest often enough
            self._expire_directions(at)
        if event["event"] == protocol.LOADED:
            self._on_loaded(event, rank)
        elif event["event"] == protocol.TOKEN:
            self._on_token(event, rank, t, at)
        elif event["event"] == protocol.DONE:
            self._on_done(event, rank, at)
        elif event["event"] == protocol.TRAFFIC:
            self._on_traffic(event, rank, at)
        elif event["event"] == protocol.HEARTBEAT:
            self._on_heartbeat(event, rank)
        elif event["event"] == protocol.STOPPED:
            self._raise(self._generation_peak, rank, event.get("peak_generation_bytes"))

    def _to_local(self, rank: int, t: float, received_at: float | None) -> float:
        """A rank's ``t`` on this process's clock (see the module docstring)."""
        if received_at is None:
            return t
        offset = received_at - t
        best = self._offsets.get(rank)
        if best is None or offset < best:
            self._offsets[rank] = best = offset
        return t + best

    def _on_loaded(self, event: protocol.Loaded, rank: int) -> None:
        self._loaded_memory[rank] = _count(event["memory_bytes"], "memory_bytes")
        self._rank_facts[rank] = rank_facts(event)
        base = event.get("base_bytes")
        if base is not None and base >= 0:
            self._base[rank] = base
        self._raise(self._load_peak, rank, event.get("peak_load_bytes"))

    def _on_heartbeat(self, event: protocol.Heartbeat, rank: int) -> None:
        """A loading rank's heartbeat (it names its stage) carries the load's peak so
        far; a loaded rank's, the generation's."""
        loading = event.get("stage") is not None
        self._raise(
            self._load_peak if loading else self._generation_peak, rank, event.get("peak_bytes")
        )

    @staticmethod
    def _raise(peaks: dict[int, int], rank: int, peak: int | None) -> None:
        if peak is not None and peak >= 0:
            peaks[rank] = max(peak, peaks.get(rank, 0))

    def _on_token(self, event: protocol.Token, rank: int, t: float, at: float) -> None:
        if rank != self._token_rank:
            return
        request_id, piece = event["request"], event["text"]
        request = self._request(request_id)
        if request.rates.count == 0:
            request.first_at = at
            if request.started_at is not None:
                ttft = at - request.started_at
                request.ttft_s = ttft if ttft >= 0 else None
        _, before = self._generating(at, leaving=request_id)
        instant = request.rates.add(t)
        request.last_at = at
        request.text.add(piece)
        self._total_tokens += 1
        self._current = request_id
        if instant is not None:
            _append_in_order(self._instant, at, instant)
        if request.rates.smoothed is not None:
            _append_in_order(self._smoothed, at, request.rates.smoothed)
            request.points.append((at, request.rates.smoothed))
            if len(request.points) > MAX_POINTS:
                request.points = request.points[::2]
        aggregate, generating = self._generating(at)
        _append_in_order(self._aggregate, at, aggregate)
        _append_in_order(self._token_log, at, generating)
        if before == 0 and (self._batch is None or at - float(self._batch[1]) > GENERATING_S):
            self._end_batch()
            self._batch = [at, at, 0, 0]
        if self._batch is not None:
            self._batch[1] = max(float(self._batch[1]), at)
            self._batch[2] = int(self._batch[2]) + 1
            self._batch[3] = max(int(self._batch[3]), generating)

    def _on_done(self, event: protocol.Done, rank: int, at: float) -> None:
        peak = event["peak_memory_bytes"]
        if peak >= 0:
            self._peak_memory[rank] = max(peak, self._peak_memory.get(rank, 0))
        self._raise(self._generation_peak, rank, event.get("peak_generation_bytes"))
        if rank != self._token_rank:
            return
        request_id = event["request"]
        request = self._active.pop(request_id, None) or self._new_request(request_id)
        if self._current == request_id:
            self._current = None
        reported = event["generation_tokens"]
        if reported > request.rates.count:
            # Token events were off (MACMESH_TELEMETRY=0), or some went unsent (a worker
            # before one event per token): the worker's count is the answer's.
            self._total_tokens += reported - request.rates.count
        if request.ttft_s is None:
            request.ttft_s = _finite_or_none(event["ttft_s"])
        request.text = _TextTail(self._text_limit)
        request.text.add(event["text"])
        if request.rates.smoothed is not None:
            _append_in_order(self._smoothed, at, 0.0)
        self._finished.append(self._summary(request, done=event, reported_tokens=reported))
        aggregate, generating = self._generating(at)
        _append_in_order(self._aggregate, at, aggregate)
        if generating == 0:
            self._end_batch()

    def _generating(self, now: float | None, leaving: str | None = None) -> tuple[float, int]:
        """The cluster's tokens/s now (the smoothed rates of every request generating
        together) and how many generate: those whose newest token is within
        ``GENERATING_S`` of ``now`` (``leaving`` aside). The caller holds the lock."""
        total, count = 0.0, 0
        for request in self._active.values():
            if request.id == leaving or request.last_at is None:
                continue
            if now is not None and now - request.last_at > GENERATING_S:
                continue
            count += 1
            total += request.rates.smoothed or 0.0
        return total, count

    def _end_batch(self) -> None:
        if self._batch is not None:
            first, last, tokens, most = self._batch
            self._last_batch = Batch(float(first), float(last), int(tokens), int(most))
            self._batch = None

    def _on_traffic(self, event: protocol.Traffic, rank: int, at: float) -> None:
        """Updates what ``rank`` sends; its links become the sum of both senders' rates.

        Only ``sent`` is used: each byte is counted once, by its sender. A peer
        missing from ``sent`` got nothing this interval.
        """
        interval = _finite(event["interval_s"], "interval_s")
        if interval <= 0:
            raise ValueError(f"interval_s must be positive, not {interval}")
        sent = _peer_bytes(event["sent"], rank)
        peers = sent.keys() | {b for a, b in self._directions if a == rank}
        began = at - interval  # this report's bytes moved after this moment, not before
        for peer in sorted(peers):
            n = sent.get(peer, 0)
            key = (min(rank, peer), max(rank, peer))
            if n:
                self._rise_from_quiet(key, rank, peer, began)
            self._directions[(rank, peer)] = _Direction(n / interval, at, interval)
            self._link_totals[key] = self._link_totals.get(key, 0) + n
            rate = self._fresh_rate(rank, peer, at) + self._fresh_rate(peer, rank, at)
            if key not in self._links:
                self._links[key] = RingBuffer(self._capacity)
            _append_in_order(self._links[key], at, rate)
        total = sum(d.bytes_per_s for d in self._directions.values() if d.fresh_at(at))
        _append_in_order(self._link_total_series, at, total)

    def _rise_from_quiet(
        self, key: tuple[int, int], sender: int, receiver: int, began: float
    ) -> None:
        """A sender quiet until now (no report since one at zero, or none since it went
        stale) reports bytes: they moved within this report's interval, from ``began``,
        and not before. The link's rate at ``began`` (without this sender) goes in first,
        so the line rises there instead of ramping from the link's last sample, which may
        be seconds older (a heartbeat's expiry, a zero report): a ramp across idle time
        in the live plots, the History and the kept series alike."""
        previous = self._directions.get((sender, receiver))
        if previous is not None and previous.bytes_per_s > 0:
            return  # it was moving bytes: its reports follow one another
        buffer = self._links.get(key)
        last = buffer.last() if buffer is not None else None
        if buffer is None or last is None or began <= last[0]:
            return  # nothing drawn before (no line to ramp from), or no quiet gap
        buffer.append(began, self._fresh_rate(receiver, sender, began))
        total = self._link_total_series.last()
        if total is not None and began > total[0]:
            others = (d for pair, d in self._directions.items() if pair != (sender, receiver))
            self._link_total_series.append(
                began, sum(d.bytes_per_s for d in others if d.fresh_at(began))
            )

    def _expire_directions(self, now: float) -> None:
        """Forgets senders gone quiet, so their links fall to 0 on the plots.

        Workers report traffic only while bytes move: without this, the last
        rate of a generation would stay on screen while the job idles.
        """
        stale = [key for key, direction in self._directions.items() if not direction.fresh_at(now)]
        for key in stale:
            del self._directions[key]
        for low, high in sorted({(min(key), max(key)) for key in stale}):
            rate = self._fresh_rate(low, high, now) + self._fresh_rate(high, low, now)
            _append_in_order(self._links[(low, high)], now, rate)
        if stale:
            total = sum(d.bytes_per_s for d in self._directions.values())
            _append_in_order(self._link_total_series, now, total)

    def _fresh_rate(self, sender: int, receiver: int, now: float) -> float:
        direction = self._directions.get((sender, receiver))
        return direction.bytes_per_s if direction and direction.fresh_at(now) else 0.0

    # -- requests -----------------------------------------------------------------

    def _request(self, request_id: str) -> _Request:
        """The unfinished request with this id, tracked from now if new."""
        request = self._active.get(request_id)
        if request is None:
            request = self._active[request_id] = self._new_request(request_id)
            while len(self._active) > MAX_ACTIVE:
                self._active.popitem(last=False)
        return request

    def _new_request(self, request_id: str) -> _Request:
        return _Request(request_id, RateEstimator(self._tau_s), _TextTail(self._text_limit))

    def _summary(
        self,
        request: _Request,
        done: protocol.Done | None = None,
        reported_tokens: int | None = None,
    ) -> RequestSummary:
        tokens = request.rates.count if reported_tokens is None else reported_tokens
        return RequestSummary(
            id=request.id,
            prompt_tokens=done["prompt_tokens"] if done else None,
            prompt_tps=_finite_or_none(done["prompt_tps"]) if done else None,
            generation_tokens=tokens,
            generation_tps=_finite_or_none(done["generation_tps"]) if done else None,
            avg_tps=request.rates.average(),
            ttft_s=request.ttft_s,
            text=request.text.value(),
            finish_reason=done["finish_reason"] if done else None,
            finished=done is not None,
            started_at=request.started_at,
            first_at=request.first_at,
            last_at=request.last_at,
            rates=tuple(request.points),
        )


@dataclass(frozen=True)
class AnswerFigures:
    """An answer's figures as every surface shows them (the module docstring says what
    each one means). ``as_dict`` is how the history, the CLI's JSON and the API keep them:
    the same keys, in this order."""

    prompt_tokens: int | None
    prompt_tps: float | None
    # the prompt's tokens the ranks' prompt cache held (0: none, or no prompt cache)
    cached_tokens: int
    generation_tokens: int
    generation_tps: float | None
    ttft_s: float | None
    finish_reason: str | None
    text: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def answer_figures(done: protocol.Done, summary: RequestSummary | None) -> AnswerFigures:
    """An answer's figures from the telemetry's ``summary`` of the request; from the
    worker's ``done`` event alone when the telemetry has none (its figures then converted
    alike)."""
    if summary is None:
        summary = RequestSummary(
            id=done["request"],
            prompt_tokens=done["prompt_tokens"],
            prompt_tps=_finite_or_none(done["prompt_tps"]),
            generation_tokens=done["generation_tokens"],
            generation_tps=_finite_or_none(done["generation_tps"]),
            avg_tps=None,
            ttft_s=_finite_or_none(done["ttft_s"]),
            text=done["text"],
            finish_reason=done["finish_reason"],
            finished=True,
        )
    return AnswerFigures(
        prompt_tokens=summary.prompt_tokens,
        prompt_tps=summary.prompt_tps,
        cached_tokens=done.get("cached_tokens", 0),
        generation_tokens=summary.generation_tokens,
        generation_tps=summary.tokens_per_s,
        ttft_s=summary.ttft_s,
        finish_reason=summary.finish_reason,
        text=done["text"],
    )


# -- helpers ----------------------------------------------------------------------


def rank_facts(loaded: protocol.Loaded) -> dict[str, Any]:
    """A rank's ``loaded`` event → what it runs on, flat, for a summary: device, BLAS
    (name, path, threads, measured GFLOP/s, whether it is a fast one; None on a GPU)
    and the weights' precision (whether they were dequantized at load, and the weight
    shapes stored in another layout for one-row products: ``core.worker.layout``)."""
    blas, weights = loaded["blas"] or {}, loaded["weights"]
    facts: dict[str, Any] = {"rank": loaded["rank"], "device": loaded["device"]}
    facts.update(
        blas=blas.get("name"),
        blas_path=blas.get("path"),
        blas_threads=blas.get("threads"),
        blas_gflops=blas.get("gflops"),
        blas_fast=blas.get("fast"),
        weights=weights.get("precision"),
        dequantized=weights.get("dequantized"),
        ring_wait_sleeps=loaded.get("ring_wait"),
    )
    if weights.get("reason"):
        facts["weights_note"] = weights["reason"]
    layout = weights.get("layout")
    if isinstance(layout, Mapping):
        facts["weights_layout"] = sorted(
            f"{shape} {str(how).split(':')[0]}"
            for shape, how in layout.items()
            if not str(how).startswith("as is")
        )
    return facts


def _append_in_order(buffer: RingBuffer, t: float, value: float) -> None:
    """Appends, holding ``t`` at the newest sample's time if it went backwards.

    A rank's clock offset can still shrink early in a job (see ``_to_local``).
    """
    last = buffer.last()
    buffer.append(max(t, last[0]) if last else t, value)


def _finite(value: float, name: str) -> float:
    """A number ``parse_event`` typed, if finite (JSON may say NaN or Infinity)."""
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} is not finite: {value!r}")
    return number


def _finite_or_none(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def _count(value: int, name: str) -> int:
    if value < 0:
        raise ValueError(f"{name} is not a count: {value!r}")
    return value


def _peer_bytes(value: dict[str, int], rank: int) -> dict[int, int]:
    """``{"1": 4096}`` -> ``{1: 4096}``; the whole report is refused if any entry is bad."""
    peers: dict[int, int] = {}
    for peer, n in value.items():
        peer_rank = int(peer)
        if peer_rank < 0 or peer_rank == rank:
            raise ValueError(f"rank {rank} reports traffic with peer {peer!r}")
        peers[peer_rank] = _count(n, "bytes")
    return peers
