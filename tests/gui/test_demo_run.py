"""The window with the real demo cluster: MLX ranks as processes on this machine.

Answers are kept short (max tokens) because two ranks on a small CI machine generate a
few tokens per second.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from core.run.states import RunState
from gui.main_window import MainWindow
from gui.model.drop_zone import LOADED
from gui.run.failure import LogDialog
from tests.gui.helpers import drop_paths
from tests.helpers.jobs import assert_no_ranks_left

pytestmark = pytest.mark.slow
LOAD_TIMEOUT_MS = 180_000


def _window(qtbot: QtBot, demo_model: Path) -> MainWindow:
    window = MainWindow(demo=True)

    def stop_first(_w: MainWindow) -> None:
        if window.run.busy:
            window.run.stop()
            qtbot.waitUntil(lambda: not window.run.busy, timeout=30_000)

    qtbot.addWidget(window, before_close_func=stop_first)
    window.show()
    window.run.max_tokens.setValue(6)
    assert drop_paths(window.model.drop_zone, demo_model)
    qtbot.waitUntil(lambda: window.model.drop_zone.state == LOADED, timeout=30_000)
    window.model.select_strategy("pipeline")
    assert window.run.start_button.isEnabled()
    return window


def _state(window: MainWindow) -> RunState:
    return window.run.controller.state


def test_pipeline_on_the_demo_cluster_streams_then_stops(qtbot: QtBot, demo_model: Path) -> None:
    window = _window(qtbot, demo_model)
    run = window.run
    qtbot.mouseClick(run.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: _state(window) == RunState.READY, timeout=LOAD_TIMEOUT_MS)
    run.chat.prompt.setText("What is the capital of France?")
    qtbot.keyClick(run.chat.prompt, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: "The capital" in run.chat.text(), timeout=LOAD_TIMEOUT_MS)
    qtbot.waitUntil(lambda: _state(window) == RunState.READY, timeout=LOAD_TIMEOUT_MS)
    telemetry = run.controller.telemetry
    assert len(telemetry.tokens_per_s().smoothed[0]) > 0
    qtbot.waitUntil(
        lambda: (
            run.plots.smoothed.getData()[0] is not None and len(run.plots.smoothed.getData()[0]) > 0
        ),
        timeout=5000,
    )
    assert telemetry.link_series(), "pipeline ranks exchange activations over the link"
    job = run.controller.job
    assert len(job.ranks) == 2 and all(s.pid for s in job.ranks)
    qtbot.mouseClick(run.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: _state(window) == RunState.STOPPED, timeout=30_000)
    assert job.state.finished
    assert_no_ranks_left(job)


def test_stop_while_the_ranks_load(qtbot: QtBot, demo_model: Path) -> None:
    window = _window(qtbot, demo_model)
    run = window.run
    run.start()
    qtbot.waitUntil(
        lambda: any(stage not in ("starting",) for stage in run.progress.stages().values()),
        timeout=60_000,
    )
    assert _state(window) == RunState.LOADING
    qtbot.mouseClick(run.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: _state(window) == RunState.STOPPED, timeout=30_000)
    assert_no_ranks_left(run.controller.job)


def test_a_killed_rank_shows_the_launcher_message_and_logs(qtbot: QtBot, demo_model: Path) -> None:
    window = _window(qtbot, demo_model)
    run = window.run
    run.start()
    qtbot.waitUntil(lambda: _state(window) == RunState.READY, timeout=LOAD_TIMEOUT_MS)
    job = run.controller.job
    os.kill(job.ranks[1].pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: _state(window) == RunState.FAILED, timeout=60_000)
    assert run.banner.isVisible()
    # The demo's rank is named after its simulated Mac, and what to try follows.
    assert run.banner.title.text().startswith("Rank 1 on Studio B was killed (signal 9)")
    assert "try a smaller model" in run.banner.advice.text()
    assert len(run.banner.log_buttons) == 2
    run.banner.log_buttons[0].click()
    dialog = next(
        w for w in QApplication.topLevelWidgets() if isinstance(w, LogDialog) and w.isVisible()
    )
    assert dialog.text.toPlainText().strip()
    dialog.close()
    assert_no_ranks_left(job)
    assert run.start_button.isEnabled()  # usable again
