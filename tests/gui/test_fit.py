"""Views that fit at 1280×800 (issue 25, item 4): opening any panel never grows the window,
the left column never scrolls sideways, tables fit their columns to their content, and the
mouse wheel never changes a setting that does not have focus."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QPointF, QSize, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QScrollArea,
    QTableView,
    QTreeView,
    QWidget,
)
from pytestqt.qtbot import QtBot

from core.run.states import RunState
from core.settings import Settings
from gui.cluster.pane import CABLES, MACS
from gui.main_window import MainWindow
from gui.model.drop_zone import LOADED
from gui.plot_style import PlotHeading, natural_width
from gui.preferences import Preferences
from tests.gui.fakes import FakeBehaviour, fake_factory

SMALL = QSize(1280, 800)


def _window(qtbot: QtBot, demo_model: Path, macs: int = 2) -> MainWindow:
    factory = fake_factory(FakeBehaviour(token_s=0.005))
    window = MainWindow(Preferences(Settings(demo_nodes=macs)), demo=True, job_factory=factory)
    qtbot.addWidget(window, before_close_func=lambda w: _stop(qtbot, w))
    window.resize(SMALL)
    window.show()
    window.model.load(demo_model)
    qtbot.waitUntil(lambda: window.model.drop_zone.state == LOADED, timeout=20_000)
    window.model.select_strategy("pipeline")
    return window


def _stop(qtbot: QtBot, window: MainWindow) -> None:
    if window.run.busy:
        window.run.stop()
        qtbot.waitUntil(lambda: not window.run.busy, timeout=10_000)


def _left(window: MainWindow) -> QScrollArea:
    scroll = window.centralWidget().findChild(QScrollArea)
    assert scroll is not None and scroll.widget().isAncestorOf(window.cluster)
    return scroll


def _settle() -> None:
    for _ in range(5):
        QApplication.processEvents()


def _fits(window: MainWindow, what: str) -> None:
    """The window kept its size; no pane scrolls sideways or is wider than its room."""
    _settle()
    assert window.size() == SMALL, f"{what}: the window grew to {window.size()}"
    left = _left(window)
    assert not left.horizontalScrollBar().isVisible(), f"{what}: the left column scrolls sideways"
    assert left.widget().minimumSizeHint().width() <= left.viewport().width(), what
    run = window.run
    assert run.minimumSizeHint().width() <= run.width(), f"{what}: the Run pane is clipped"
    assert run.minimumSizeHint().height() <= run.height(), f"{what}: the Run pane is clipped"
    if run.panels.isVisible():
        inner = run.panels.widget()
        assert inner.minimumSizeHint().width() <= run.panels.viewport().width(), what
    for area in window.findChildren(QAbstractScrollArea):
        if area.isVisible() and area.horizontalScrollBar().isVisible():
            pytest.fail(f"{what}: {type(area).__name__} scrolls sideways")


def test_every_panel_opens_inside_a_1280_by_800_window(qtbot: QtBot, demo_model: Path) -> None:
    window = _window(qtbot, demo_model, macs=4)
    run = window.run
    _fits(window, "the first view")
    _columns_whole(window, "the first view")
    run.api_button.setChecked(True)
    assert run.api_panel.isVisible()
    _fits(window, "the API panel")
    assert run.splitter.height() >= 200, run.splitter.height()  # the chat keeps room
    assert run.panels.height() >= 150, run.panels.height()  # and the panel is usable
    run.checks.show_checking(["Studio A", "Studio B", "Studio C", "Studio D"])
    run.checks.show()
    _fits(window, "the checks")
    run.checks.hide()
    run.banner.show_failure("The cluster failed.\nRank 1 ran out of memory.", [])
    _fits(window, "the failure banner")
    run.banner.hide()
    window.cluster.show_view(CABLES)
    _fits(window, "the Cables view")
    window.cluster.show_view(MACS)
    with qtbot.waitSignal(run.comparer.finished, timeout=60_000):
        assert run.compare()
    assert run.comparison.isVisible()
    _fits(window, "Compare's result")
    run.start()
    qtbot.waitUntil(lambda: run.progress_box.isVisible() or run.controller.state.active)
    _fits(window, "loading")
    qtbot.waitUntil(lambda: run.controller.state == RunState.READY, timeout=10_000)
    _fits(window, "a ready job, with the API panel and Compare's result")
    run.api_button.setChecked(False)
    run.comparison.hide()
    _fits(window, "the panels closed again")
    assert not run.panels.isVisible()  # nothing in it: it takes no room
    _stop(qtbot, window)
    for other in (window.show_history(), window.show_fine_tune()):  # windows of their own
        other.resize(SMALL)
        _settle()
        assert other.size() == SMALL, f"{type(other).__name__} grew to {other.size()}"
        hint = other.minimumSizeHint()
        assert hint.width() <= SMALL.width() and hint.height() <= SMALL.height(), hint
        other.close()
    _fits(window, "History and Fine-tune opened")


def test_leave_the_demo_elides_rather_than_widening_the_column(
    qtbot: QtBot, demo_model: Path
) -> None:
    window = _window(qtbot, demo_model)
    button = window.cluster.leave_button
    button.setText("Leave the demo (12 Macs found on this network, all of them ready)")
    _fits(window, "a long Leave the demo")
    assert button.text().startswith("Leave the demo (12 Macs")  # the whole text is kept
    assert button.shown_text().endswith("…")
    assert button.width() <= _left(window).viewport().width()


def _columns_whole(window: MainWindow, what: str) -> None:
    """Every column of every table shown is as wide as its content: nothing cut to "…"."""
    _settle()
    views = [v for v in window.findChildren(QTableView) + window.findChildren(QTreeView)]
    shown = [v for v in views if v.isVisible() and v.model() is not None]
    assert shown, what
    for view in shown:
        header = view.horizontalHeader() if isinstance(view, QTableView) else view.header()
        for column in range(header.count()):
            if header.isSectionHidden(column):
                continue
            need = view.sizeHintForColumn(column)
            got = header.sectionSize(column)
            assert got >= need, f"{what}: {type(view).__name__} column {column}: {got} < {need}"


def test_the_cluster_table_shows_every_column_whole(qtbot: QtBot, demo_model: Path) -> None:
    """The Chip and RDMA columns were cut ("M3 Ul…", "RDMA o…") on first show: with four
    Macs in the 1280×800 window every column fits its content, and a row that turns ready
    (its status gave way to its chip and RDMA badge) refits them at once."""
    from dataclasses import replace

    from core.cluster.registry import ProbeState

    window = _window(qtbot, demo_model, macs=4)
    table, model = window.cluster.table, window.cluster.model
    _columns_whole(window, "four demo Macs")
    nodes = model.nodes()
    for node in nodes:  # every row busy: the fact columns hold a status instead
        model.update(replace(node, probe_state=ProbeState.PROBING))
    _settle()
    for node in nodes:
        model.update(node)
    _columns_whole(window, "the rows ready again")
    assert table.horizontalHeader().sectionSize(0) >= table.sizeHintForColumn(0)


def _wheel(widget: QWidget, up: bool = False) -> None:
    centre = QPointF(widget.rect().center())
    event = QWheelEvent(
        centre,
        QPointF(widget.mapToGlobal(centre.toPoint())),
        QPoint(),
        QPoint(0, 120 if up else -120),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, event)


def _value(widget: QWidget) -> object:
    if isinstance(widget, QComboBox):
        return widget.currentIndex()
    assert isinstance(widget, QAbstractSpinBox)
    return widget.text()


def test_the_wheel_never_changes_a_left_column_setting_without_focus(
    qtbot: QtBot, demo_model: Path
) -> None:
    window = _window(qtbot, demo_model, macs=3)
    window.model.try_split((10, 10, 10))  # by hand: the split editor's boxes are shown
    _settle()
    column = _left(window).widget()
    controls = [
        w
        for w in column.findChildren(QComboBox) + column.findChildren(QAbstractSpinBox)
        if w.isVisible() and w.isEnabled()
    ]
    assert any(isinstance(w, QComboBox) for w in controls)  # "Nodes get the model from"
    # the layers per Mac, requests at once and the prompt cache
    assert sum(isinstance(w, QAbstractSpinBox) for w in controls) == 3 + 2
    saved = window.preferences.settings
    for control in controls:
        assert control.focusPolicy() == Qt.FocusPolicy.StrongFocus, control
        before = _value(control)
        window.setFocus()
        for up in (False, True, False):
            _wheel(control, up)
        assert _value(control) == before, f"{control} changed under the wheel"
        assert not control.hasFocus()
    assert window.preferences.settings == saved
    # With focus (clicked or tabbed to), the wheel works as people expect.
    combo = window.model.source.combo
    combo.setFocus()
    qtbot.waitUntil(combo.hasFocus, timeout=2_000)
    before = combo.currentIndex()
    _wheel(combo, up=before > 0)
    assert combo.currentIndex() != before


def _headings_clear(root: QWidget, what: str) -> None:
    """Every plot heading shown in ``root``: its title and its key never overlap, both lie
    inside the heading, the key's text is whole (on one line, or wrapped under the title
    with the height it needs), and the heading ends inside ``root``."""
    _settle()
    headings = [h for h in root.findChildren(PlotHeading) if h.isVisible()]
    assert headings, f"{what}: no plot heading shown"
    for heading in headings:
        title, key = heading.title, heading.key
        name = f"{what}: {title.text()}"
        assert heading.mapTo(root, QPoint(heading.width(), 0)).x() <= root.width(), name
        assert heading.rect().contains(title.geometry()), name
        if key is None or not key.text():
            continue
        assert not title.geometry().intersects(key.geometry()), f"{name} overlaps its key"
        assert heading.rect().contains(key.geometry()), f"{name}: its key is cut"
        if key.wordWrap():
            assert key.height() >= key.heightForWidth(key.width()), f"{name}: key cut"
        else:
            assert key.width() >= natural_width(key) - 2, f"{name}: key cut"


@pytest.mark.parametrize("size", [SMALL, QSize(1600, 1000)], ids=["1280x800", "1600x1000"])
def test_plot_titles_never_overlap_their_keys(qtbot: QtBot, demo_model: Path, size: QSize) -> None:
    """Four Macs' links named in the link plot's key beside its long title: in the Run
    pane, in presentation mode and in the History, at 1280×800 and 1600×1000, the key
    stays beside the title when it fits, else wraps under it; never over it."""
    window = _window(qtbot, demo_model, macs=4)
    window.resize(size)
    run = window.run
    run.start()
    qtbot.waitUntil(lambda: run.controller.state == RunState.READY, timeout=10_000)
    with qtbot.waitSignal(run.controller.recorded, timeout=20_000):
        run.ask("What is the capital of France?")
    qtbot.waitUntil(lambda: len(run.plots.link_curves) >= 3, timeout=10_000)
    _headings_clear(window, f"the Run pane at {size.width()}×{size.height()}")
    view = window.show_presentation()
    view.setWindowState(Qt.WindowState.WindowNoState)  # the display's size, not offscreen's
    view.resize(size)
    qtbot.waitUntil(lambda: len(view.plots.link_curves) >= 3, timeout=10_000)
    _headings_clear(view, f"presentation at {size.width()}×{size.height()}")
    view.close()
    _stop(qtbot, window)
    history = window.show_history()
    history.resize(size)
    qtbot.waitUntil(lambda: history.view.current is not None, timeout=10_000)
    assert history.view.plots.bottom_key.text().count("▬") >= 3
    _headings_clear(history, f"History at {size.width()}×{size.height()}")
    history.close()
