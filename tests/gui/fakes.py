"""A stand-in for ``core.run.job.launcher.Job``: same signals, same threads-fire-callbacks contract,
no processes. It lets GUI tests and the GUI benchmark drive the Run pane in milliseconds.

Events are emitted on the fake's own thread, as the real launcher's reader threads do, so
everything still crosses ``gui.bridge``.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from psygnal import Signal

from core import paths
from core.run.job.launcher import JobError, JobSpec, JobState
from core.run.job.rank_status import starting_ranks
from core.worker import protocol as p
from core.worker.vocab import LoadingStage, Strategy


@dataclass
class FakeRank:
    rank: int
    pid: int | None = None
    stage: LoadingStage = LoadingStage.STARTING
    loaded_event: dict | None = None  # as the launcher's RankStatus


@dataclass
class FakeBehaviour:
    load_s: float = 0.05  # between loading stages
    token_s: float = 0.01  # between tokens
    traffic_every: int = 1  # tokens between traffic reports (the worker reports every 0.5 s)
    answer: str = "The capital of France is Paris."
    fail_after_load: str | None = None  # a failure message once loaded
    fail_after_answer: str | None = None  # a rank dies just after an answer's done
    start_error: Exception | None = None
    memory_bytes: int = 150 << 20
    cached_tokens: int = 0  # the done event's prompt tokens from the prompt cache
    sent: list[dict] = field(default_factory=list)  # the generate() calls
    link_bytes_per_s: float = 2e9  # what the fake link test measures (rank 0's link)
    link_latency_s: float = 20e-6
    link_failure: str | None = None  # the job fails during a link test, with this message


class FakeJob:
    event = Signal(dict)
    state_changed = Signal(str, str)

    def __init__(
        self, spec: JobSpec, behaviour: FakeBehaviour | None = None, run_dir: Path | None = None
    ) -> None:
        self.spec = spec
        self.behaviour = behaviour or FakeBehaviour()
        self.run_dir = run_dir or paths.log_dir() / "fake-runs" / f"job-{id(self)}"
        self.state = JobState.STARTING
        self.message = ""
        self.ranks = [FakeRank(r) for r in range(spec.nodes)]
        self._ids = itertools.count(1)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition()
        self._done: dict[str, dict] = {}
        self._cancelled: set[str] = set()
        self._pending: set[str] = set()  # answers running at once (the launcher's too)

    def start(self) -> FakeJob:
        if self.behaviour.start_error:
            raise self.behaviour.start_error
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for rank in range(self.spec.nodes):
            self.rank_log(rank).write_text(f"rank {rank} log\nloading…\n")
        self._set(JobState.LOADING, starting_ranks(self.spec.nodes))
        self._thread = threading.Thread(target=self._load, name="fake-job", daemon=True)
        self._thread.start()
        return self

    def stop(self, grace_s: float = 3.0) -> None:
        with self._lock:
            if self.state.finished:
                return
            self._set(JobState.STOPPING, "stopping")
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        self._set(JobState.STOPPED, "stopped")

    def generate(
        self,
        prompt: str | None = None,
        *,
        messages: list[dict] | None = None,
        max_tokens: int = 128,
        chat: bool = True,
        sampling: dict | None = None,
        tokens: list[int] | None = None,
        tenant: str | None = None,
    ) -> str:
        with self._lock:
            if self.state not in (JobState.READY, JobState.GENERATING):
                raise JobError(f"the cluster is {self.state.value}, not ready for a prompt")
            request = f"r{next(self._ids)}"
            self._pending.add(request)
            self.behaviour.sent.append(
                {
                    "id": request,
                    "messages": messages,
                    "prompt": prompt,
                    "max_tokens": max_tokens,
                    "tokens": tokens,
                    "tenant": tenant,
                    "sampling": sampling,
                }
            )
            self._set(JobState.GENERATING, "generating")
        threading.Thread(
            target=self._answer, args=(request, max_tokens), name="fake-job-answer", daemon=True
        ).start()
        return request

    def link_test(
        self,
        sizes: list[int] | None = None,
        pairs: list[tuple[int, int]] | None = None,
        scale: float = 1.0,
    ) -> str:
        """As the launcher's: every ring pair at each size; the ``link_test`` event reports
        ``FakeBehaviour.link_bytes_per_s`` for the largest message."""
        with self._lock:
            if self.state not in (JobState.READY, JobState.GENERATING):
                raise JobError(f"the cluster is {self.state.value}, not ready for a prompt")
            request = f"t{next(self._ids)}"
            self._set(JobState.GENERATING, "generating")
        threading.Thread(
            target=self._link_test, args=(request, sizes or [4096, 1 << 20, 64 << 20]),
            name="fake-job-links", daemon=True,
        ).start()  # fmt: skip
        return request

    def cancel(self, request: str) -> bool:
        """As the launcher's: that answer ends at its next token, "cancelled"."""
        with self._lock:
            if self.state != JobState.GENERATING or request in self._done:
                return False
            self._cancelled.add(request)
            return True

    def wait_ready(self, timeout: float | None = None) -> None:
        """As the launcher's: until every rank has loaded; JobError if it ended first."""
        with self._changed:
            if not self._changed.wait_for(
                lambda: self.state == JobState.READY or self.state.finished, timeout
            ):
                raise JobError("not loaded in time")
        if self.state.finished:
            raise JobError(self.message)

    def wait_done(self, request: str, timeout: float | None = None) -> dict:
        """The request's ``done`` event; JobError if the job ends first."""
        with self._changed:
            self._changed.wait_for(lambda: request in self._done or self.state.finished, timeout)
            if request not in self._done:
                raise JobError(self.message or "no answer in time")
            return self._done[request]

    def rank_log(self, rank: int) -> Path:
        return self.run_dir / f"rank{rank}.log"

    def alive_pids(self) -> list[int]:
        return []

    # -- the fake ranks --------------------------------------------------------------------

    def _emit(self, kind: str, rank: int = 0, **fields: object) -> p.Event:
        """Send an event as a rank would: one ``protocol.parse_event`` takes (the fake
        speaks the protocol, so the readers' typed fields hold)."""
        line = json.dumps({"event": kind, "rank": rank, "t": time.monotonic(), **fields})
        event = p.parse_event(line)
        assert event is not None, f"the fake job sent a malformed event: {line}"
        self.event.emit(event)
        return event

    def _set(self, state: JobState, message: str) -> None:
        with self._changed:
            self.state, self.message = state, message
            self._changed.notify_all()
        self.state_changed.emit(state.value, message)

    def _load(self) -> None:
        b = self.behaviour
        tensor = self.spec.strategy is Strategy.TENSOR
        cut = LoadingStage.SLICING if tensor else LoadingStage.PLACING
        stages = (LoadingStage.READING, cut, LoadingStage.WEIGHTS)  # as the worker's sharding
        for rank in range(self.spec.nodes):
            self._emit("loading", rank, stage=LoadingStage.JOINING.value)
            self._emit(
                "hello",
                rank,
                size=self.spec.nodes,
                backend=str(self.spec.backend),
                strategy=str(self.spec.strategy),
                pid=0,
                host="fake",
            )
        for stage in stages:
            if self._stop.wait(b.load_s):
                return
            for rank in range(self.spec.nodes):
                self._emit("loading", rank, stage=stage.value)
        for rank in range(self.spec.nodes):
            self.ranks[rank].loaded_event = self._emit(  # as the launcher keeps it
                "loaded",
                rank,
                load_s=b.load_s * 3,
                memory_bytes=b.memory_bytes,
                layers=None,
                strategy=str(self.spec.strategy),
                device="cpu",
                blas=None,
                ring_wait=None,
                weights={},
            )
        self._emit("ready")
        with self._lock:
            if self.state == JobState.LOADING:
                self._set(JobState.READY, "ready")
        if b.fail_after_load:
            if self._stop.wait(b.load_s):
                return
            with self._lock:
                if self.state.finished or self.state == JobState.STOPPING:
                    return
                self._set(JobState.FAILED, b.fail_after_load)

    def _link_test(self, request: str, sizes: list[int]) -> None:
        b = self.behaviour
        n = self.spec.nodes
        pairs = [(r, (r + 1) % n) for r in range(n if n > 2 else 1)]
        links = []
        for a, peer in pairs:
            rate = b.link_bytes_per_s * (1 - 0.1 * a)  # each link its own figure
            points = [
                {
                    "bytes": s,
                    "seconds": b.link_latency_s + s / rate,
                    "bytes_per_s": s / (b.link_latency_s + s / rate),
                }
                for s in sizes
            ]
            links.append({"a": a, "b": peer, "points": points})
        # As the worker's rank 0: a ``link_progress`` event per pair and size, in order.
        steps = [(s, pair) for s in sizes for pair in pairs]
        started = time.monotonic()
        cancelled = False
        for step, (nbytes, pair) in enumerate(steps, 1):
            if self._stop.wait(b.token_s / len(steps)):
                return
            if request in self._cancelled and pair == pairs[0] and step > 1:  # a size's end
                links, cancelled = [], True
                break
            self._emit(
                "link_progress",
                request=request,
                done=step,
                total=len(steps),
                bytes=nbytes,
                pair=list(pair),
                elapsed_s=time.monotonic() - started,
            )
        if b.link_failure:
            with self._lock:
                self._set(JobState.FAILED, b.link_failure)
            return
        with self._lock:
            if self.state != JobState.GENERATING:
                return
            self._set(JobState.READY, "ready")
        extra = {"cancelled": True} if cancelled else {}  # as the worker's: stopped at a size's end
        done = self._emit("link_test", request=request, size=n, links=links, all_sum=[], **extra)
        with self._changed:
            self._done[request] = done
            self._changed.notify_all()

    def _answer(self, request: str, max_tokens: int) -> None:
        """Tokens as the worker sends them over mlx-lm: one event per generated token, the
        end-of-sequence one included (empty text) when the answer ends before
        ``max_tokens``; its ``done`` carries mlx-lm's own figures (n tokens over the time
        since the first one, the worker's time to first token), which differ from the
        ones telemetry defines, as the real worker's do."""
        b = self.behaviour
        words = [" " + word for word in b.answer.split()]
        words[0] = words[0].lstrip()
        fits = len(words) < max_tokens  # room for the end-of-sequence token too
        pieces = [*words, ""] if fits else words[:max_tokens]
        started = time.monotonic()
        first: float | None = None
        finish_reason, shown, count = ("stop" if fits else "length"), [], 0
        for index, piece in enumerate(pieces):
            if self._stop.wait(b.token_s):
                return
            if request in self._cancelled:
                finish_reason = "cancelled"
                break
            first = time.monotonic() if first is None else first
            shown.append(piece)
            count += 1
            self._emit("token", request=request, index=index, token=index, text=piece)
            if index % b.traffic_every:
                continue
            for rank in range(self.spec.nodes):
                peer = (rank + 1) % self.spec.nodes
                if peer != rank:
                    self._emit(
                        "traffic",
                        rank,
                        interval_s=b.token_s * b.traffic_every,
                        sent={str(peer): 4096},
                        received={},
                    )
        since_first = max(time.monotonic() - (first or started), 1e-9)
        done = {
            "request": request,
            "prompt_tokens": 12,
            "prompt_tps": 100.0,
            "cached_tokens": b.cached_tokens,
            "generation_tokens": count,
            "generation_tps": count / since_first,
            "ttft_s": round((first or started) - started, 6),
            "finish_reason": finish_reason,
            "peak_memory_bytes": b.memory_bytes,
            "text": "".join(shown),
        }
        with self._lock:
            if self.state != JobState.GENERATING:
                return
            self._pending.discard(request)
            if not self._pending:  # READY once the last running answer ended, as the launcher
                self._set(JobState.READY, "ready")
        event = self._emit("done", **done)
        with self._changed:
            self._done[request] = event
            self._changed.notify_all()
        if b.fail_after_answer:
            with self._lock:
                if not self.state.finished and self.state != JobState.STOPPING:
                    self._set(JobState.FAILED, b.fail_after_answer)


