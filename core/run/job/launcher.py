"""Start a distributed job's ranks, follow them, and stop every one of them.

MacMesh does not use ``mlx.launch`` (it exits 0 when a rank fails and mixes
all ranks' output): it starts each rank itself with MLX's environment
contract (``core.run.job.mlxenv``), reads each rank's events (stdout) and log
(stderr), and turns any rank's exit or silence into one clear failure that
names the rank, after which every rank is ended.

Ranks run on this machine (``LocalRank``: the demo) or, when the spec has
``targets``, on the Macs they name (``RemoteRank`` over SSH): the worker is
shipped to each node and its versions checked (``core.remote.ship``) before
any rank starts; watchdog, failure diagnosis and stop are the same for both.

Threads: each rank has two reader threads (stdout events, stderr log) and
the job one monitor thread (which first prepares the nodes of a remote job).
``Job.event``, ``Job.log`` and ``Job.state_changed`` fire on those threads,
never on the caller's: a GUI must cross to its own thread (``gui/bridge.py``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import secrets
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from psygnal import Signal

from core import paths
from core.remote.ship import NodeSetup, prepare_node, version_skew
from core.remote.ssh import Connection, SSHError
from core.remote.targets import Target
from core.run.job import cpu, mlxenv
from core.run.job.rank_status import (
    GENERATING,
    SERVING,
    TESTING_LINKS,
    TRAINING,
    RankStatus,
    blame_order,
    exit_message,
    loading_stage,
    silence_message,
    starting_ranks,
)
from core.run.job.ranklog import journal_line
from core.run.job.ranks import LocalRank, RankProcess
from core.run.job.remote_ranks import (
    SIGNAL_TIMEOUT_S,
    SIGNAL_WITHIN_S,
    RemoteRank,
    clean_job_dirs,
    cluster_launches,
    rank_command,
    sweep_stale_jobs,
)
from core.worker import kvbits
from core.worker import protocol as p
from core.worker.vocab import Backend, JobState, LoadingStage, Strategy, Task

BIND_FAILURE = "Couldn't bind socket"
# Ending the ranks, however they hang, takes at most END_WITHIN_S: SIGTERM and a grace
# to exit (TERM_GRACE_S from the start), SIGKILL to what remains (each signal over SSH
# bounded by SIGNAL_WITHIN_S, every rank in parallel), REAP_S for its exit status, and
# READERS_S for the rank readers to finish the logs. A failure is reported within its
# trigger (an exit, or silence past the watchdog) + KNOCK_ON_S + END_WITHIN_S.
TERM_GRACE_S = 2.0
REAP_S = 1.0
READERS_S = 1.0
KNOCK_ON_S = 0.3  # after a first failure, time for a crash's knock-on exits to arrive
END_WITHIN_S = max(TERM_GRACE_S, SIGNAL_WITHIN_S) + SIGNAL_WITHIN_S + REAP_S + READERS_S
# host, port, user, interpreter, cache root: see _node_key
NodeKey = tuple[str, int, str | None, str, str | None]


class JobError(Exception):
    """A request the job cannot take now; the message says why."""


@dataclass
class JobSpec:
    model: Path
    strategy: Strategy = Strategy.PIPELINE  # as planned; one rank always runs it whole
    nodes: int = 2
    split: list[int] | None = None
    backend: Backend = Backend.RING  # as preflight chose it (never AUTO)
    python: str = sys.executable
    host: str = "127.0.0.1"
    telemetry: bool = True
    load_timeout_s: float = 120.0  # silence allowed before a rank has loaded (heartbeats)
    watchdog_s: float = 20.0  # silence allowed once loaded (heartbeats come every second)
    bind_retries: int = 3
    rank_models: list[Path] | None = None  # per-rank model folder, when nodes hold different files
    targets: list[Target] | None = None  # where each rank runs, rank order (None: this machine)
    # Local ranks' names in messages, rank order: the demo's simulated Macs (targets name theirs).
    rank_names: list[str] | None = None
    devices: list[list[str | list[str] | None]] | None = None  # jaccl: the device matrix
    # ring: the address each rank listens on (rank order; core.cluster.ringpath's
    # choice); None: each target's rank_address.
    addresses: list[str] | None = None
    # What the ranks do. FINETUNE: every rank the whole model (whatever the strategy),
    # training on ``data`` (rank order ``rank_data`` when nodes hold it elsewhere) with
    # ``tune_settings`` (TuneSettings.to_dict()); rank 0 writes the adapter to ``out``.
    task: Task = Task.CHAT
    data: Path | None = None
    rank_data: list[Path] | None = None
    tune_settings: dict[str, Any] | None = None
    out: Path | None = None
    # On a CPU, per rank (rank order): "float" (dequantize), "quantized", "auto" (if room).
    weights: list[str] | None = None
    adapter: Path | None = None  # an mlx-lm adapter folder fused into the model on every rank
    rank_adapters: list[Path] | None = None  # per-rank adapter folder, when nodes differ
    # Chat: requests the ranks generate at once (1: one at a time); ``core.worker.batching``.
    batch: int = p.DEFAULT_BATCH
    # Chat, batching: the ranks' prompt cache, MB a rank at most (0: none).
    prompt_cache_mb: int = p.DEFAULT_PROMPT_CACHE_MB
    # Chat: the KV cache's bits (16: as computed) and group size (core.worker.kvquant).
    kv_bits: int = kvbits.NONE
    kv_group_size: int = kvbits.DEFAULT_GROUP_SIZE

    def __post_init__(self) -> None:
        self.strategy, self.backend = Strategy(self.strategy), Backend(self.backend)
        self.task = Task(self.task)
        if self.targets is not None:
            if not self.targets:
                raise ValueError("a job needs at least one node")
            self.nodes = len(self.targets)
        if self.strategy is Strategy.AUTO or self.backend is Backend.AUTO:
            raise ValueError("a job runs a chosen strategy and backend, not auto")
        if self.task is Task.FINETUNE and (self.data is None or self.out is None):
            raise ValueError("a fine-tune job needs its data folder and adapter folder")
        if self.strategy is Strategy.SINGLE and self.nodes > 1 and self.task is Task.CHAT:
            raise ValueError(f"the single strategy runs on one node, not {self.nodes}")

    @property
    def rank_backend(self) -> Backend:
        """One rank needs no backend at all."""
        return self.backend if self.nodes > 1 else Backend.SINGLE

    @property
    def rank_strategy(self) -> Strategy:
        """One rank holds the whole model, whatever the spec's strategy."""
        return self.strategy if self.nodes > 1 else Strategy.SINGLE

    def worker_args(self, rank: int) -> list[str]:
        """The worker's arguments (after ``-m core.worker``) for ``rank``."""
        model = self.rank_models[rank] if self.rank_models else self.model
        args = ["--model", str(model)]
        args += ["--strategy", self.rank_strategy]
        args += ["--backend", self.rank_backend]
        if self.split and self.nodes > 1:
            args += ["--split", ",".join(str(n) for n in self.split)]
        if self.task is Task.FINETUNE:
            data = self.rank_data[rank] if self.rank_data else self.data
            settings = json.dumps(self.tune_settings or {}, sort_keys=True)
            args += ["--task", self.task, "--data", str(data), "--settings", settings]
            args += ["--out", str(self.out)]
        if not cpu.fast_path():
            args += ["--weights", "quantized"]  # the worker ignores it on Metal
        elif self.weights and self.weights[rank] != "auto":
            args += ["--weights", self.weights[rank]]
        if self.task is Task.CHAT and self.batch != p.DEFAULT_BATCH:
            args += ["--batch", str(self.batch)]
        if self.task is Task.CHAT and self.prompt_cache_mb != p.DEFAULT_PROMPT_CACHE_MB:
            args += ["--prompt-cache-mb", str(self.prompt_cache_mb)]
        if self.task is Task.CHAT and self.kv_bits != kvbits.NONE:
            args += ["--kv-bits", str(self.kv_bits), "--kv-group-size", str(self.kv_group_size)]
        adapter = self.rank_adapters[rank] if self.rank_adapters else self.adapter
        if adapter is not None:
            args += ["--adapter", str(adapter)]
        return args

    def worker_argv(self, rank: int, python: str | None = None) -> list[str]:
        return [python or self.python, "-m", "core.worker", *self.worker_args(rank)]


