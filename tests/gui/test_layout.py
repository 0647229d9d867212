"""The window laid out on a 1280×800 and a 1440×900 screen (issue 35, item 1): the first
window fits the screen's room, and with each panel open (none, the API, the served
models, Compare's result) every visible widget lies inside the window (or the scroll
area holding it), no laid-out siblings overlap, and no text is cut.
``MACMESH_LAYOUT_SHOTS=FOLDER`` also saves each layout as a PNG there (``python -m
tests.gui.screenshots --layout`` takes them under Xvfb, with real fonts, into
docs/screenshots)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import QRect, QSize
from PySide6.QtGui import QScreen
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from core.settings import Settings
from gui.main_window import DEFAULT_SIZE, MainWindow, fitted
from gui.model.drop_zone import LOADED
from gui.preferences import Preferences, save_window
from tests.gui.fakes import FakeBehaviour, fake_factory
from tests.gui.layout_check import problems
from tests.helpers.serving import free_port

SCREENS = {"1280x800": QSize(1280, 800), "1440x900": QSize(1440, 900)}
PANELS = ("none", "api", "models", "compare")


def _settle() -> None:
    for _ in range(6):
        QApplication.processEvents()


def _stop(qtbot: QtBot, window: MainWindow) -> None:
    if window.run.busy:
        window.run.stop()
        qtbot.waitUntil(lambda: not window.run.busy, timeout=10_000)


def _on_screen(monkeypatch: pytest.MonkeyPatch, size: QSize) -> QRect:
    room = QRect(0, 0, size.width(), size.height())
    monkeypatch.setattr(QScreen, "availableGeometry", lambda _screen: QRect(room))
    return room


def test_fitted_keeps_a_window_inside_the_room() -> None:
    room = QRect(0, 25, 1280, 775)  # a 13-inch Mac's, below its menu bar
    first = fitted(QRect(0, 0, *DEFAULT_SIZE), room)
    assert room.contains(first.adjusted(-8, -32, 8, 8)), first  # its frame included
    assert first.size() == QSize(1264, 735)
    small = fitted(QRect(300, 100, 900, 600), room)
    assert small == QRect(300, 100, 900, 600)  # a window that fits is left alone
    away = fitted(QRect(3000, -400, 1000, 700), room)  # a screen unplugged since
    assert room.contains(away) and away.size() == QSize(1000, 700)


@pytest.mark.parametrize("screen", SCREENS)
def test_the_first_window_and_a_restored_one_fit_the_screen(
    qtbot: QtBot, demo_model: Path, monkeypatch: pytest.MonkeyPatch, screen: str
) -> None:
    room = _on_screen(monkeypatch, SCREENS[screen])
    window = MainWindow(Preferences(Settings(demo_nodes=2)), demo=True)
    qtbot.addWidget(window)
    assert room.contains(window.geometry()), window.geometry()
    assert window.width() <= room.width() - 16 and window.height() <= room.height() - 40
    window.show()
    _settle()
    chat = window.run.chat
    for part in (chat.prompt, chat.send):  # no scroll, no resize to reach them
        assert part.isVisible()
        assert window.rect().contains(QRect(part.mapTo(window, part.rect().topLeft()), part.size()))
    # A geometry saved on a larger screen comes back inside this one.
    window.setGeometry(0, 0, 1900, 1150)
    save_window(window, {})
    window.close()
    again = MainWindow(Preferences(Settings(demo_nodes=2)), demo=True)
    qtbot.addWidget(again)
    assert again.geometry_restored
    assert room.contains(again.geometry()), again.geometry()


@pytest.mark.parametrize("panel", PANELS)
@pytest.mark.parametrize("screen", SCREENS)
def test_every_widget_is_whole_with_each_panel_open(
    qtbot: QtBot, demo_model: Path, monkeypatch: pytest.MonkeyPatch, screen: str, panel: str
) -> None:
    room = _on_screen(monkeypatch, SCREENS[screen])
    factory = fake_factory(FakeBehaviour(token_s=0.005))
    window = MainWindow(Preferences(Settings(demo_nodes=4)), demo=True, job_factory=factory)
    qtbot.addWidget(window, before_close_func=lambda w: _stop(qtbot, w))
    assert room.contains(window.geometry())
    first = window.size()
    window.show()
    window.model.load(demo_model)
    qtbot.waitUntil(lambda: window.model.drop_zone.state == LOADED, timeout=20_000)
    window.model.select_strategy("pipeline")
    qtbot.waitUntil(lambda: window.run._plots is not None, timeout=10_000)  # built after paint
    run = window.run
    if panel == "api":
        run.api_button.setChecked(True)
        assert run.api_panel.isVisible()
    elif panel == "models":  # the API serving the job: every served model listed
        run.api_button.setChecked(True)
        run.api_panel.port.setValue(free_port())
        run.api_panel.port.editingFinished.emit()
        run.api_panel.require_key.setChecked(False)
        run.api_panel.enabled.setChecked(True)
        run.start()
        qtbot.waitUntil(lambda: run.models_panel.isVisible(), timeout=60_000)
        qtbot.waitUntil(lambda: len(run.models_panel.shown) == 1, timeout=30_000)
    elif panel == "compare":
        with qtbot.waitSignal(run.comparer.finished, timeout=60_000):
            assert run.compare()
        assert run.comparison.isVisible()
    _settle()
    if panel == "compare":  # whole, not a strip to scroll (the idle chat gives its room)
        assert not run.panels.verticalScrollBar().isVisible()
        assert run.comparison.height() >= run.comparison.sizeHint().height()
        assert not run.splitter.isVisible()
    assert window.size() == first, f"the {panel} panel grew the window to {window.size()}"
    shots = os.environ.get("MACMESH_LAYOUT_SHOTS")
    if shots:
        window.grab().save(str(Path(shots) / f"layout-{screen}-{panel}.png"))
    found = problems(window)
    assert not found, "\n".join(found)
