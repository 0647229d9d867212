"""One Start as the window sees it: start, ask, stop, fail, in plain Qt signals.

The work is a ``core.run.session.Session``, the same object ``macmesh run`` and ``macmesh
demo --headless`` drive: its steps (on real Macs: probe what the scanner has not probed
lately, plan, the checks, the copy of what is missing; then the job) run as one task of a
``gui.task_runner.TaskRunner`` (busy, the stale guard, a failure in one line, the checks'
report and the copy's progress on the GUI thread), on its serial queue, so a Stop pressed
during loading runs right after the Start that spawned the ranks and no rank escapes. The
session's states and events reach this object through ``gui.bridge.JobRelay`` (in the
order they happened); this object turns its states into words. A failed check ends in
NOT_READY with the report shown and Start available; Stop during the copy keeps what
arrived and the next Start resumes it. The chat history is kept here so every prompt is
sent with the prior turns (a conversation, not isolated questions).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from core import units
from core.model.info import ModelInfo
from core.plan.planner import Plan
from core.run.states import RunState, Step
from core.worker import protocol as p
from core.worker.vocab import Backend, LoadingStage
from gui.bridge import Bridge, JobRelay
from gui.run.progress import STAGE_WORDS, STEPS
from gui.task_runner import TaskRunner

if TYPE_CHECKING:
    from core.run.checks.report import PreflightReport
    from core.run.job.launcher import Job, JobSpec
    from core.run.measure.history import RunRecord
    from core.run.measure.telemetry import Telemetry
    from core.run.session import Host, Session
    from core.run.tasks.adapter_payload import AdapterPayload
    from core.run.tasks.watch import Watch

__all__ = ["STEPS", "RunController", "RunState"]

log = logging.getLogger(__name__)

MAX_AVERAGES = 256
# What could not be done, by the step that failed (the session says why).
FAILED_STEP = {
    Step.PROBE: "The Macs could not be probed",
    Step.PLAN: "The plan cannot run on these Macs",
    Step.PREFLIGHT: "The checks could not run",
    Step.COPY: "The model could not be copied",
    Step.LAUNCH: "The job could not be prepared",
}


class RunController(QObject):
    state_changed = Signal(str, str)  # RunState value, message for people
    rank_progress = Signal(int, str, int)  # rank, what it is doing, step of STEPS
    question = Signal(str)  # a prompt was sent (or queued until the model is loaded)
    token = Signal(str, str)  # request id, text piece
    answer_done = Signal(str, object)  # request id, its AnswerFigures (telemetry)
    failed = Signal(str, list)  # the launcher's message, [(rank, log path)]
    preflight_done = Signal(object)  # core.run.checks.report.PreflightReport
    copy_progress = Signal(object)  # core.remote.modelcopy.CopyProgress
    setup_failed = Signal(str)  # the checks or the copy could not run: why, and what to do
    recorded = Signal(object)  # a run was kept in the history: its RunRecord
    links_tested = Signal(object)  # core.run.tasks.linktest.LinkTest
    links_failed = Signal(str)  # why the link test could not run
    link_progress = Signal(dict)  # a link test's step done: its p.LinkProgress event
    api_asked = Signal(str, str, str)  # request id, the API client who asked it, its question

    def __init__(
        self,
        bridge: Bridge,
        job_factory: Callable[[JobSpec], Job] | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._bridge = bridge
        # Start's task: session.start (True once the ranks are starting; False when a check
        # failed or Stop came first). The job's own states come through the relay.
        self._starter: TaskRunner[bool] = TaskRunner(bridge, parent=self)
        self._starter.checked.connect(self._checked)
        self._starter.copy_progress.connect(self.copy_progress.emit)
        self._starter.failed.connect(self._start_error)
        self._queue = self._starter.queue  # asks, link tests and Stop queue behind Start
        self._job_factory = job_factory
        self.state = RunState.IDLE
        self.session: Session | None = None
        self.telemetry: Telemetry | None = None
        self.relay: JobRelay | None = None
        self.info: ModelInfo | None = None
        self.plan: Plan | None = None
        self.report: PreflightReport | None = None
        self.backend = Backend.AUTO  # for real Macs: auto, jaccl, jaccl-ring or ring
        self.adapter: Path | None = None  # a fine-tuned adapter applied to the model
        self.t0 = time.monotonic()
        self.averages: list[tuple[float, float, float]] = []  # (start, end, tokens/s)
        self._history: list[dict[str, str]] = []
        self._pending: tuple[str, int] | None = None
        self._first_token: dict[str, float] = {}
        self.testing_links = False
        self.link_scale = 1.0  # the bytes moved at each size (tests shrink it)
        self._answering: str | None = None  # the request whose answer streams now
        self._stop_when_sent = False
        self._api: dict[str, str] = {}  # requests asked through the API → who asked

    @property
    def job(self) -> Job | None:
        """The session's job once launched (``core.run.job.launcher.Job``), else None."""
        return self.session.job if self.session is not None else None

    def launch_session(self, info: ModelInfo, plan: Plan, hosts: Sequence[Host] | None) -> Session:
        """The session whose equivalent mlx.launch the window shows for ``plan``: the one
        that ran it, whose checks know each node's copy, else one made for it and not
        started (a ``core.run.session.Session``). ClusterError when a Mac of the plan is not
        ready; ValueError when the adapter does not fit the model."""
        from core.run.session import Host, Session
        from core.run.tasks.adapter_payload import adapter_payloads

        session = self.session
        if session is not None and session.plan == plan and session.info.path == info.path:
            return session
        chosen = list(hosts) if hosts is not None else [Host(name) for name in plan.nodes_used]
        payloads = adapter_payloads(info, self.adapter)
        return Session(info, chosen, plan=plan, backend=self.backend, payloads=payloads)

    def adapter_applied(self) -> AdapterPayload | None:
        """The adapter the session applies to the model (``AdapterPayload``), if any."""
        if self.session is None:
            return None
        from core.run.tasks.adapter_payload import AdapterPayload  # paramiko: at a Start

        return self.session.payload_of(AdapterPayload)

    # -- commands -------------------------------------------------------------------------

    def start(
        self,
        info: ModelInfo,
        plan: Plan,
        hosts: Sequence[Host] | None = None,
        verify: bool = False,
        reprobe: bool = False,
    ) -> None:
        """Run ``plan``: on the demo's simulated Macs (``hosts`` None: the plan's nodes),
        or on real Macs after the checks (``verify``: every model file hashed there;
        ``reprobe``: every Mac asked again, e.g. after a network change) and the copy."""
        if self.state.active:
            return
        self._detach()
        from core.run.errors import ClusterError
        from core.run.measure.telemetry import Telemetry
        from core.run.session import Host, Session  # numpy...: at the first Start
        from core.run.tasks.adapter_payload import adapter_payloads
        from core.run.tasks.watch import Phase
        from core.settings import load_settings

        chosen = list(hosts) if hosts is not None else [Host(name) for name in plan.nodes_used]
        self.info, self.plan, self.report = info, plan, None
        try:
            session = Session(
                info,
                chosen,
                plan=plan,
                backend=self.backend,
                job_factory=self._job_factory,
                verify=verify,
                model_source=load_settings().model_source,  # Hub or this Mac (issue 13)
                payloads=adapter_payloads(info, self.adapter),
            )
        except ClusterError as error:
            self.session = None
            self._not_ready(str(error))
            return
        except ValueError as error:  # the adapter does not fit the model: one line
            if self.adapter is None:
                raise
            self.session = None
            self._not_ready(str(error))
            return
        self.session = session
        self.telemetry = Telemetry()
        self.relay = JobRelay(session, self.telemetry, self)
        self.relay.event.connect(self._on_event)
        self.relay.state_changed.connect(
            lambda state, detail: self._on_session_state(session, state, detail)
        )
        self.t0 = time.monotonic()
        self.averages = []
        self._history = []
        self._pending = None
        self._first_token = {}
        if session.demo:
            self._loading()
        else:
            count = len(plan.nodes_used)
            self._set_state(RunState.CHECKING, f"Checking {count} Mac{'s' * (count != 1)}…")
        # The session holds this controller while it lives: its job's reader threads may
        # outlive the caller's last reference, and a QObject collected while they still
        # deliver to it (the relay is its child) crashes Qt. psygnal holds a lambda strongly.
        session.checked.connect(lambda _report: self.state)
        self._starter.forget()  # a Start still ending after a Stop: this one queues behind

        def work(watch: Watch) -> bool:
            watch(session, Phase.RUN)
            return session.start(reprobe=reprobe)

        self._starter.run(work, "")

    def stop(self) -> None:
        """Stop at any moment: a step in progress ends at its next boundary (a copy keeps
        what arrived), the ranks end on the serial queue, off the GUI thread."""
        session = self.session
        if not self.state.active or self.state == RunState.STOPPING or session is None:
            return
        self._pending = None
        words = {
            RunState.CHECKING: "Stopping the checks…",
            RunState.COPYING: "Stopping the copy…",
        }.get(self.state, "Stopping every rank…")
        session.cancel()
        self._set_state(RunState.STOPPING, words)
        self._starter.stop_behind(session.stop, lambda line: self._stop_failed(session, line))

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

    def test_links(self) -> bool:
        """Measure every link of the running job (``core.run.tasks.linktest``), off the GUI
        thread on the job's queue; ``links_tested`` then, and a "linktest" run kept.
        Only while the cluster is ready (not answering): False otherwise."""
        session = self.session
        if session is None or self.state != RunState.READY or self.testing_links:
            return False
        from core.run.tasks.linktest import LinkTest, LinkTestStopped, measure_links

        self.testing_links = True
        scale = self.link_scale
        self._set_state(RunState.GENERATING, "Testing the links, 4 KiB to 64 MiB…")

        def done(tested: LinkTest) -> None:
            self.testing_links = False
            if tested.not_kept:
                self._bridge.failed.emit(tested.not_kept)
            if session is self.session and self.state == RunState.GENERATING:
                count = len(tested.results)
                self._set_state(
                    RunState.READY, f"Link test done: {count} link{'s' * (count != 1)} measured."
                )
            self.links_tested.emit(tested)

        def failed(error: BaseException) -> None:
            self.testing_links = False
            failed = not isinstance(error, LinkTestStopped)
            message = (f"The link test failed: {error}" if failed else str(error)).splitlines()[0]
            if session is self.session and self.state == RunState.GENERATING:
                self._set_state(RunState.READY, message)
            self.links_failed.emit(message)

        self._bridge.run_in_background(
            lambda: measure_links(session, scale), done, failed, queue=self._queue
        )
        return True

    def stop_answer(self) -> bool:
        """End the answer streaming now at its next token; the job stays READY. False
        when no answer is streaming (one about to be sent is stopped once it is)."""
        session = self.session
        if self.state != RunState.GENERATING or session is None:
            return False
        request = self._answering
        if request is None:  # sent, its id not back yet: stop it once it is
            self._stop_when_sent = True
            return True
        self._bridge.run_in_background(
            lambda: session.cancel_answer(request), None, self._stop_answer_failed
        )
        return True

    def api_request(self, request: str, started: float, client: str, question: str = "") -> None:
        """A request the API sent to this session (GUI thread): its question and answer
        stream into the chat under who asked, and into the plots like a chat answer (the
        API keeps it in the history: ``core.serve.records``)."""
        if self.telemetry is not None:
            self.telemetry.request_started(request, started)
        self._api[request] = client
        self._answering = request
        self.api_asked.emit(request, client, question)

    def _stop_answer_failed(self, error: BaseException) -> None:
        log.warning("the answer could not be stopped: %s", error)

    def shutdown(self, timeout_s: float = 15.0) -> None:
        """Synchronous stop, for quitting: wait for queued work, then end every rank."""
        session = self.session
        if session is not None:
            session.cancel()
        self._bridge.wait(timeout_s)
        if session is not None and self.state.active:
            session.stop()
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

    # -- the session's news, on the GUI thread ------------------------------------------

    def _on_session_state(self, session: Session, value: str, detail: str) -> None:
        if session is not self.session or not self.state.active:
            return
        state = RunState(value)
        if self.state == RunState.STOPPING and state not in (RunState.STOPPED, RunState.FAILED):
            return
        if state == RunState.CHECKING:
            count = len(self.plan.nodes_used) if self.plan else 0
            self._set_state(state, f"Checking {count} Mac{'s' * (count != 1)}…")
        elif state == RunState.COPYING:
            names = ", ".join(self.report.copies_needed) if self.report else "the Macs"
            model = self.info.name if self.info else "the model"
            self._set_state(state, f"Copying {model} to {names}…")
        elif state == RunState.NOT_READY:
            if session.report is not None and not session.report.ok:
                self._checks_failed()  # the checks view shows each fix
            elif detail:
                what = FAILED_STEP.get(session.step) if session.step else None
                self._not_ready(f"{what}: {detail}" if what else detail)
        elif state == RunState.LOADING:
            if self.state != RunState.LOADING:
                self._loading()
        elif self.testing_links and state in (RunState.READY, RunState.GENERATING):
            return  # the link test says when it is done
        elif state == RunState.READY:
            self._set_state(state, "Ready: ask the cluster something.")
            if self._pending is not None:
                prompt, max_tokens = self._pending
                self._pending = None
                self._send(prompt, max_tokens)
        elif state == RunState.GENERATING:
            self._set_state(state, "Generating…")
        elif state == RunState.STOPPING:
            self._set_state(state, "Stopping every rank…")
        elif state == RunState.STOPPED:
            self._set_state(state, self._stopped_words(session))
        elif state == RunState.FAILED:
            self._fail(detail)

    def _checked(self, report: PreflightReport) -> None:
        self.report = report  # the runner's stale guard: the session of this Start
        self.preflight_done.emit(report)

    def _checks_failed(self) -> None:
        failed = len(self.report.failures) if self.report else 0  # shown with their fixes
        self._set_state(
            RunState.NOT_READY,
            f"Not ready: {failed} check{'s' * (failed != 1)} failed. Fix "
            f"{'them' if failed != 1 else 'it'} as shown, then press Start again.",
        )

    def _loading(self) -> None:
        count = len(self.plan.ranks) if self.plan else 0
        macs = f"{count} Macs" if count > 1 else "1 Mac"
        model = self.info.name if self.info else "the model"
        adapter = self.adapter_applied()
        if adapter is not None:
            model += f" with the adapter {adapter.path.name}"
        self._set_state(RunState.LOADING, f"Loading {model} on {macs}…")
        for rank in range(count):
            self.rank_progress.emit(rank, "starting", 0)

    @staticmethod
    def _stopped_words(session: Session) -> str:
        if session.job is not None:
            return "Stopped."
        if session.step == Step.COPY:
            if Step.COPY in session.completed:
                return "Stopped. The model is on every Mac now."
            return "Copy stopped. What arrived is kept: the next Start continues from there."
        return "Stopped before anything was started."

    def _start_error(self, detail: str) -> None:
        """``session.start`` raised (``detail``: why, in one line): the session said why
        (NOT_READY or FAILED) unless the error is not one it knows; say it then, never
        crash."""
        session = self.session
        if session is None or not self.state.active:
            return
        if self.state == RunState.STOPPING:
            self._set_state(RunState.STOPPED, self._stopped_words(session))
            return
        what = FAILED_STEP.get(session.step) if session.step else None
        self._not_ready(f"{what}: {detail}" if what else detail)

    def _stop_failed(self, session: Session, line: str) -> None:
        if session is self.session and self.state != RunState.FAILED:
            self._set_state(RunState.STOPPED, f"Stopped, with a problem: {line}")

    def _not_ready(self, message: str) -> None:
        self._set_state(RunState.NOT_READY, message.splitlines()[0])
        self.setup_failed.emit(message)

    # -- internals -------------------------------------------------------------------------

    def _send(self, prompt: str, max_tokens: int) -> None:
        self._history.append({"role": "user", "content": prompt})
        messages = list(self._history)
        session, telemetry = self.session, self.telemetry
        assert session is not None and telemetry is not None
        self._set_state(RunState.GENERATING, "Generating…")

        def send() -> str:
            started = time.monotonic()
            request = session.ask(messages=messages, max_tokens=max_tokens)
            telemetry.request_started(request, started)
            return request

        self._answering, self._stop_when_sent = None, False
        self._bridge.run_in_background(send, self._sent, self._ask_failed, queue=self._queue)

    def _sent(self, request: str) -> None:
        if self.state != RunState.GENERATING:
            return
        self._answering = request
        if self._stop_when_sent:
            self._stop_when_sent = False
            self.stop_answer()

    def _ask_failed(self, error: BaseException) -> None:
        if self.state == RunState.GENERATING:
            self._history.pop()
            self._set_state(RunState.READY, f"The prompt was not sent: {error}")

    def _on_event(self, event: p.Event) -> None:
        rank = event["rank"]
        if event["event"] == p.TOKEN and rank == 0:
            request = event["request"]
            self._first_token.setdefault(request, time.monotonic())
            self.token.emit(request, event["text"])
        elif event["event"] == p.DONE and rank == 0:
            self._answered(event)
        elif event["event"] == p.LINK_PROGRESS and event["rank"] == 0 and self.testing_links:
            self.link_progress.emit(event)
        elif event["event"] == p.HELLO:
            self.rank_progress.emit(rank, "joined the cluster", LoadingStage.JOINING.step)
        elif event["event"] == p.LOADING:
            if event["stage"] in STAGE_WORDS:
                stage = LoadingStage(event["stage"])
                self.rank_progress.emit(rank, STAGE_WORDS[stage], stage.step)
        elif event["event"] == p.LOADED:
            size = f" · {units.size(event['memory_bytes'])}"
            done = f"loaded in {event['load_s']:.1f} s{size}"
            self.rank_progress.emit(rank, done, LoadingStage.SYNCHRONISING.step)
        elif event["event"] == p.READY and self.job is not None:
            for each in range(self.job.spec.nodes):
                self.rank_progress.emit(each, "ready", STEPS)

    def _answered(self, event: p.Done) -> None:
        request = event["request"]
        if request == self._answering:
            self._answering = None
        from_api = self._api.pop(request, None) is not None
        if not from_api:  # an API answer is not the chat's turn
            self._history.append({"role": "assistant", "content": event["text"]})
        from core.run.measure.telemetry import answer_figures

        summary = next(
            (r for r in (self.telemetry.requests() if self.telemetry else []) if r.id == request),
            None,
        )
        figures = answer_figures(event, summary)  # the numbers every surface shows
        start = self._first_token.pop(request, None)
        tps = figures.generation_tps
        if tps and start is not None:
            self.averages.append((start - self.t0, time.monotonic() - self.t0, tps))
            del self.averages[:-MAX_AVERAGES]
        self.answer_done.emit(request, figures)
        if not from_api:  # the API keeps its own answers (core.serve.records)
            self._keep_answer(event)

    def _keep_answer(self, event: p.Done) -> None:
        """The answer joins the run history as the chat task keeps one; the write
        happens off the GUI thread, a failure is one line in the status."""
        from core.run.tasks.chat import keep_answer

        session, telemetry, began = self.session, self.telemetry, self.t0
        if session is None or telemetry is None:
            return
        done_at = time.monotonic()

        def kept(outcome: tuple[RunRecord, str | None]) -> None:
            record, problem = outcome
            if problem:
                self._bridge.failed.emit(problem)
            else:
                self.recorded.emit(record)

        self._bridge.run_in_background(
            lambda: keep_answer(session, event, telemetry, began, done_at=done_at), kept
        )

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