class Job:
    """One distributed job: on this machine's loopback (the demo cluster), or on the
    spec's targets over SSH."""

    event = Signal(dict)  # every worker event, a protocol.Event (reader threads)
    log = Signal(int, str)  # rank, a line of its stderr (reader threads)
    state_changed = Signal(str, str)  # state value, message (any job thread)

    def __init__(self, spec: JobSpec, run_dir: Path | None = None) -> None:
        self.spec = spec
        self.run_dir = run_dir or _new_run_dir()
        self.state = JobState.STARTING
        self.message = ""
        self.ranks: list[RankStatus] = []
        self._procs: list[RankProcess] = []
        self._lock = threading.RLock()
        self._ready = threading.Event()
        self._finished = threading.Event()
        self._done: dict[str, p.Done | p.LinkTest | p.Error] = {}
        self._done_cond = threading.Condition(self._lock)
        self._pending: set[str] = set()
        self._ids = itertools.count(1)
        self._threads: list[threading.Thread] = []
        self._attempt = 0
        self._joined = False  # the ranks were told to join the group (this attempt)
        self._tag = uuid.uuid4().hex[:10]  # names this job's folders on the nodes
        self._connections: dict[NodeKey, Connection] = {}
        self._setups: dict[NodeKey, NodeSetup] = {}
        self._job_dirs: dict[NodeKey, list[str]] = {}  # this job's rank folders per node

    @property
    def remote(self) -> bool:
        return any(not target.local for target in self.spec.targets or ())

    # -- lifecycle --

    def start(self) -> Job:
        """Start the ranks (a remote job first prepares its nodes on the monitor thread,
        so this returns at once; a failure there fails the job with the reason)."""
        if self.remote:
            self._set_state(JobState.STARTING, f"connecting to {self.spec.nodes} node(s)")
            runner = self._prepare_then_monitor
        else:
            with self._lock:
                self._launch()
            runner = self._monitor
        monitor = threading.Thread(target=runner, name="macmesh-job-monitor", daemon=True)
        monitor.start()
        return self

    def _prepare_then_monitor(self) -> None:
        try:
            self._prepare_nodes()
            with self._lock:
                if self.state.finished or self.state == JobState.STOPPING:
                    self._close_connections()
                    return
                self._launch()
        except SSHError as exc:
            self._fail(str(exc))
            return
        except Exception as exc:  # never leave a job "starting" forever
            self._fail(f"Could not start the ranks: {type(exc).__name__}: {exc}")
            return
        self._monitor()

    def _prepare_nodes(self) -> None:
        """Connect to every node, ship the worker, check what will run it: in parallel."""
        nodes = {_node_key(t): t for t in self.spec.targets or () if not t.local}

        def prepare(key: NodeKey, target: Target) -> NodeSetup:
            connection = target.connection()
            with self._lock:
                self._connections[key] = connection
            connection.connect()
            setup = prepare_node(connection, target.interpreter, target.cache_root)
            sweep_stale_jobs(connection, setup.cache_root)  # what killed ranks left
            return setup

        errors = []
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            futures = {key: pool.submit(prepare, key, t) for key, t in nodes.items()}
            for key, future in futures.items():
                try:
                    self._setups[key] = future.result()
                except SSHError as exc:
                    errors.append(str(exc))
        if errors:
            raise SSHError("", "\n".join(errors))
        skew = version_skew(list(self._setups.values()))
        if skew:
            raise SSHError("", skew)

    def _rank_extra_env(self) -> dict[str, str]:
        """MacMesh's own worker variables: telemetry off, and joining when told."""
        extra = {} if self.spec.telemetry else {p.ENV_TELEMETRY: "0"}
        if self.spec.nodes > 1:
            extra[p.ENV_JOIN] = "1"  # see _join_when_all_are_up
        return extra

    def _launch(self) -> None:
        spec = self.spec
        self._attempt += 1
        self._joined = False
        names: list[str | None] = [None] * spec.nodes
        if spec.targets:
            names = [t.name for t in spec.targets]
        elif spec.rank_names and len(spec.rank_names) == spec.nodes:
            names = list(spec.rank_names)
        self.ranks = [RankStatus(rank, node=names[rank]) for rank in range(spec.nodes)]
        self._procs = []
        if spec.targets:
            self._launch_targets()
        else:
            self._launch_local()
        self._set_state(JobState.LOADING, starting_ranks(spec.nodes))

    def _launch_local(self) -> None:
        """One local rank process per rank, on this Mac."""
        spec = self.spec
        hostfile = None
        if spec.rank_backend is Backend.RING:
            ports = mlxenv.free_ports(spec.nodes, spec.host)
            hostfile = self.run_dir / "hostfile.json"
            hostfile.write_text(mlxenv.ring_hostfile([(spec.host, port) for port in ports]))
        extra = self._rank_extra_env()
        self._procs = []
        for status in self.ranks:
            env = mlxenv.rank_env(
                status.rank, spec.rank_backend, str(hostfile) if hostfile else None, extra=extra
            )
            env.update(cpu.local_cpu_env(spec.nodes, env))
            log_path = self.run_dir / f"rank{status.rank}.log"
            proc = LocalRank(status.rank, spec.worker_argv(status.rank), env, log_path)
            self._follow(proc, status)

    def _launch_targets(self) -> None:
        """One rank per target: MLX's files in a folder of the rank's own on its node,
        the shipped worker run from its folder there (or a local rank for this Mac)."""
        spec = self.spec
        targets = spec.targets or []
        backend = spec.rank_backend
        addresses = [t.rank_address for t in targets]
        if backend is Backend.RING and spec.addresses:
            addresses = list(spec.addresses)
        ports = mlxenv.rank_ports(addresses if backend is Backend.RING else addresses[:1])
        ports += [0] * (len(targets) - len(ports))  # jaccl: only the coordinator listens
        job_dirs = []
        for rank, target in enumerate(targets):
            if target.local:
                job_dirs.append(str(self.run_dir / f"rank{rank}-files-{self._attempt}"))
            else:
                root = self._setups[_node_key(target)].cache_root
                job_dirs.append(f"{root}/jobs/{self._tag}-{self._attempt}-rank{rank}")
                self._job_dirs.setdefault(_node_key(target), []).append(job_dirs[-1])
        extra = self._rank_extra_env()
        launches = cluster_launches(backend, addresses, ports, job_dirs, spec.devices, extra)
        sharing = Counter("local" if t.local else _node_key(t) for t in targets)
        for launch, target, status in zip(launches, targets, self.ranks, strict=True):
            argv = spec.worker_argv(status.rank, python=target.interpreter)
            log_path = self.run_dir / f"rank{status.rank}.log"
            if target.local:
                folder = Path(launch.job_dir)
                folder.mkdir(parents=True, exist_ok=True)
                for name, text in launch.files.items():
                    (folder / name).write_text(text)
                env = mlxenv.rank_env(status.rank, Backend.SINGLE)  # this machine's env...
                env.pop("MLX_RANK")
                env.update(launch.env)  # ...with the rank's contract
                env.update(cpu.local_cpu_env(sharing["local"], env))
                proc: RankProcess = LocalRank(status.rank, argv, env, log_path)
            else:
                key = _node_key(target)
                setup = self._setups[key]
                env = {**launch.env, "PYTHONPATH": setup.worker_dir}
                env.update(cpu.node_cpu_env(setup.versions, sharing[key]))
                # A fresh connection carries a signal the rank's own session does not.
                quick = replace(target, timeout=min(target.timeout, SIGNAL_TIMEOUT_S))
                proc = RemoteRank(
                    status.rank,
                    self._connections[key],
                    rank_command(launch, setup.worker_dir, argv),
                    env,
                    log_path,
                    reconnect=quick.connection,
                )
            self._follow(proc, status)

    def _follow(self, proc: RankProcess, status: RankStatus) -> None:
        status.pid = proc.pid
        self._procs.append(proc)
        for target, name in ((self._read_events, "events"), (self._read_log, "log")):
            thread = threading.Thread(
                target=target,
                args=(proc, status),
                name=f"rank{status.rank}-{name}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)

    def stop(self, grace_s: float = 3.0) -> None:
        """End the job: ask rank 0 to stop all ranks, then end whatever remains."""
        with self._lock:
            if self.state.finished:
                return
            # Only an idle rank 0 reads the stop command soon; otherwise end the ranks.
            was_ready = self.state == JobState.READY
            self._set_state(JobState.STOPPING, "stopping")
            if was_ready:
                self._send_all(p.encode_command(p.OP_STOP))
        if was_ready:
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and any(pr.poll() is None for pr in self._procs):
                time.sleep(0.05)
        self._end_all()
        self._finish(JobState.STOPPED, "stopped")

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job has stopped or failed; True if it has."""
        return self._finished.wait(timeout)

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until every rank has loaded; JobError if the job failed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._ready.is_set():
            if self.state.finished:
                raise JobError(self.message)
            if deadline is not None and time.monotonic() > deadline:
                raise JobError(f"the model was not loaded within {timeout:.0f} s")
            self._ready.wait(0.05)

    # -- requests --

    def generate(
        self,
        prompt: str | None = None,
        *,
        messages: list[dict[str, Any]] | None = None,
        max_tokens: int = 128,
        chat: bool = True,
        sampling: dict[str, Any] | None = None,
        tokens: list[int] | None = None,
        tenant: str | None = None,
    ) -> str:
        """Send a request to the ranks; returns its id (events carry it as ``request``).
        ``sampling``: temperature, top_p, seed, stop (the worker's generate fields). Every
        rank must draw the same random numbers, so a request without a seed gets one.
        ``tokens``: the prompt already rendered and tokenized (the ranks use it instead of
        the text); ``tenant``: whose prompt cache entries it may use (None: the common)."""
        request = f"r{next(self._ids)}"
        fields: dict[str, Any] = {"id": request, "max_tokens": int(max_tokens), "chat": chat}
        if tokens is not None:
            fields["tokens"] = tokens
        if tenant is not None:
            fields["tenant"] = tenant
        if messages is not None:
            fields["messages"] = messages
        else:
            fields["prompt"] = prompt or ""
        fields.update({k: v for k, v in (sampling or {}).items() if v is not None})
        fields.setdefault("seed", secrets.randbelow(1 << 31))
        self._send(p.encode_command(p.OP_GENERATE, **fields), request, GENERATING)
        return request

    def cancel(self, request: str) -> bool:
        """End the answer ``request`` at its next token (its ``done`` event then says
        "cancelled"; the job stays ready). False when it is not running or queued."""
        with self._lock:
            if request not in self._pending or self.state != JobState.GENERATING:
                return False
            self._send_all(p.encode_command(p.OP_CANCEL, id=request))
            return True

    def link_test(
        self,
        sizes: Sequence[int] | None = None,
        pairs: Sequence[tuple[int, int]] | None = None,
        scale: float = 1.0,
    ) -> str:
        """Measure the links between ``pairs`` of ranks (default: ring neighbours) at each
        message size (default: 4 KiB to 64 MiB); ``wait_done`` gives the ``link_test``
        event. ``scale`` shrinks (or grows) the bytes moved at each size."""
        request = f"t{next(self._ids)}"
        fields: dict[str, Any] = {"id": request, "scale": scale}
        if sizes is not None:
            fields["sizes"] = [int(n) for n in sizes]
        if pairs is not None:
            fields["pairs"] = [[int(a), int(b)] for a, b in pairs]
        line = p.encode_command(p.OP_LINK_TEST, **fields)
        self._send(line, request, TESTING_LINKS)
        return request

    def wait_done(self, request: str, timeout: float | None = None) -> p.Done | p.LinkTest:
        """The request's ``done`` (or ``link_test``) event; JobError if the job ends first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._done_cond:
            while request not in self._done:
                if self.state.finished:
                    raise JobError(self.message)
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise JobError(f"no answer within {timeout:.0f} s")
                self._done_cond.wait(0.1 if remaining is None else min(remaining, 0.1))
            answer = self._done[request]
        if answer["event"] == p.ERROR:
            raise JobError(answer["message"])
        return answer

    def _send(self, line: str, request: str, activity: str) -> None:
        with self._lock:
            if self.state not in (JobState.READY, JobState.GENERATING):
                raise JobError(f"the cluster is {self.state.value}, not ready for a prompt")
            self._pending.add(request)
            for status in self.ranks:  # so a failure now says "while generating"
                status.activity = activity
            self._set_state(JobState.GENERATING, "generating")
            self._send_all(line)

    def _send_all(self, line: str) -> None:
        """Every rank gets every command, in the same order (the caller holds the lock)."""
        for proc in self._procs:
            proc.send(line)

    # -- reading ranks --

    def _read_events(self, proc: RankProcess, status: RankStatus) -> None:
        # The rank's log file gets a line per step of its life beside its stderr
        # (``ranklog``): a clean run's stderr is empty, and its log would say nothing.
        try:
            journal: TextIO | None = open(  # noqa: SIM115  # closed below, as stdout ends
                self.rank_log(status.rank), "a", encoding="utf-8", buffering=1
            )
        except OSError:
            journal = None
        try:
            for line in proc.stdout_lines():
                event = p.parse_event(line)
                if event is None:
                    status.log.append(line.rstrip())
                    _journal(journal, line.rstrip("\n"))
                    continue
                _journal(journal, journal_line(event))
                self._on_event(status, event)
        finally:
            if journal is not None:
                journal.close()
        status.exited_at = status.exited_at or time.monotonic()

    def _read_log(self, proc: RankProcess, status: RankStatus) -> None:
        for line in proc.stderr_lines():
            line = line.rstrip("\n")
            status.log.append(line)
            self.log.emit(status.rank, line)

    def _on_event(self, status: RankStatus, event: p.Event) -> None:
        with self._lock:
            status.last_seen = time.monotonic()
            if event["event"] in (p.LOADING, p.HEARTBEAT) and not status.loaded:
                # The later of the two: a heartbeat may carry the stage it read just before.
                stage = loading_stage(event.get("stage"), status.stage)
                status.stage = max(stage, status.stage, key=lambda s: s.step)
                self._join_when_all_are_up()
            elif event["event"] == p.LOADED:
                status.loaded, status.stage = True, LoadingStage.SYNCHRONISING
                status.loaded_event = event  # for who follows the job from later on
            elif event["event"] == p.ERROR and event["fatal"]:
                status.error = event["message"]
            elif event["event"] == p.ERROR and event.get("request"):
                self._answered(event)  # that request failed; the job lives on
            elif event["event"] == p.TRAIN:
                status.activity = TRAINING
            elif event["event"] == p.STOPPED:
                status.ended = True
            elif event["event"] == p.READY:
                self._ready.set()
                if self.state == JobState.LOADING:
                    self._set_state(JobState.READY, "ready")
        self.event.emit(event)
        if event["event"] in (p.DONE, p.LINK_TEST):
            # After the event: whoever sees the job READY again has seen the answer's end.
            self._answered(event)

    def _join_when_all_are_up(self) -> None:
        """Tell every rank to join the group once all of them wait to (the caller holds
        the lock). MLX's init blocks with the GIL held, so a rank in it cannot beat:
        joining only when all are up keeps that silence short, and a rank that hangs
        before it is then the only one silent."""
        if self._joined or self.spec.nodes < 2 or len(self.ranks) < self.spec.nodes:
            return
        if all(s.stage.step >= LoadingStage.JOINING.step for s in self.ranks):
            self._joined = True
            self._send_all(p.encode_command(p.OP_JOIN))

    def _answered(self, event: p.Done | p.LinkTest | p.Error) -> None:
        request = event.get("request", "")
        with self._done_cond:
            self._done[request] = event
            if len(self._done) > 256:  # keep only recent answers
                self._done.pop(next(iter(self._done)))
            self._pending.discard(request)
            if not self._pending:
                for status in self.ranks:
                    status.activity = SERVING
            if not self._pending and self.state == JobState.GENERATING:
                self._set_state(JobState.READY, "ready")
            self._done_cond.notify_all()

    # -- failure detection --

    def _monitor(self) -> None:
        while not self._finished.is_set():
            time.sleep(0.1)
            with self._lock:
                if self.state in (JobState.STOPPING,) or self.state.finished:
                    continue
                problem = self._find_problem()
                ended = problem is None and self._ended_by_themselves()
            if ended:
                self._end_all()
                self._finish(JobState.STOPPED, "finished")
                continue
            if problem is None:
                continue
            if self._bind_failed() and self._attempt <= self.spec.bind_retries:
                self._relaunch()
                continue
            time.sleep(KNOCK_ON_S)  # let a crash's knock-on exits arrive, then blame the first
            self._fail(self._diagnose() or problem)

    def _find_problem(self) -> str | None:
        """A rank that exited, else the one silent longest past its limit (a rank waiting
        on a hung peer may fall silent too, but later: it beat until it had to wait)."""
        now = time.monotonic()
        for proc, status in zip(self._procs, self.ranks, strict=True):
            code = proc.poll()
            if code is not None:
                if self._finished_task(status, code) or self._still_reading(status, code):
                    continue
                _record_exit(proc, status, code, now)
                return exit_message(status)
        silent = [
            status
            for status in self.ranks
            if not status.ended
            and now - status.last_seen
            > (self.spec.watchdog_s if status.loaded else self.spec.load_timeout_s)
        ]
        if not silent:
            return None
        status = min(silent, key=lambda s: (s.last_seen, s.rank))
        return silence_message(status, now - status.last_seen)

    def _finished_task(self, status: RankStatus, code: int) -> bool:
        """A job that ends by itself (a fine-tune, once trained or stopped): this rank
        said ``stopped`` and exited cleanly; not a failure."""
        return self.spec.task is Task.FINETUNE and code == 0 and status.ended

    def _still_reading(self, status: RankStatus, code: int) -> bool:
        """A clean exit whose last events (``stopped``) may not have been read yet."""
        return self.spec.task is Task.FINETUNE and code == 0 and status.exited_at is None

    def _ended_by_themselves(self) -> bool:
        """Every rank of a job that ends by itself has (the caller holds the lock)."""
        if self.spec.task is not Task.FINETUNE or len(self._procs) < self.spec.nodes:
            return False
        return all(
            (code := proc.poll()) is not None and self._finished_task(status, code)
            for proc, status in zip(self._procs, self.ranks, strict=True)
        )

    def send_stop(self) -> bool:
        """Ask every rank to stop, leaving the ranks to end by themselves (a fine-tune's
        ranks agree on an iteration, save, and exit: the job then finishes STOPPED).
        False when the job is not running."""
        with self._lock:
            if self.state.finished or self.state in (JobState.STARTING, JobState.STOPPING):
                return False
            self._send_all(p.encode_command(p.OP_STOP))
            return True

    def _diagnose(self) -> str | None:
        """The root cause among exited ranks: killed first, then silent crashes, then errors."""
        for proc, status in zip(self._procs, self.ranks, strict=True):
            code = proc.poll()
            if code is not None and status.exit_code is None:
                _record_exit(proc, status, code, time.monotonic())
        exited = [s for s in self.ranks if s.exit_code is not None]
        if not exited:
            return None
        return exit_message(min(exited, key=blame_order))

    def _bind_failed(self) -> bool:
        return any(
            BIND_FAILURE in (s.error or "") or any(BIND_FAILURE in line for line in s.log)
            for s in self.ranks
        )

    def _relaunch(self) -> None:
        self._end_all()
        with self._lock:
            if self.state.finished or self.state == JobState.STOPPING:
                return
            try:
                self._launch()
                return
            except SSHError as exc:
                failure = str(exc)
        self._fail(failure)

    def _fail(self, message: str) -> None:
        with self._lock:
            if self.state.finished or self.state == JobState.STOPPING:
                return
            self.message = message
        self._end_all()
        self._finish(JobState.FAILED, message)

    def _end_all(self) -> None:
        """End every rank within END_WITHIN_S, however it hangs (see there)."""
        procs = list(self._procs)
        grace_until = time.monotonic() + TERM_GRACE_S
        # In parallel: a remote rank's signal takes a round trip (or SIGNAL_WITHIN_S).
        _each(procs, "terminate", SIGNAL_WITHIN_S)
        while time.monotonic() < grace_until and any(pr.poll() is None for pr in procs):
            time.sleep(0.05)
        _each([pr for pr in procs if pr.poll() is None], "kill", SIGNAL_WITHIN_S + REAP_S)
        for proc in procs:
            proc.close()
        # The readers end at the ranks' EOF: wait for them, so every log line is written.
        readers_until = time.monotonic() + READERS_S
        for thread in self._threads:
            if thread is not threading.current_thread():  # stop() called from an event slot
                thread.join(timeout=max(0.0, readers_until - time.monotonic()))
        self._threads = [thread for thread in self._threads if thread.is_alive()]

    def _finish(self, state: JobState, message: str) -> None:
        with self._lock:
            if self.state.finished:
                return
            self._set_state(state, message)
            self._finished.set()
            self._done_cond.notify_all()
        self._close_connections()

    def _close_connections(self) -> None:
        with self._lock:
            connections = dict(self._connections)
            self._connections.clear()
            job_dirs, self._job_dirs = self._job_dirs, {}
        # A rank ended by a signal leaves its folder: every node's go, in parallel.
        cleaners = [
            threading.Thread(target=clean_job_dirs, args=(connections[key], dirs), daemon=True)
            for key, dirs in job_dirs.items()
            if key in connections
        ]
        for thread in cleaners:
            thread.start()
        for thread in cleaners:
            thread.join()
        for connection in connections.values():
            connection.close()

    def _set_state(self, state: JobState, message: str) -> None:
        self.state = state
        self.message = message
        self.state_changed.emit(state.value, message)

    # -- introspection --

    def rank_log(self, rank: int) -> Path:
        return self.run_dir / f"rank{rank}.log"


def _journal(journal: TextIO | None, line: str | None) -> None:
    if journal is not None and line:
        with contextlib.suppress(OSError, ValueError):
            journal.write(line + "\n")


def _record_exit(proc: RankProcess, status: RankStatus, code: int, now: float) -> None:
    status.exit_code = code
    status.exited_at = status.exited_at or now
    if proc.exit_reason and not status.error:
        status.error = f"{status.named()} {proc.exit_reason} while {status.doing}"


def _node_key(target: Target) -> NodeKey:
    """Ranks on one node with one Python share a connection and a prepared worker."""
    return (target.host, target.port, target.user, target.interpreter, target.cache_root)


def _each(procs: list[RankProcess], method: str, within: float) -> None:
    """Call ``method`` on every rank at once; wait for them at most ``within`` seconds
    (each bounds itself: a late one finishes on its own daemon thread)."""
    threads = [threading.Thread(target=getattr(proc, method), daemon=True) for proc in procs]
    for thread in threads:
        thread.start()
    until = time.monotonic() + within
    for thread in threads:
        thread.join(timeout=max(0.0, until - time.monotonic()))


def _new_run_dir() -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in itertools.count():
        run_dir = paths.log_dir() / "runs" / (f"{stamp}" if n == 0 else f"{stamp}-{n}")
        try:
            run_dir.mkdir(parents=True)
            return run_dir
        except FileExistsError:
            continue
    raise AssertionError("unreachable")
