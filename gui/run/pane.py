"""The Run pane: Start/Stop, loading per node, failures, big numbers, chat and live plots.

On real Macs Start first shows the checks and the model copy (``preflight_view``);
"mlx.launch…" shows the equivalent command for the current plan (``launch_dialog``).

A ``QTimer`` redraws numbers and plots at ``REDRAW_HZ`` while a job runs, and only when
telemetry received something since the last tick; arriving data never redraws directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import shiboken6
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QPaintEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QPushButton,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from core.model.info import ModelInfo
from core.plan.planner import Plan
from core.run.states import RunState
from core.serve.service import ApiService
from core.serve.window_models import ServiceModels
from core.settings import MAX_TOKENS_LIMIT
from core.worker.vocab import Strategy
from gui.bridge import Bridge
from gui.model.planning import LABELS
from gui.run.api_panel import ApiPanel
from gui.run.chat import ChatView
from gui.run.cluster_source import ClusterSource
from gui.run.compare_view import CompareRunner, CompareView
from gui.run.controller import RunController
from gui.run.failure import FailureBanner
from gui.run.launch_dialog import Launch, LaunchDialog, show_launch_dialog
from gui.run.models_panel import ModelsPanel
from gui.run.numbers import BigNumbers
from gui.run.preflight_view import PreflightView, copy_line
from gui.run.progress import RankProgress
from gui.style import set_role
from gui.widgets import Badge, Card, PanelColumn, label, wheel_needs_focus

if TYPE_CHECKING:
    from pathlib import Path

    from core.remote.modelcopy import CopyProgress
    from core.run.checks.report import PreflightReport
    from core.run.job.launcher import Job, JobSpec
    from core.run.session import Host, Session
    from core.run.tasks.compare import Comparison
    from gui.run.network_dialog import NetworkChangeDialog
    from gui.run.plots import LivePlots

REDRAW_HZ = 10
COMPARE_PROMPT = "What is the capital of France?"
COMPARE_TIP = "The same prompt on one Mac, then on the cluster: tokens/s side by side"
STOP_AND_COMPARE = "Stop and compare"
COMPARE_DONE = "Compare done: kept in History. Close (or Start) brings the chat back."
STOP_AND_COMPARE_TIP = (
    "Stops the job, then compares: Compare runs the model twice on its own (one Mac, then "
    "the cluster)."
)
STATE_BADGES = {
    RunState.IDLE: ("Idle", "muted"),
    RunState.CHECKING: ("Checking", "accent"),
    RunState.COPYING: ("Copying", "accent"),
    RunState.NOT_READY: ("Not ready", "warning"),
    RunState.LOADING: ("Loading", "accent"),
    RunState.READY: ("Ready", "success"),
    RunState.GENERATING: ("Generating", "accent"),
    RunState.STOPPING: ("Stopping", "warning"),
    RunState.STOPPED: ("Stopped", "muted"),
    RunState.FAILED: ("Failed", "danger"),
}


def describe_plan(plan: Plan) -> str:
    """ "Pipeline on Studio A (18 layers) and Studio B (12 layers)"."""
    if plan.strategy == Strategy.SINGLE or len(plan.ranks) == 1:
        return f"Single Mac: {plan.ranks[0].node}, all {plan.ranks[0].layers} layers"
    if plan.strategy == Strategy.TENSOR:
        return f"Tensor on {', '.join(r.node for r in plan.ranks)}: every layer split"
    parts = [f"{r.node} ({r.layers} layers)" for r in plan.ranks]
    return f"{LABELS[plan.strategy]} on " + ", ".join(parts[:-1]) + f" and {parts[-1]}"


class RunPane(Card):
    running_changed = Signal(bool)  # a job holds ranks: the other panes lock

    def __init__(
        self,
        bridge: Bridge,
        job_factory: Callable[[JobSpec], Job] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__("Run", parent)
        self.controller = RunController(bridge, job_factory, self)
        self._info: ModelInfo | None = None
        self._plan: Plan | None = None
        self._drawn = -1
        self._running = False
        self._compare_when_stopped = False  # "Stop and compare": compare once it stops
        self._bridge = bridge
        self._source: ClusterSource | None = None
        self.launch_dialog: LaunchDialog | None = None
        self.state_badge = Badge("Idle", "muted")
        self.header.insertWidget(1, self.state_badge)
        self.body.addLayout(self._controls())
        # On a line of its own: a long status (a model's name, a reason) wraps there
        # rather than widening the button row past a 1280-pixel window.
        self.body.addWidget(self.status)
        # What comes and goes above the numbers scrolls here: it never grows the window.
        self.panels = PanelColumn()
        self.body.addWidget(self.panels)
        self.banner = FailureBanner()
        self.panels.add(self.banner)
        self.checks = PreflightView()
        self.checks.hide()
        self.panels.add(self.checks, 1)
        self.progress_box = QFrame()
        set_role(self.progress_box, "subcard")
        box = QVBoxLayout(self.progress_box)
        box.setContentsMargins(12, 10, 12, 10)
        self.progress = RankProgress()
        box.addWidget(self.progress)
        self.progress_box.hide()
        self.panels.add(self.progress_box)
        self.api = ApiService(on_sent=self._api_sent, on_calls=self._api_calls)
        self._api_queue = bridge.serial_queue()  # attach, detach, apply: in order
        self._api_session: Session | None = None  # the session the API serves
        self.api_panel = ApiPanel(self.api, bridge, self._api_queue)
        self.api_panel.setVisible(self.api.settings.enabled)
        self.api_button.setChecked(self.api.settings.enabled)
        # Every model the API serves: the job, and models dropped beside it (issue 37);
        # above the API's settings, in view while it serves.
        self.models_panel = ModelsPanel(ServiceModels(self.api), bridge)
        set_role(self.models_panel, "subcard")
        self.models_panel.hide()
        self.panels.add(self.models_panel)
        self.panels.add(self.api_panel)
        self.api.changed.connect(lambda: bridge.run_on_main(self._show_models))
        self.comparison = CompareView(headline_px=20)  # its figures in view at 1280×800
        self.comparison.hide()
        self.comparison.closed.connect(lambda: self._arrange(self.controller.state))
        self.panels.add(self.comparison)
        self.numbers = BigNumbers()
        self.body.addWidget(self.numbers)
        self.comparer = CompareRunner(bridge, job_factory, self)
        self.comparer.progress.connect(self.status.setText)
        self.comparer.busy_changed.connect(self._comparing)
        self.comparer.finished.connect(self._compared)
        self.comparer.failed.connect(self.status.setText)
        self.comparer.checked.connect(self.checks.show_report)
        self.comparer.copy_progress.connect(self._compare_copied)
        self.comparer.checks_failed.connect(self._compare_checks_failed)
        self._compare_checks = False  # a comparison's check failed: its checks view shown
        self.chat = ChatView()
        self._plots: LivePlots | None = None
        self._plots_pending = False
        self._plots_slot = QWidget()  # the plots take its place once the window is up
        split = QSplitter(Qt.Orientation.Horizontal)
        split.setChildrenCollapsible(False)
        split.addWidget(self.chat)
        split.addWidget(self._plots_slot)
        split.setStretchFactor(0, 4)
        split.setStretchFactor(1, 6)
        split.setHandleWidth(14)
        split.setSizes([400, 600])
        self.chat.setMinimumWidth(260)
        self._plots_slot.setMinimumWidth(340)
        self.splitter = split
        self.body.addWidget(split, 1)
        self.timer = QTimer(self)
        self.timer.setInterval(1000 // REDRAW_HZ)
        self.timer.timeout.connect(self.redraw)
        self.chat.submitted.connect(self.ask)
        self.chat.stop_requested.connect(self.controller.stop_answer)
        c = self.controller
        c.state_changed.connect(self._state_changed)
        c.rank_progress.connect(self.progress.set_stage)
        c.question.connect(self.chat.add_question)
        c.token.connect(self.chat.add_token)
        c.answer_done.connect(self.chat.finish_answer)
        c.api_asked.connect(
            lambda request, who, question: self.chat.add_asked(who, question, request)
        )
        c.failed.connect(self._failed)
        c.preflight_done.connect(self.checks.show_report)
        c.copy_progress.connect(self.checks.show_copy)
        c.setup_failed.connect(self.checks.show_error)
        self.checks.verify_requested.connect(self.verify)
        self.checks.change_requested.connect(self.change_network)
        self._show_state(RunState.IDLE, "")

    @property
    def plots(self) -> LivePlots:
        """The live plots, built on first use: pyqtgraph takes a good part of a second to
        import, so the window paints first and builds them right after its first frame."""
        if self._plots is None:
            from gui.run.plots import LivePlots

            self._plots = LivePlots()
            self._plots.setMinimumWidth(340)
            # no height of its own below what its three plots and headings need (its
            # layout's, as a heading's key wraps under its title or not): they would overlap
            self.splitter.replaceWidget(1, self._plots)
            self._plots_slot.deleteLater()
        return self._plots

    def paintEvent(self, event: QPaintEvent) -> None:
        super().paintEvent(event)
        if self._plots is None and not self._plots_pending:  # after the first frame
            self._plots_pending = True
            QTimer.singleShot(0, self, lambda: self.plots)

    def _controls(self) -> QHBoxLayout:
        row = QHBoxLayout()
        row.setSpacing(10)
        self.start_button = QPushButton("Start")
        set_role(self.start_button, "start")
        self.start_button.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop")
        set_role(self.stop_button, "stop")
        self.stop_button.clicked.connect(self.stop)
        self.status = label("", "status", wrap=True)
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, MAX_TOKENS_LIMIT)
        self.max_tokens.setValue(256)
        self.max_tokens.setToolTip("The longest answer, in tokens")
        wheel_needs_focus(self.max_tokens)
        row.addWidget(self.start_button)
        row.addWidget(self.stop_button)
        row.addStretch(1)
        self.compare_button = QPushButton("Compare")
        self.compare_button.setToolTip(COMPARE_TIP)
        self.compare_button.clicked.connect(self.compare)
        row.addWidget(self.compare_button)
        self.launch_button = QPushButton("mlx.launch…")
        set_role(self.launch_button, "link")
        self.launch_button.setToolTip("Show the equivalent mlx.launch command and hostfile")
        self.launch_button.clicked.connect(self.show_launch)
        row.addWidget(self.launch_button)
        self.api_button = QPushButton("API")
        set_role(self.api_button, "link")
        self.api_button.setCheckable(True)
        self.api_button.setToolTip("Use the cluster from other apps: an OpenAI-compatible API")
        self.api_button.toggled.connect(lambda shown: self.api_panel.setVisible(shown))
        self.api_button.toggled.connect(lambda _shown: self._show_models())
        row.addWidget(self.api_button)
        row.addWidget(label("Max tokens", "secondary"))
        row.addWidget(self.max_tokens)
        return row

    # -- inputs -----------------------------------------------------------------------------

    def set_plan(self, info: ModelInfo | None, plan: Plan | None) -> None:
        self._info, self._plan = info, plan
        if not self.controller.state.active:
            self._show_state(self.controller.state, "")

    def set_cluster(self, source: ClusterSource | None) -> None:
        """Where the plan's nodes are (the Cluster pane); without one every plan is local."""
        self._source = source

    def _hosts(self) -> list[Host] | None:
        """The plan's nodes (simulated or real Macs), None without a Cluster pane (the
        plan's nodes are then simulated); ValueError when one is not ready."""
        if self._source is None or self._plan is None:
            return None
        return self._source.hosts(list(self._plan.nodes_used))

    def start(self) -> None:
        self._start(verify=False)

    def verify(self) -> None:
        """Start again with every model file hashed on the Macs (the checks' Verify)."""
        self._start(verify=True)

    def change_network(self, node: str) -> NetworkChangeDialog | None:
        """The checks' Change…: the changes offered for ``node``, made with its admin
        password once; then the checks run again with every Mac asked anew."""
        from core.run.checks.netapply import apply_changes  # SSH: loaded when first needed
        from gui.run.network_dialog import NetworkChangeDialog

        session = self.controller.session
        report = self.controller.report
        if session is None or report is None:
            return None
        changes = [o for o in report.backend.offers if o.node == node]
        target = next((t for t in session.targets if t.name == node), None)
        if not changes or target is None:
            return None
        dialog = NetworkChangeDialog(
            node,
            changes,
            apply=lambda password: apply_changes(target, changes, password),
            run_in_background=self._bridge.run_in_background,
            parent=self,
        )
        dialog.accepted.connect(lambda: self._start(verify=False, reprobe=True))
        dialog.open()
        return dialog

    def _start(self, verify: bool, reprobe: bool = False) -> None:
        if self._info is None or self._plan is None or not self._plan.fits:
            return
        try:
            hosts = self._hosts()
        except ValueError as error:
            self.checks.show_checking([])
            self.checks.show_error(f"{error}\nWait until every Mac is ready, then Start.")
            self.status.setText(str(error).splitlines()[0])
            return
        self.banner.hide()
        self.checks.hide()
        self.comparison.hide()  # kept in History; the chat and plots take their room back
        if hosts is not None and not hosts[0].simulated:
            self.checks.show_checking(list(self._plan.nodes_used))
        self.chat.clear()
        self.plots.clear()
        self.numbers.clear()
        self._drawn = -1
        self.progress.reset({r.rank: r.node for r in self._plan.ranks})
        self.controller.start(self._info, self._plan, hosts, verify=verify, reprobe=reprobe)

    def launch_job(self) -> Callable[[], Launch] | None:
        """What works out the equivalent mlx.launch for the current plan, as the session
        that runs it does (it may ask a node over SSH where its cache is: run it off the GUI
        thread). None: no plan. ValueError or ClusterError when a Mac of the plan is not
        ready."""
        info, plan = self._info, self._plan
        if info is None or plan is None or not plan.fits:
            return None
        session = self.controller.launch_session(info, plan, self._hosts())
        work: Callable[[], Launch] = session.launch_command
        return work

    def show_launch(self) -> None:
        """Open the mlx.launch dialog (worked out off the GUI thread)."""
        from core.run.errors import ClusterError

        try:
            work = self.launch_job()
        except (ValueError, ClusterError) as error:
            self.status.setText(f"The mlx.launch command cannot be shown yet: {error}")
            return
        if work is None:
            return
        self.launch_button.setEnabled(False)

        def shown(launch: Launch) -> None:
            self.launch_button.setEnabled(True)
            if self.launch_dialog is not None and shiboken6.isValid(self.launch_dialog):
                self.launch_dialog.close()  # one at a time: the newest plan's
            self.launch_dialog = show_launch_dialog(launch, self.window())

        def failed(error: BaseException) -> None:
            self.launch_button.setEnabled(True)
            self.status.setText(f"The mlx.launch command cannot be shown: {error}")

        self._bridge.run_in_background(work, shown, failed)

    def stop(self) -> None:
        if self.comparer.busy:
            self.comparer.stop()
            return
        self.controller.stop()

    def stop_link_test(self, request: str) -> bool:
        """The Cables view's "Stop the test": the ranks leave it at the end of a message
        size and the job stays ready. False when that test is not running."""
        session = self.controller.session
        return bool(session is not None and session.cancel_answer(request))

    def compare(self) -> bool:
        """One Mac, then the cluster, with the chat's prompt (or the demo's question) and
        the max tokens set; the window's own job must be stopped first (it holds the
        Macs' memory)."""
        info, plan = self._info, self._plan
        if info is None or plan is None or not plan.fits or self.comparer.busy:
            return False
        if len(plan.ranks) < 2:
            self.status.setText("This plan runs on one Mac: Compare needs a plan on two or more.")
            return False
        if self.controller.state.active:  # "Stop and compare": the Macs' memory is the job's
            if self.controller.state == RunState.STOPPING:
                return False
            self._compare_when_stopped = True
            self.controller.stop()
            self.status.setText("Stopping the job, then comparing…")
            return True
        try:
            hosts = self._hosts()
        except ValueError as error:
            self.status.setText(str(error).splitlines()[0])
            return False
        prompt = self.chat.prompt.text().strip() or COMPARE_PROMPT
        self.comparison.hide()
        self._compare_checks = False
        self.comparer.start(info, plan, hosts, prompt, self.max_tokens.value())
        return True

    def _comparing(self, busy: bool) -> None:
        self._show_state(self.controller.state, "")
        if busy:
            self.start_button.setEnabled(False)
            self.stop_button.setEnabled(True)
            self.compare_button.setEnabled(False)
            self.state_badge.set("Comparing", "accent")
        if busy != self._running:
            self._running = busy
            self.running_changed.emit(busy)

    def _compare_copied(self, progress: CopyProgress) -> None:
        self.checks.show_copy(progress)
        self.status.setText(copy_line(progress))

    def _compare_checks_failed(self, report: PreflightReport) -> None:
        """A comparison stopped at a failed check: the checks view with each fix, as
        after Start."""
        self._compare_checks = True
        self.checks.show_report(report)
        self._arrange(self.controller.state)

    def _compared(self, result: Comparison) -> None:
        self.comparison.show_result(result, self.comparer.beside)
        self._arrange(self.controller.state)
        self.status.setText(COMPARE_DONE)  # the headline is the panel's, said once

    def ask(self, prompt: str) -> None:
        queued = self.controller.state == RunState.LOADING
        if self.controller.ask(prompt, self.max_tokens.value()) and queued:
            self.chat.set_accepting(False, "Your question goes out once the model is loaded…")

    def shown_plan(self) -> tuple[ModelInfo | None, Plan | None]:
        """The model and plan of the running job, else the ones Start would run."""
        c = self.controller
        if c.state.active and c.plan is not None:
            return c.info, c.plan
        return self._info, self._plan

    @property
    def busy(self) -> bool:
        return self.controller.state.active or self.comparer.busy

    # -- output ---------------------------------------------------------------------------------

    def redraw(self, force: bool = False) -> None:
        """The timer's tick: skip it unless telemetry moved since the last one was drawn
        whole (the link plot redraws every other tick: a tick that left it out leaves the
        version to draw again, or an answer's last reports would wait for the next event)."""
        c = self.controller
        if c.telemetry is None or (c.version == self._drawn and not force):
            return
        whole = self.plots.links_due()
        self.plots.refresh(c)
        self._drawn = c.version if whole else -1
        self.numbers.update_from(
            c.telemetry.current(), c.state == RunState.GENERATING, live=c.state.active
        )

    def _state_changed(self, state: str, message: str) -> None:
        self._show_state(RunState(state), message)
        self._follow_with_api(RunState(state))
        if self._compare_when_stopped and not RunState(state).active:
            self._compare_when_stopped = False
            if RunState(state) == RunState.STOPPED:  # a failure says why; no compare then
                QTimer.singleShot(0, self, self.compare)

    def _follow_with_api(self, state: RunState) -> None:
        """The API serves the job from READY until it ends."""
        session = self.controller.session
        if (
            state in (RunState.READY, RunState.GENERATING)
            and session is not None
            and self._api_session is not session
        ):
            self._api_session = session
            info = self._info
            name, context = (info.name, info.context_length) if info else ("model", None)
            self._bridge.run_in_background(
                lambda: self.api.attach(session, name, context, self.controller.telemetry),
                None,
                self._api_failed,
                queue=self._api_queue,
            )
        elif not state.active and self._api_session is not None:
            self._api_session = None
            self._bridge.run_in_background(
                self.api.detach, None, self._api_failed, queue=self._api_queue
            )

    def _api_sent(self, request: str, started: float, client: str, question: str) -> None:
        """On a pool thread: the API sent a request to the job (what its client asked). Its
        send time reaches the telemetry now (it is thread-safe), not once the GUI thread is
        free: a short answer may be done by then, and its time to first token would be the
        worker's."""
        telemetry = self.controller.telemetry
        if telemetry is not None:
            telemetry.request_started(request, started)
        self._bridge.run_on_main(
            lambda: self.controller.api_request(request, started, client, question)
        )

    def _api_calls(self, request: str, calls: list[dict[str, object]]) -> None:
        """From any thread: an API answer's tool calls, shown in the chat under it."""
        self._bridge.run_on_main(lambda: self.chat.add_calls(request, calls))

    def _show_models(self) -> None:
        """The models panel, with the API panel while the API serves."""
        shown = self.api_button.isChecked() and self.api.running
        if shown == self.models_panel.isHidden():
            self.models_panel.setVisible(shown)
            self.models_panel.refresh()

    def _api_failed(self, error: BaseException) -> None:
        self.api_panel.status.setText(f"The API stopped with a problem: {error}")

    def _show_state(self, state: RunState, message: str) -> None:
        text, kind = STATE_BADGES[state]
        testing_links = state == RunState.GENERATING and self.controller.testing_links
        if testing_links:  # not an answer: no "Generating", no "Stop this answer"
            text = "Testing links"
        self.state_badge.set(text, kind)
        can_start = (
            not state.active
            and self._info is not None
            and self._plan is not None
            and self._plan.fits
        )
        self.start_button.setEnabled(can_start)
        self.launch_button.setEnabled(
            self._info is not None and self._plan is not None and self._plan.fits
        )
        comparing = getattr(self, "comparer", None) is not None and self.comparer.busy
        stop_first = state.active and state != RunState.STOPPING and self._multi_mac_plan()
        self.compare_button.setText(STOP_AND_COMPARE if state.active else "Compare")
        self.compare_button.setEnabled((can_start or stop_first) and not comparing)
        self.compare_button.setToolTip(self._compare_tip(state, comparing))
        if comparing:
            return
        self.stop_button.setEnabled(state.active and state != RunState.STOPPING)
        self.status.setText(self._status_text(state, message))
        self._arrange(state)
        if state == RunState.LOADING:
            self.progress_box.show()
            self.chat.set_accepting(True, "Ask now: sent once loaded…")
        elif state == RunState.READY:
            self.progress_box.hide()
            self.chat.set_accepting(True, "Ask the cluster…")
        else:
            self.chat.set_accepting(False)
        self.chat.set_answering(state == RunState.GENERATING and not testing_links)
        if state.active and not self.timer.isActive():
            self.timer.start()
        elif not state.active and self.timer.isActive():
            self.timer.stop()
            self.redraw(force=True)  # the final numbers: nothing moves on the links now
        if state.active != self._running:
            self._running = state.active
            self.running_changed.emit(state.active)

    def _arrange(self, state: RunState) -> None:
        """Before a job exists the checks and the copy are the whole story: they take the
        room of the numbers, chat and plots (nothing to show there yet). Compare's result,
        shown while no job runs, takes the room of the chat and plots (idle then) rather
        than scrolling inside a strip at 1280×800; Close or Start gives it back."""
        if state.active:
            self._compare_checks = False
        setup = state in (RunState.CHECKING, RunState.COPYING, RunState.NOT_READY)
        setup = setup or self._compare_checks
        compared = not state.active and not self.comparison.isHidden()
        self.checks.setVisible(setup)
        self.numbers.setVisible(not setup)
        self.splitter.setVisible(not (setup or compared))
        self.body.setStretchFactor(self.panels, 1 if setup or compared else 0)

    def _compare_tip(self, state: RunState, comparing: bool) -> str:
        """Why Compare is greyed out, when it is (a disabled button still shows its tip)."""
        if comparing:
            return "Comparing: Stop ends it."
        if state.active:
            return STOP_AND_COMPARE_TIP
        if self._plan is not None and self._plan.fits and len(self._plan.ranks) < 2:
            return "This plan runs on one Mac: Compare needs a plan on two or more."
        return COMPARE_TIP

    def _multi_mac_plan(self) -> bool:
        plan = self._plan
        return plan is not None and plan.fits and len(plan.ranks) > 1

    def _status_text(self, state: RunState, message: str) -> str:
        if state == RunState.READY and self._plan is not None:
            adapter = self.controller.adapter_applied()
            loaded = f" · with the adapter {adapter.path.name}" if adapter is not None else ""
            return f"Ready · {describe_plan(self._plan)}{loaded}"
        if state.active or state in (RunState.FAILED, RunState.NOT_READY):
            return message
        if state == RunState.STOPPED and message not in ("", "Stopped."):
            return message  # e.g. a stopped copy: what arrived is kept
        if self._info is None:
            return "Choose a model to start."
        if self._plan is None:
            return "Add Macs (or try the demo cluster) to start."
        if not self._plan.fits:
            return f"Can't start: {self._plan.reason}"
        prefix = "Stopped. " if state == RunState.STOPPED else ""
        return f"{prefix}Start runs {describe_plan(self._plan)}."

    def _failed(self, message: str, logs: list[tuple[int, Path]]) -> None:
        self.banner.show_failure(message, logs)
        self.progress.mark_failed()
        self.chat.add_note("The cluster stopped: see the message above.")

    def shutdown(self) -> None:
        self.models_panel.timer.stop()
        self.api.close()
        self.timer.stop()
        self.comparer.stop()
        self.controller.shutdown()
