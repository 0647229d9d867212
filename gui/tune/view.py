"""The Fine-tune view: teach the selected model from your data, on the whole cluster.

Left: the base model (the Model pane's), the data (drop, choose, or the demo set: its
format and counts, or its bad lines), the settings (from ``TuneSettings``, each
explained). Right: Start/Stop, the state line and the ETA, the loss and tokens/s plots,
memory per node, and once done the adapter with what to do with it.

It is a thin layer: ``core.tune.data.read_data`` reads the data (off the GUI thread),
``TuneSettings.check`` refuses settings, ``core.run.tasks.finetune.FineTune`` does the rest
through ``TuneController``. The core modules are imported when first used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from core import units
from core.run.states import RunState
from core.tune.adapters import list_adapters
from core.tune.settings import SettingsError
from gui.bridge import Bridge
from gui.run.preflight_view import PreflightView
from gui.style import set_role
from gui.task_runner import one_line
from gui.tune.actions import AdapterActions
from gui.tune.adapter_panel import AdapterPanel
from gui.tune.answers_view import AnswersView
from gui.tune.controller import Factory, TuneController
from gui.tune.inputs import LEFT_WIDTH, TuneInputs
from gui.tune.loss_plot import LossPlot
from gui.tune.memory_view import TuneMemory
from gui.widgets import Badge, Card, label

if TYPE_CHECKING:
    from core.cluster.registry import Node
    from core.model.info import ModelInfo
    from core.run.checks.report import PreflightReport
    from core.run.session import Host
    from core.run.tasks.compare import AdapterComparison
    from core.run.tasks.finetune import TrainReport
    from core.tune.adapters import Adapter
    from core.tune.data import TrainingData
    from core.tune.fuse import Fused
    from gui.run.cluster_source import ClusterSource

REDRAW_HZ = 10
STOP_NOTE = "Stop keeps the last checkpoint: it becomes the adapter."
STATE_BADGES = {
    RunState.IDLE: ("Idle", "muted"),
    RunState.CHECKING: ("Checking", "accent"),
    RunState.COPYING: ("Copying", "accent"),
    RunState.NOT_READY: ("Not started", "warning"),
    RunState.LOADING: ("Loading", "accent"),
    RunState.READY: ("Training", "accent"),
    RunState.GENERATING: ("Training", "accent"),
    RunState.STOPPING: ("Stopping", "warning"),
    RunState.STOPPED: ("Done", "success"),
    RunState.FAILED: ("Failed", "danger"),
}


def eta_text(eta_s: float | None) -> str:
    return "" if eta_s is None else f"About {units.duration(eta_s)} left"


class FineTuneView(Card):
    running_changed = Signal(bool)  # the fine-tune holds the Macs: other panes lock
    data_read = Signal(object)  # the TrainingData shown, or None when refused
    # Compare with base and Fuse. The name hides QWidget.actions() (this view has no
    # QAction); the tests reach the actions by it.
    actions: AdapterActions  # type: ignore[assignment]  # hides QWidget.actions on purpose

    def __init__(
        self, bridge: Bridge, factory: Factory | None = None, parent: QWidget | None = None
    ) -> None:
        super().__init__("Fine-tune", parent)
        self._bridge = bridge
        self.controller = TuneController(bridge, factory, self)
        self._source: ClusterSource | None = None
        self._running = False
        self.adapter: Adapter | None = None
        self._done_words = ""
        self._failure = ""  # why the last fine-tune failed, in one line
        self._kept: tuple[str, bool] = ("", False)  # the adapter's name, and if stopped
        self._question = ""
        self.compare_tokens = 48  # each answer of Compare with base, at most
        self.blocked_by: Callable[[], str | None] = lambda: None  # the window: a chat job
        self.state_badge = Badge("Idle", "muted")
        self.header.insertWidget(1, self.state_badge)
        self.inputs = TuneInputs(bridge)
        self.form, self.data_box = self.inputs.form, self.inputs.data_box
        self.plot = LossPlot()
        self.memory = TuneMemory()
        self.bars, self.fit_line = self.memory.bars, self.memory.fit_line
        self.adapter_panel = AdapterPanel()
        self.adapter_panel.hide()
        self.actions = AdapterActions(bridge, self)
        self.adapter_panel.set_actions(compare=self.compare_with_base, fuse=self.fuse)
        self.answers = AnswersView()
        self.answers.hide()
        split = QSplitter(Qt.Orientation.Horizontal)
        split.setChildrenCollapsible(False)
        split.setHandleWidth(14)
        split.addWidget(self.inputs)
        split.addWidget(self._right())
        split.setStretchFactor(1, 1)
        split.setSizes([LEFT_WIDTH, 800])
        self.splitter = split
        self.body.addWidget(split, 1)
        self.timer = QTimer(self)
        self.timer.setInterval(1000 // REDRAW_HZ)
        self.timer.timeout.connect(self.plot.refresh)
        c = self.controller
        c.state_changed.connect(self._state_changed)
        c.report.connect(self.show_report)
        c.validated.connect(self.add_validation)
        c.finished.connect(self.show_finished)
        c.start_failed.connect(self.show_start_error)
        c.checked.connect(self.checks.show_report)
        c.copy_progress.connect(self.checks.show_copy)
        c.checks_failed.connect(self._checks_failed)
        self.inputs.changed.connect(self._update_start)
        self.inputs.demo_chosen.connect(self.adapter_panel.question.setText)
        a = self.actions
        a.progress.connect(self.status.setText)
        a.busy_changed.connect(lambda _busy: self._show_state(self.controller.state, None))
        a.compared.connect(self._compared)
        a.fused.connect(self._fused)
        a.failed.connect(self._action_failed)
        a.checked.connect(self.checks.show_report)
        a.checks_failed.connect(self._checks_failed)
        self._show_state(RunState.IDLE, "")
        self.list_adapters()

    # -- layout ---------------------------------------------------------------------------

    def _right(self) -> QWidget:
        panel = QWidget()
        layout = QVBoxLayout(panel)
        layout.setContentsMargins(8, 0, 0, 0)
        layout.setSpacing(8)
        row = QHBoxLayout()
        row.setSpacing(10)
        self.start_button = QPushButton("Start")
        set_role(self.start_button, "start")
        self.start_button.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop")
        set_role(self.stop_button, "stop")
        self.stop_button.setToolTip(STOP_NOTE)
        self.stop_button.clicked.connect(self.stop)
        self.status = label("", "status", wrap=True)
        self.eta = label("", "secondary")
        row.addWidget(self.start_button)
        row.addWidget(self.stop_button)
        row.addWidget(self.status, 1)
        row.addWidget(self.eta)
        layout.addLayout(row)
        self.error = label("", "error-text", wrap=True, selectable=True)
        self.error.hide()
        layout.addWidget(self.error)
        self.checks = PreflightView()  # a failed check, with its fix, as the Run pane shows it
        self.checks.hide()
        layout.addWidget(self.checks)
        self.stop_note = label(STOP_NOTE, "hint", wrap=True)
        layout.addWidget(self.stop_note)
        self.progress = label("", "secondary")
        layout.addWidget(self.progress)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.memory)
        result = QHBoxLayout()  # the adapter, and Compare with base beside it
        result.setSpacing(10)
        result.addWidget(self.adapter_panel, 1)
        result.addWidget(self.answers, 1)
        layout.addLayout(result)
        return panel

    # -- inputs ---------------------------------------------------------------------------

    def set_model(self, info: ModelInfo | None) -> None:
        self.inputs.set_model(info)

    def set_nodes(self, nodes: Sequence[Node]) -> None:
        self.inputs.set_nodes(nodes)

    def load_data(self, path: Path) -> None:
        self.inputs.load_data(path)

    def use_demo_data(self) -> None:
        self.inputs.use_demo_data()

    @property
    def info(self) -> ModelInfo | None:
        return self.inputs.info

    @property
    def data(self) -> TrainingData | None:
        return self.inputs.data

    @property
    def node_names(self) -> list[str]:
        return self.inputs.node_names

    def set_cluster(self, source: ClusterSource | None) -> None:
        self._source = source

    # -- commands -------------------------------------------------------------------------

    def start(self) -> bool:
        """Check what the view can (model, data, settings, Macs), then start; a refusal
        is one line under Start."""
        if self.controller.active:
            return False
        self.error.hide()
        self.checks.hide()
        problem = self._missing()
        if problem:
            self.show_start_error(problem)
            return False
        settings = self.form.check(len(self.inputs.facts))
        if settings is None:
            self.show_start_error(self.form.error.text())
            return False
        try:
            hosts = self._hosts()
        except ValueError as error:
            self.show_start_error(one_line(error))
            return False
        info, data_path = self.inputs.info, self.inputs.data_path
        assert info is not None and data_path is not None
        self.plot.clear()
        self.plot.set_iterations(settings.iters)
        self.adapter = None
        self._done_words = ""
        self._failure = ""  # why the last fine-tune failed, in one line
        self._kept = ("", False)
        self.adapter_panel.hide()
        self.answers.hide()
        self.progress.setText("")
        self.eta.setText("")
        self.memory.start_training()
        return self.controller.start(info, hosts, data_path, settings, self.inputs.adapter_name)

    def stop(self) -> None:
        if self.actions.busy:
            self.actions.stop()
        else:
            self.controller.stop()

    # -- the adapter's actions ------------------------------------------------------------

    def compare_with_base(self, adapter: Path) -> bool:
        """The panel's question to the base model and to base + adapter, side by side."""
        question = self.adapter_panel.question.text().strip()
        if not question:
            self.adapter_panel.show_note("Type a question first: both models answer it.")
            return False
        if self.info is None or self.controller.active:
            return False
        problem = self.blocked_by()
        if problem:
            self.adapter_panel.show_note(problem)
            return False
        try:
            hosts = self._hosts()
        except ValueError as error:
            self.adapter_panel.show_note(one_line(error))
            return False
        self.answers.hide()
        self._question = question
        return self.actions.compare(self.info, hosts, adapter, question, self.compare_tokens)

    def fuse(self, adapter: Path) -> bool:
        """A model folder with the adapter built in (the library lists it)."""
        if self.info is None:
            return False
        return self.actions.fuse(self.info.path, adapter)

    def _compared(self, result: AdapterComparison) -> None:
        self.show_comparison(
            self._question, result.base.text, result.adapted.text, fact=self.inputs.fact()
        )
        self.status.setText(result.headline())

    def _fused(self, fused: Fused) -> None:
        words = f"Fused into {fused.path}: the model library lists it."
        self.adapter_panel.show_note(words)
        self.status.setText(words)

    def _action_failed(self, message: str) -> None:
        self.adapter_panel.show_note(message)
        self.status.setText(message)

    def _missing(self) -> str | None:
        return self.inputs.missing() or self.blocked_by()

    def _hosts(self) -> list[Host]:
        names = self.node_names
        if self._source is not None:
            return self._source.hosts(names)
        from core.run.session import Host

        return [Host(name, None, self.inputs.facts[name]) for name in names]

    def shutdown(self) -> None:
        self.timer.stop()
        self.actions.shutdown()
        self.controller.shutdown()

    # -- the fine-tune's news -------------------------------------------------------------

    def show_report(self, report: TrainReport) -> None:
        """A ``TrainReport``."""
        self.add_progress(
            report.iteration,
            report.iters,
            report.train_loss,
            report.tokens_per_s,
            dict(report.peak_memory_bytes),
            report.eta_s,
        )

    def add_progress(
        self,
        iteration: int,
        iters: int,
        train_loss: float,
        tokens_per_s: float,
        peak_memory: Mapping[str, int],
        eta_s: float | None,
    ) -> None:
        """One report: a point on the plots (drawn at the next tick), the counts, the
        ETA and each Mac's peak memory."""
        if iters != self.plot.iterations:
            self.plot.set_iterations(iters)
        self.plot.add_point(iteration, train_loss, tokens_per_s)
        self.progress.setText(
            f"Iteration {iteration} of {iters} · train loss {train_loss:.3f} · "
            f"{units.rate(tokens_per_s)} tokens/s"
        )
        self.eta.setText(eta_text(eta_s))
        self.memory.show_peak(peak_memory, self.inputs.usable)

    def add_validation(self, iteration: int, val_loss: float) -> None:
        self.plot.add_validation(iteration, val_loss)

    def list_adapters(self) -> None:
        """The adapters trained before, in the panel's list; the newest on view when
        nothing else is (a fine-tune running or just failed keeps the panel hidden)."""
        try:
            adapters = list_adapters()
        except OSError:  # an unreadable data folder: no list, no crash
            adapters = []
        panel = self.adapter_panel
        panel.set_adapters(adapters)
        if adapters and panel.path is None and not self._running:
            panel.show_listed(0)

    def show_finished(self, adapter: Adapter | None) -> None:
        """The adapter (``core.tune.adapters.Adapter``), or None: nothing was trained."""
        self.adapter = adapter
        self.plot.refresh()
        if adapter is None:
            self.adapter_panel.hide()
            self.status.setText("Stopped before the first checkpoint: no adapter was kept.")
            return
        self.adapter_panel.set_adapters(list_adapters(), shown=adapter.path)
        self.show_adapter(
            adapter.name,
            adapter.base_model or "unknown",
            adapter.train_loss,
            adapter.val_loss,
            adapter.path,
            adapter.stopped,
        )

    def show_adapter(
        self,
        name: str,
        base_model: str,
        train_loss: float | None,
        val_loss: float | None,
        path: Path,
        stopped: bool = False,
    ) -> None:
        self.adapter_panel.show_adapter(name, base_model, train_loss, val_loss, path, stopped)
        self.eta.setText("")
        tune_error = getattr(self.controller.tune, "error", "") or ""
        if self._failure and tune_error:  # the fine-tune's words (with the rank's Mac) may
            self._failure = tune_error.splitlines()[0]  # come after the job's own
        self._kept = (name, stopped)
        self._done_words = self._result_words()
        self.status.setText(self._done_words)

    def _result_words(self) -> str:
        """The state line once an adapter is kept: why the run failed first, if it did."""
        name, stopped = self._kept
        if self._failure:  # why it ended stays in front; the adapter follows it
            return (
                f"{self._failure.rstrip('.')}. The last checkpoint is kept as the adapter {name}."
            )
        if stopped:
            return f"Stopped: the last checkpoint is kept as the adapter {name}."
        return f"Done: the adapter {name} is saved."

    def show_comparison(
        self, question: str, base_answer: str, adapter_answer: str, fact: str | None = None
    ) -> None:
        """Compare with base's result: the same question, both answers side by side."""
        adapter = self.adapter_panel.name.text() or "the adapter"
        base = self.adapter_panel.facts["Base model"].text() or "the base model"
        self.answers.show_answers(
            question,
            base_answer,
            adapter_answer,
            base_name="Base model",
            adapter_name="With the adapter",
            fact=fact,
        )
        self.answers.titles["base"].setToolTip(base)
        self.answers.titles["adapter"].setToolTip(f"{base} + {adapter}")

    def _checks_failed(self, report: PreflightReport) -> None:
        """A check failed (the fine-tune's, or Compare with base's): the checks with
        their fixes, as after the Run pane's Start."""
        self.checks.show_report(report)
        self.checks.show()

    def show_start_error(self, message: str) -> None:
        """One line under Start (never a dialog, never a traceback)."""
        self.error.setText(message.splitlines()[0] if message else "The fine-tune did not start.")
        self.error.show()

    # -- state ------------------------------------------------------------------------------

    def _state_changed(self, state: str, detail: str) -> None:
        self._show_state(RunState(state), detail)

    def _show_state(self, state: RunState, detail: str | None) -> None:
        """``detail`` None: the state line stays as it is (an action's progress)."""
        text, kind = STATE_BADGES[state]
        if state == RunState.STOPPED and self.adapter is None and not self.plot.train.size:
            text, kind = "Stopped", "muted"
        acting = self.actions.busy
        if acting:
            text, kind = "Comparing or fusing", "accent"
        self.state_badge.set(text, kind)
        self.stop_button.setEnabled((state.active and state != RunState.STOPPING) or acting)
        if detail is not None:
            if state == RunState.FAILED:
                tune_error = getattr(self.controller.tune, "error", "") or ""
                self._failure = (tune_error or detail or "Failed").splitlines()[0]
                if self._done_words:  # the adapter came first: say why it ended too
                    self._done_words = self._result_words()
                detail = self._done_words or self._failure
            elif state == RunState.STOPPED and self._done_words:
                detail = self._done_words  # the adapter is the news, whatever came first
            self.status.setText(detail or self._state_words(state))
        if state.active:
            self.error.hide()
        locked = state.active or acting
        self.inputs.set_locked(locked)
        self.adapter_panel.set_busy(locked)
        if state.active and not self.timer.isActive():
            self.timer.start()
        elif not state.active and self.timer.isActive():
            self.timer.stop()
            self.plot.refresh()
        self._update_start()
        if locked != self._running:
            self._running = locked
            self.running_changed.emit(locked)

    def _state_words(self, state: RunState) -> str:
        """The state line when the fine-tune said nothing more."""
        names = self.node_names
        macs = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        model = self.info.name if self.info is not None else "the model"
        return {
            RunState.IDLE: self._missing() or "Ready: Start trains an adapter on every Mac.",
            RunState.CHECKING: "Checking the data and the Macs…",
            RunState.COPYING: "Copying the model and the data to the Macs…",
            RunState.LOADING: f"Loading {model} on {macs}…",
            RunState.READY: f"Training on {macs}…",
            RunState.GENERATING: f"Training on {macs}…",
            RunState.STOPPING: "Stopping at the next step: the last checkpoint is kept…",
            RunState.STOPPED: "Stopped.",
            RunState.FAILED: "Failed.",
        }.get(state, "")

    def show_fit(self) -> None:
        """Before a Start: what these settings need on each Mac (``core.tune.fit``), and
        the fit's verdict in one line (which Mac is the limit, by how much)."""
        if self.controller.active or self.plot.train.size:
            return  # the bars show what training really takes
        info, facts = self.inputs.info, self.inputs.facts
        try:
            from core.tune.fit import training_fit
        except ImportError:  # before core.tune.fit: the bars wait for training
            return
        try:
            settings = self.form.settings()
        except SettingsError:
            return
        if info is None or not facts:
            self.memory.show_nothing("Choose a model and Macs to see what each needs.")
            return
        self.memory.show_fit(training_fit(info, settings, facts))

    def _update_start(self) -> None:
        self.show_fit()
        ready = (
            not self.controller.active and not self.actions.busy and self.inputs.missing() is None
        )
        self.start_button.setEnabled(ready)
        if self.controller.state == RunState.IDLE:
            self.status.setText(self._state_words(RunState.IDLE))


class FineTuneWindow(QWidget):
    """The Fine-tune view in a window of its own (a child of ``parent``: it closes with
    the main window)."""

    def __init__(self, bridge: Bridge, parent: QWidget, factory: Factory | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setObjectName("central")
        self.setWindowTitle("MacMesh · Fine-tune")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(14, 14, 14, 14)
        self.view = FineTuneView(bridge, factory)
        layout.addWidget(self.view)
        self.resize(1280, 860)