def fake_factory(behaviour: FakeBehaviour | None = None, jobs: list | None = None):
    """A ``job_factory`` for RunPane/MainWindow that records the jobs it makes."""
    made = jobs if jobs is not None else []

    def factory(spec: JobSpec) -> FakeJob:
        job = FakeJob(spec, behaviour)
        made.append(job)
        return job

    factory.jobs = made  # type: ignore[attr-defined]
    return factory


class FakeScanner:
    """``core.cluster.scanner.Scanner``'s surface over a real ``Registry`` and ``HostList``, with no
    network: tests set probe states themselves, and the fake records what the pane asks.

    ``set_up_access`` blocks like the real one (it runs on a bridge thread) and raises
    ``access_error`` when set; otherwise the node becomes ready with ``facts_after``.
    """

    host_key_needed = Signal(str, object)
    probed = Signal(str)

    def __init__(self, hosts_path: Path, registry=None) -> None:
        from core.cluster.hosts import HostList
        from core.cluster.registry import Registry

        self.registry = registry if registry is not None else Registry()
        self.hosts = HostList(hosts_path)
        self.registry.follow_hosts(self.hosts)
        self.calls: list[tuple] = []
        self.access_error: Exception | None = None
        self.access_delay_s = 0.0
        self.facts_after: dict[str, object] = {}

    def start(self) -> None:
        self.calls.append(("start",))

    def close(self) -> None:
        self.calls.append(("close",))

    def reprobe(self, name: str) -> None:
        self.calls.append(("reprobe", name))

    def accept_host_key(self, name: str) -> None:
        self.calls.append(("accept_host_key", name))

    def reject_host_key(self, name: str) -> None:
        self.calls.append(("reject_host_key", name))

    def set_up_access(self, name: str, password: str) -> None:
        self.calls.append(("set_up_access", name, password))
        time.sleep(self.access_delay_s)
        if self.access_error is not None:
            raise self.access_error
        if name in self.facts_after:
            from core.cluster.registry import ProbeState

            self.registry.set_probe_result(name, ProbeState.READY, "", self.facts_after[name])

    def add_host(self, text: str):
        self.calls.append(("add_host", text))
        return self.hosts.add(text)

    def remove_host(self, name: str) -> bool:
        self.calls.append(("remove_host", name))
        from core.cluster.registry import manual_name

        for host in self.hosts.hosts():
            if manual_name(host) == name:
                return self.hosts.remove(host)
        return False

    def topology(self):
        from core.cluster.registry import ProbeState
        from core.cluster.topology import build_topology

        ready = [n.facts for n in self.registry.nodes() if n.probe_state == ProbeState.READY]
        return build_topology([f for f in ready if hasattr(f, "thunderbolt")])
