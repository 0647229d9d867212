"""The window: three panes side by side, wired together. No logic lives here.

Cluster and Model on the left (what runs where), Run on the right (what happens).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QRect, QSize, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QHBoxLayout,
    QMainWindow,
    QMenu,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from core.run.planning import Serving
from core.run.states import RunState
from gui.bridge import Bridge
from gui.cluster.pane import ClusterPane
from gui.help_menu import install_help_menu
from gui.model.pane import ModelPane
from gui.preferences import Preferences, restore_window, save_window
from gui.run.cluster_source import PaneSource
from gui.run.pane import RunPane

if TYPE_CHECKING:
    from core.cluster.registry import Node
    from core.run.job.launcher import Job, JobSpec
    from gui.history.view import HistoryWindow
    from gui.run.presentation import PresentationView
    from gui.tune.view import FineTuneWindow

LEFT_WIDTH = 440
DEFAULT_SIZE = (1440, 900)
# Room a window manager's title bar and borders may take around the window (before the
# window is shown its frame is unknown): a first window fits its screen with them.
FRAME_ALLOWANCE = QSize(16, 40)


def fitted(wanted: QRect, room: QRect, frame: QSize = FRAME_ALLOWANCE) -> QRect:
    """``wanted`` (a window's geometry, its frame left out) inside ``room`` (a screen's
    available area): no larger than the room less ``frame``, and moved inside it."""
    width = max(1, min(wanted.width(), room.width() - frame.width()))
    height = max(1, min(wanted.height(), room.height() - frame.height()))
    left_border, top_border = frame.width() // 2, frame.height() - frame.width() // 2
    x = min(max(wanted.x(), room.x() + left_border), room.right() + 1 - width - left_border)
    y = min(max(wanted.y(), room.y() + top_border), room.bottom() + 1 - height - left_border)
    return QRect(x, y, width, height)


_RUN_ENDED = (RunState.STOPPED, RunState.FAILED, RunState.NOT_READY)


class MainWindow(QMainWindow):
    def __init__(
        self,
        preferences: Preferences | None = None,
        *,
        demo: bool = False,
        job_factory: Callable[[JobSpec], Job] | None = None,
        replay: list[Node] | None = None,
    ) -> None:
        super().__init__()
        self.setWindowTitle("MacMesh")
        self.preferences = preferences or Preferences()
        self.bridge = Bridge(self)
        self._closing = False
        self.history: HistoryWindow | None = None
        self.presentation: PresentationView | None = None
        self.fine_tune: FineTuneWindow | None = None
        self.cluster = ClusterPane(self.bridge)
        self.model = ModelPane(self.bridge)
        self.run = RunPane(self.bridge, job_factory)
        self.run.set_cluster(PaneSource(self.cluster))  # demo or real Macs: Start asks it
        self._compose()
        self.view_menu = self._view_menu()
        self.help_menu = install_help_menu(self)
        self._wire()
        self._restore(demo, replay)

    def _compose(self) -> None:
        left = QWidget()
        column = QVBoxLayout(left)
        column.setContentsMargins(0, 0, 6, 0)
        column.setSpacing(14)
        column.addWidget(self.cluster)
        column.addWidget(self.model, 1)
        scroll = QScrollArea()
        scroll.setWidget(left)
        scroll.setWidgetResizable(True)
        scroll.setFixedWidth(LEFT_WIDTH)
        central = QWidget()
        central.setObjectName("central")
        row = QHBoxLayout(central)
        row.setContentsMargins(14, 14, 14, 14)
        row.setSpacing(14)
        row.addWidget(scroll)
        row.addWidget(self.run, 1)
        self.setCentralWidget(central)
        self.statusBar().setSizeGripEnabled(False)

    def _view_menu(self) -> QMenu:
        menu = self.menuBar().addMenu("&View")
        self.history_action = QAction("&History", self)
        self.history_action.setShortcut(QKeySequence("Ctrl+Y"))
        self.history_action.setStatusTip("Past runs, their figures and plots; Export")
        self.history_action.triggered.connect(self.show_history)
        menu.addAction(self.history_action)
        self.presentation_action = QAction("&Presentation Mode", self)
        self.presentation_action.setShortcut(QKeySequence("Ctrl+Shift+P"))
        self.presentation_action.setStatusTip(
            "Full screen for a projector: tokens/s, the plots, the cables; Esc leaves"
        )
        self.presentation_action.triggered.connect(self.show_presentation)
        menu.addAction(self.presentation_action)
        self.fine_tune_action = QAction("&Fine-tune…", self)
        self.fine_tune_action.setShortcut(QKeySequence("Ctrl+Shift+T"))
        self.fine_tune_action.setStatusTip(
            "Teach the selected model from your data on the whole cluster (LoRA)"
        )
        self.fine_tune_action.triggered.connect(self.show_fine_tune)
        menu.addAction(self.fine_tune_action)
        self.demo_rdma_action = QAction("Demo without &RDMA", self)
        self.demo_rdma_action.setCheckable(True)
        self.demo_rdma_action.setStatusTip(
            "The demo cluster's simulated Macs with RDMA over Thunderbolt off: show the guide"
        )
        self.demo_rdma_action.toggled.connect(self._demo_without_rdma)
        menu.addAction(self.demo_rdma_action)
        menu.addSeparator()
        self.check_macs_action = QAction("&Check my Macs…", self)
        self.check_macs_action.setStatusTip(
            "Every setup problem of the Macs in the Cluster pane, each with its fix"
        )
        self.check_macs_action.triggered.connect(lambda: self.cluster.check_macs())
        menu.addAction(self.check_macs_action)
        return menu

    def _demo_without_rdma(self, without: bool) -> None:
        """View > Demo without RDMA: the simulated Macs with RDMA off (remembered)."""
        self.cluster.set_demo_rdma(not without)
        self.preferences.update(demo_rdma=not without)

    def show_fine_tune(self) -> FineTuneWindow:
        """The Fine-tune window (one; raised if open): the Model pane's model, the
        Cluster pane's Macs."""
        from gui.tune.view import FineTuneWindow

        if self.fine_tune is None:
            self.fine_tune = FineTuneWindow(self.bridge, self)
            view = self.fine_tune.view
            view.set_cluster(PaneSource(self.cluster))
            view.set_model(self.model.info)
            view.set_nodes(self.cluster.nodes())
            view.blocked_by = lambda: (
                "Stop the Run pane's job first: training needs the Macs' memory."
                if self.run.busy
                else None
            )
            self.model.plan_changed.connect(lambda info, _plan: view.set_model(info))
            view.adapter_panel.on_chat = self.chat_with_adapter
            self.cluster.nodes_changed.connect(view.set_nodes)
            view.running_changed.connect(self.cluster.set_locked)
            view.running_changed.connect(self.model.set_locked)
            # The Macs' memory is the fine-tune's while it trains: no chat job meanwhile.
            view.running_changed.connect(
                lambda running: (
                    self.run.start_button.setEnabled(False)
                    if running
                    else self.run.set_plan(*self.run.shown_plan())
                )
            )
        self.fine_tune.show()
        self.fine_tune.raise_()
        return self.fine_tune

    def show_presentation(self) -> PresentationView:
        """Presentation mode, full screen (Esc leaves it)."""
        from gui.run.presentation import PresentationView

        if self.presentation is None:
            self.presentation = PresentationView(self.run, self.cluster.diagram, self)
        self.presentation.present()
        return self.presentation

    def show_history(self) -> HistoryWindow:
        """The History window (one; raised if open), its list read afresh."""
        from gui.history.view import HistoryWindow

        if self.history is None:
            self.history = history = HistoryWindow(self.bridge, self)
            self.run.controller.recorded.connect(lambda _record: history.view.refresh())
        self.history.view.refresh()
        self.history.show()
        self.history.raise_()
        return self.history

    def chat_with_adapter(self, adapter: Path) -> bool:
        """The Fine-tune view's "Chat with the adapter": the Run pane starts the model
        with the adapter on the cluster (the Model pane's plan), in front."""
        if self.run.busy:
            self.run.status.setText("Stop the job first: then Chat with the adapter starts it.")
            return False
        self.run.controller.adapter = Path(adapter)
        self.raise_()
        self.activateWindow()
        self.run.start()
        return True

    def _wire(self) -> None:
        prefs = self.preferences
        self.cluster.nodes_changed.connect(self.model.set_nodes)
        self.model.plan_changed.connect(self.run.set_plan)
        self.run.running_changed.connect(self.cluster.set_locked)
        self.run.running_changed.connect(self.model.set_locked)
        links, controller = self.cluster.link_bar, self.run.controller
        links.requested.connect(controller.test_links)
        controller.links_tested.connect(links.show_tested)
        controller.links_failed.connect(links.show_failed)
        controller.link_progress.connect(
            lambda event: links.show_progress(event, controller.rank_names())
        )
        links.stop_requested.connect(self.run.stop_link_test)
        controller.state_changed.connect(
            lambda state, _m: links.set_available(
                state == RunState.READY.value and len(self.run.controller.rank_names()) > 1,
                running=RunState(state).active,
            )
        )
        self.run.running_changed.connect(lambda running: links.clear() if running else None)
        self.model.model_changed.connect(lambda path: prefs.update(last_model=path))
        # Another model: the fine-tuned adapter of the last one no longer applies. And
        # "Chat with the adapter" applies to the run it starts: once that run has ended,
        # Start runs the plain model again.
        self.model.model_changed.connect(lambda _path: setattr(controller, "adapter", None))
        controller.state_changed.connect(
            lambda state, _m: (
                setattr(controller, "adapter", None) if RunState(state) in _RUN_ENDED else None
            )
        )
        self.model.strategy_changed.connect(lambda choice: prefs.update(last_strategy=choice))
        self.cluster.demo_size_changed.connect(lambda n: prefs.update(demo_nodes=n))
        self.cluster.demo_shown.connect(
            lambda shown: prefs.update(demo_on=shown, demo_nodes=self.cluster.demo_size())
        )
        self.run.max_tokens.valueChanged.connect(lambda n: prefs.update(max_tokens=n))
        # Read by the next Start (gui.run.controller), as by ``macmesh run``.
        self.model.source.source_changed.connect(lambda s: prefs.update(model_source=s))
        self.model.serving.serving_changed.connect(
            lambda s: prefs.update(
                batch=s.batch, prompt_cache_mb=s.prompt_cache_mb, kv_bits=s.kv_bits
            )
        )
        self.bridge.failed.connect(lambda message: self.statusBar().showMessage(message, 10_000))

    def _restore(self, demo: bool, replay: list[Node] | None = None) -> None:
        settings = self.preferences.settings
        self.model.select_strategy(settings.last_strategy)
        self.run.max_tokens.setValue(settings.max_tokens)
        self.model.source.select(settings.model_source)
        self.model.serving.select(
            Serving(
                settings.batch, settings.prompt_cache_mb, settings.kv_bits, settings.kv_group_size
            )
        )
        # The demo cluster as it was left (shown or not, its size), before the model is
        # planned on it: a second launch must not plan on this Mac alone.
        self.cluster.set_demo_size(settings.demo_nodes)
        self.demo_rdma_action.setChecked(not settings.demo_rdma)
        if replay is not None:  # a capture's Macs in the demo's place
            self.cluster.show_replay(replay)
        elif demo or settings.demo_on:
            self.cluster.start_demo(settings.demo_nodes)
        if settings.last_model and Path(settings.last_model).is_dir():
            self.model.load(Path(settings.last_model))
        self.geometry_restored = restore_window(self, self._splitters())
        if not self.geometry_restored:
            self.resize(*DEFAULT_SIZE)
        self.fit_to_screen(centre=not self.geometry_restored)

    def fit_to_screen(self, *, centre: bool = False) -> None:
        """The window inside its screen's available area (a 1280×800 laptop's less its
        menu bar and Dock): the first size and a restored one alike; ``centre``: a first
        window is centred in that area."""
        screen = self.screen() or QGuiApplication.primaryScreen()
        room = screen.availableGeometry()
        wanted = QRect(self.geometry())
        if centre:
            wanted.moveCenter(room.center())
        self.setGeometry(fitted(wanted, room))

    def _splitters(self) -> dict[str, QSplitter]:
        return {"run-splitter": self.run.splitter}

    def closeEvent(self, event: QCloseEvent) -> None:
        """Closing stops the job first (off the GUI thread), then closes for real."""
        if self.run.busy:
            event.ignore()
            self.statusBar().showMessage("Stopping every rank before closing…")
            if not self._closing:
                self._closing = True
                self.run.running_changed.connect(self._close_when_stopped)
            self.run.stop()
            return
        save_window(self, self._splitters())
        if self.fine_tune is not None:
            self.fine_tune.view.shutdown()
        self.run.shutdown()
        self.bridge.close()
        super().closeEvent(event)

    def _close_when_stopped(self, running: bool) -> None:
        if not running:
            QTimer.singleShot(0, self.close)
