"""One job's life as the window sees it: start, ask, stop, fail, in plain Qt signals.

Everything blocking (starting ranks, sending a prompt, stopping) runs on one serial queue
of the bridge, in order: a Stop pressed during loading runs right after the Start that
spawned the ranks, so no rank escapes. On real Macs (``targets``) Start first runs
``core.run.session``'s steps on that queue: the checks (their report is shown; a
failed check ends in NOT_READY, Start stays available), then the copy of what is missing
(per-node progress; Stop cancels it and the next Start resumes it), then the job. The
job's own threads reach this object only through ``gui.bridge.JobRelay``. The chat
history is kept here so every prompt is sent with the prior turns (a conversation, not
isolated questions).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from core import units
from core.model.info import ModelInfo
from core.plan.planner import Plan
from core.worker import protocol as p
from core.worker.vocab import LoadingStage
from gui.bridge import Bridge, JobRelay
from gui.run.progress import STAGE_WORDS, STEPS

if TYPE_CHECKING:
    from core.remote.modelcopy import CopyProgress
    from core.remote.targets import Target
    from core.run.launcher import JobSpec
    from core.run.preflight import PreflightReport
    from core.run.session import ClusterSession
    from core.run.telemetry import Telemetry

log = logging.getLogger(__name__)

MAX_AVERAGES = 256


class RunState(StrEnum):
    IDLE = "idle"
    CHECKING = "checking"  # preflight on real Macs
    COPYING = "copying"  # the model to the Macs that lack it
    NOT_READY = "not-ready"  # a check failed (or the copy did): nothing was started
    LOADING = "loading"  # includes starting the ranks
    READY = "ready"
    GENERATING = "generating"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"

    @property
    def active(self) -> bool:
        """A job exists and may still hold ranks."""
        return self in (
            RunState.CHECKING,
            RunState.COPYING,
            RunState.LOADING,
            RunState.READY,
            RunState.GENERATING,
            RunState.STOPPING,
        )


class RunController(QObject):
    state_changed = Signal(str, str)  # RunState value, message for people
    rank_progress = Signal(int, str, int)  # rank, what it is doing, step of STEPS
    question = Signal(str)  # a prompt was sent (or queued until the model is loaded)
    token = Signal(str, str)  # request id, text piece
    answer_done = Signal(str, object)  # request id, the done event
    failed = Signal(str, list)  # the launcher's message, [(rank, log path)]
    preflight_done = Signal(object)  # core.run.preflight.PreflightReport
    copy_progress = Signal(object)  # core.remote.modelcopy.CopyProgress
    setup_failed = Signal(str)  # the checks or the copy could not run: why, and what to do

    def __init__(
        self,
        bridge: Bridge,
        job_factory: Callable[[JobSpec], Any] | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._bridge = bridge
        self._queue = bridge.serial_queue()
        self._job_factory = job_factory
        self.state = RunState.IDLE
        self.job: Any = None
        self.telemetry: Telemetry | None = None
        self.relay: JobRelay | None = None
        self.plan: Plan | None = None
        self.session: ClusterSession | None = None
        self.report: PreflightReport | None = None
        self.backend = "auto"  # for real Macs: auto, jaccl, jaccl-ring or ring
        self.t0 = time.monotonic()
        self.averages: list[tuple[float, float, float]] = []  # (start, end, tokens/s)
        self._history: list[dict[str, str]] = []
        self._pending: tuple[str, int] | None = None
        self._first_token: dict[str, float] = {}

    # -- commands -------------------------------------------------------------------------

    def start(self, info: ModelInfo, plan: Plan, targets: Sequence[Target] | None = None) -> None:
        """Run ``plan``: on the demo's local ranks, or on ``targets`` (real Macs) after
        the checks and the copy."""
        if self.state.active:
            return
        self._detach()
        if targets is not None:
            self._start_cluster(info, plan, targets)
            return
        from core.run.demo import job_spec  # the launcher, numpy...: loaded at the first Start

        self.session = self.report = None
        self._run(info, plan, job_spec(info, plan))

    def _run(self, info: ModelInfo, plan: Plan, spec: JobSpec) -> None:
        from core.run.launcher import Job
        from core.run.telemetry import Telemetry

        self.plan = plan
        self.job = job = (self._job_factory or Job)(spec)
        self.telemetry = Telemetry()
        self.relay = JobRelay(job, self.telemetry, self)
        self.relay.event.connect(self._on_event)
        self.relay.state_changed.connect(self._on_job_state)
        self.t0 = time.monotonic()
        self.averages = []
        self._history = []
        self._pending = None
        self._first_token = {}
        macs = f"{spec.nodes} Macs" if spec.nodes > 1 else "1 Mac"
        self._set_state(RunState.LOADING, f"Loading {info.name} on {macs}…")
        for status_rank in range(spec.nodes):
            self.rank_progress.emit(status_rank, "starting", 0)
        self._bridge.run_in_background(
            job.start, None, lambda e: self._start_failed(job, e), queue=self._queue
        )

    def stop(self) -> None:
        """Stop at any moment; the ranks end on the serial queue, off the GUI thread."""
        if not self.state.active or self.state == RunState.STOPPING:
            return
        if self.state in (RunState.CHECKING, RunState.COPYING) and self.session is not None:
            self.session.cancel()  # the step's result then ends in STOPPED
            copying = self.state == RunState.COPYING
            self._set_state(
                RunState.STOPPING, "Stopping the copy…" if copying else "Stopping the checks…"
            )
            return
        job = self.job
        self._pending = None
        self._set_state(RunState.STOPPING, "Stopping every rank…")
        self._bridge.run_in_background(
            job.stop,
            lambda _: self._stopped(job),
            lambda e: self._stopped(job, e),
            queue=self._queue,
        )

    def ask(self, prompt: str, max_tokens: int) -> bool:
        """Send ``prompt`` with the conversation so far; queued while the model loads."""
        prompt = prompt.strip()
        if not prompt:
            return False
        if self.state == RunState.LOADING and self._pending is None:
            self._pending = (prompt, max_tokens)
            self.question.emit(prompt)
            return True
        if self.state != RunState.READY:
            return False
        self.question.emit(prompt)
        self._send(prompt, max_tokens)
        return True

    def shutdown(self, timeout_s: float = 15.0) -> None:
        """Synchronous stop, for quitting: wait for queued work, then end every rank."""
        if self.session is not None:
            self.session.cancel()
        self._bridge.wait(timeout_s)
        job = self.job
        if job is not None and self.state.active:
            job.stop()
        self._detach()

    # -- reading -------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """Counts telemetry updates, so redraws can skip quiet ticks."""
        return self.relay.version if self.relay else 0

    def rank_names(self) -> dict[int, str]:
        return {rank.rank: rank.node for rank in self.plan.ranks} if self.plan else {}

    def rank_logs(self) -> list[tuple[int, Path]]:
        job = self.job
        if job is None:
            return []
        return [(rank, job.rank_log(rank)) for rank in range(job.spec.nodes)]

    # -- real Macs: checks, copy, then the job -------------------------------------------

    def _start_cluster(self, info: ModelInfo, plan: Plan, targets: Sequence[Target]) -> None:
        from core.run.session import ClusterError, ClusterSession

        self.plan, self.job, self.report = plan, None, None
        try:
            session = ClusterSession(info, plan, targets, self.backend)
        except ClusterError as error:
            self.session = None
            self._not_ready(str(error))
            return
        self.session = session
        session.progress.connect(lambda progress: self._cross(session, progress))
        count = len(plan.nodes_used)
        self._set_state(RunState.CHECKING, f"Checking {count} Mac{'s' * (count != 1)}…")
        self._bridge.run_in_background(
            session.preflight,
            lambda report: self._checked(session, info, report),
            lambda error: self._setup_error(session, "The checks could not run", error),
            queue=self._queue,
        )

    def _cross(self, session: ClusterSession, progress: CopyProgress) -> None:
        """On a copying thread: hand the progress to the GUI thread."""
        self._bridge.run_on_main(
            lambda: self.copy_progress.emit(progress) if session is self.session else None
        )

    def _checked(self, session: ClusterSession, info: ModelInfo, report: PreflightReport) -> None:
        if session is not self.session:
            return
        self.report = report
        self.preflight_done.emit(report)
        if self.state == RunState.STOPPING or session.cancelled:
            self._set_state(RunState.STOPPED, "Stopped before anything was started.")
        elif not report.ok:
            failed = len(report.failures)  # each is shown with its fix (preflight_done)
            self._set_state(
                RunState.NOT_READY,
                f"Not ready: {failed} check{'s' * (failed != 1)} failed. Fix "
                f"{'them' if failed != 1 else 'it'} as shown, then press Start again.",
            )
        elif report.copies_needed:
            names = ", ".join(report.copies_needed)
            self._set_state(RunState.COPYING, f"Copying {info.name} to {names}…")
            self._bridge.run_in_background(
                session.copy,
                lambda _results: self._copied(session, info),
                lambda error: self._copy_error(session, error),
                queue=self._queue,
            )
        else:
            self._launch(session, info)

    def _copied(self, session: ClusterSession, info: ModelInfo) -> None:
        if session is not self.session:
            return
        if self.state == RunState.STOPPING or session.cancelled:
            self._set_state(RunState.STOPPED, "Stopped. The model is on every Mac now.")
            return
        self._launch(session, info)

    def _copy_error(self, session: ClusterSession, error: BaseException) -> None:
        from core.run.session import CopyCancelled

        if session is not self.session:
            return
        if isinstance(error, CopyCancelled):
            self._set_state(
                RunState.STOPPED,
                "Copy stopped. What arrived is kept: the next Start continues from there.",
            )
            return
        self._setup_error(session, "The model could not be copied", error)

    def _launch(self, session: ClusterSession, info: ModelInfo) -> None:
        try:
            spec = session.job_spec()
        except Exception as error:  # a node's folder could not be asked: say so, never crash
            self._setup_error(session, "The job could not be prepared", error)
            return
        self._run(info, session.plan, spec)

    def _setup_error(self, session: ClusterSession, what: str, error: BaseException) -> None:
        if session is not self.session:
            return
        if self.state == RunState.STOPPING:
            self._set_state(RunState.STOPPED, "Stopped before anything was started.")
            return
        from core.run.session import ClusterError

        detail = (
            str(error) if isinstance(error, ClusterError) else f"{type(error).__name__}: {error}"
        )
        log.warning("%s: %s", what, detail)
        self._not_ready(f"{what}: {detail}")

    def _not_ready(self, message: str) -> None:
        self._set_state(RunState.NOT_READY, message.splitlines()[0])
        self.setup_failed.emit(message)

    # -- internals -------------------------------------------------------------------------

    def _send(self, prompt: str, max_tokens: int) -> None:
        self._history.append({"role": "user", "content": prompt})
        messages = list(self._history)
        job, telemetry = self.job, self.telemetry
        self._set_state(RunState.GENERATING, "Generating…")

        def send() -> str:
            started = time.monotonic()
            request = job.generate(messages=messages, max_tokens=max_tokens)
            telemetry.request_started(request, started)
            return request

        self._bridge.run_in_background(send, None, self._ask_failed, queue=self._queue)

    def _ask_failed(self, error: BaseException) -> None:
        if self.state == RunState.GENERATING:
            self._history.pop()
            self._set_state(RunState.READY, f"The prompt was not sent: {error}")

    def _on_event(self, event: dict) -> None:
        kind, rank = event.get("event"), int(event.get("rank", 0))
        if kind == p.TOKEN and rank == 0:
            request = str(event.get("request"))
            self._first_token.setdefault(request, time.monotonic())
            self.token.emit(request, str(event.get("text", "")))
        elif kind == p.DONE and rank == 0:
            self._answered(event)
        elif kind == p.HELLO:
            self.rank_progress.emit(rank, "joined the cluster", LoadingStage.JOINING.step)
        elif kind == p.LOADING:
            stage = str(event.get("stage"))
            if stage in STAGE_WORDS:
                self.rank_progress.emit(rank, STAGE_WORDS[stage], LoadingStage(stage).step)
        elif kind == p.LOADED:
            memory = event.get("memory_bytes")
            size = f" · {units.size(memory)}" if isinstance(memory, int) else ""
            done = f"loaded in {event.get('load_s', 0):.1f} s{size}"
            self.rank_progress.emit(rank, done, LoadingStage.SYNCHRONISING.step)
        elif kind == p.READY and self.job is not None:
            for each in range(self.job.spec.nodes):
                self.rank_progress.emit(each, "ready", STEPS)

    def _answered(self, event: dict) -> None:
        request = str(event.get("request"))
        self._history.append({"role": "assistant", "content": str(event.get("text", ""))})
        summary = next(
            (r for r in (self.telemetry.requests() if self.telemetry else []) if r.id == request),
            None,
        )
        start = self._first_token.pop(request, None)
        if summary and summary.avg_tps and start is not None:
            self.averages.append((start - self.t0, time.monotonic() - self.t0, summary.avg_tps))
            del self.averages[:-MAX_AVERAGES]
        self.answer_done.emit(request, event)

    def _on_job_state(self, state: str, message: str) -> None:
        if self.state in (RunState.STOPPED, RunState.FAILED):
            return
        if state == "ready":
            self._set_state(RunState.READY, "Ready: ask the cluster something.")
            if self._pending is not None:
                prompt, max_tokens = self._pending
                self._pending = None
                self._send(prompt, max_tokens)
        elif state == "generating" and self.state != RunState.STOPPING:
            self._set_state(RunState.GENERATING, "Generating…")
        elif state == "failed":
            self._fail(message)
        elif state == "stopped" and self.state == RunState.STOPPING:
            pass  # _stopped reports it once job.stop() has returned

    def _start_failed(self, job: Any, error: BaseException) -> None:
        if job is self.job and self.state.active:
            log.warning("the job did not start: %s", error)
            self._bridge.run_in_background(job.stop, None, lambda _e: None, queue=self._queue)
            self._fail(f"The ranks could not be started: {type(error).__name__}: {error}")

    def _stopped(self, job: Any, error: BaseException | None = None) -> None:
        if job is not self.job or self.state == RunState.FAILED:
            return
        message = "Stopped." if error is None else f"Stopped, with a problem: {error}"
        self._set_state(RunState.STOPPED, message)

    def _fail(self, message: str) -> None:
        self._pending = None
        self._set_state(RunState.FAILED, message.splitlines()[0] if message else "Failed")
        self.failed.emit(message, self.rank_logs())

    def _set_state(self, state: RunState, message: str) -> None:
        self.state = state
        self.state_changed.emit(state.value, message)

    def _detach(self) -> None:
        if self.relay is not None:
            self.relay.detach()
            self.relay.deleteLater()
            self.relay = None
