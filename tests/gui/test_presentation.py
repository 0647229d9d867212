"""Presentation mode: full screen, the live tokens/s large, the plots, live traffic on
the cables, the last comparison; Esc leaves and nothing keeps running."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from core.run.states import RunState
from core.run.tasks.compare import Comparison, RunFigures
from gui.main_window import MainWindow
from gui.model.drop_zone import LOADED
from tests.gui.fakes import FakeBehaviour, fake_factory
from tests.gui.helpers import drop_paths


def _figures(label: str, nodes: list[str], tps: float) -> RunFigures:
    return RunFigures(label, nodes, "pipeline", len(nodes), tps, 200.0, 0.1, 40, 12, {}, "Paris")


def test_presentation_shows_the_live_run_and_esc_leaves(qtbot: QtBot, demo_model: Path) -> None:
    window = MainWindow(demo=True, job_factory=fake_factory(FakeBehaviour(token_s=0.02)))
    qtbot.addWidget(window)
    window.show()
    drop_paths(window.model.drop_zone, demo_model)
    qtbot.waitUntil(lambda: window.model.drop_zone.state == LOADED, timeout=20_000)
    window.model.select_strategy("pipeline")
    window.presentation_action.trigger()
    view = window.presentation
    assert view.isVisible() and view.windowState() & Qt.WindowState.WindowFullScreen
    # The whole screen though no window manager runs here to honour the request (issue 35).
    assert view.geometry() == window.screen().geometry()
    assert view.number.text() == "–" and view.what.text().endswith("pipeline on 2 Macs")
    assert [box.name for box in view.map.scene.boxes] == ["Studio A", "Studio B"]
    assert not view.comparison.isVisible()
    window.run.start()
    qtbot.waitUntil(lambda: window.run.controller.state == RunState.READY, timeout=10_000)
    window.run.ask("What is the capital of France?")
    qtbot.waitUntil(lambda: any(line.measured for line in view.map.scene.cables()), timeout=10_000)
    line = next(line for line in view.map.scene.cables() if line.measured)
    assert line.caption.endswith("/s now") and "bytes moved by MLX" in line.tooltip
    qtbot.waitUntil(lambda: window.run.controller.state == RunState.READY, timeout=10_000)
    qtbot.waitUntil(lambda: view.number.text() != "–", timeout=5_000)
    assert float(view.number.text()) > 0
    # Between answers the figure is the last answer's, and says so.
    qtbot.waitUntil(lambda: view.unit.text() == "tokens/s · last answer", timeout=5_000)
    x, _y = view.plots.smoothed.getData()
    assert x is not None and len(x) > 0  # the tokens plot is drawn
    result = Comparison(
        _figures("one Mac", ["Studio A"], 20.0),
        _figures("cluster", ["Studio A", "Studio B"], 50.0),
        "pipeline",
    )
    window.run.comparison.show_result(result)
    qtbot.waitUntil(lambda: view.comparison.isVisible(), timeout=5_000)
    assert view.comparison.headline.text() == "2.5× faster on 2 Macs"
    qtbot.keyClick(view, Qt.Key.Key_Escape)
    assert not view.isVisible() and not view.timer.isActive()
    window.run.stop()
    qtbot.waitUntil(lambda: not window.run.busy, timeout=10_000)
