"""The small layout helpers of gui/widgets.py the panes share."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QLabel, QPushButton, QWidget
from pytestqt.qtbot import QtBot

from gui.widgets import clear_layout, layout_widgets


def _grid(qtbot: QtBot) -> tuple[QWidget, QGridLayout, list[QWidget]]:
    host = QWidget()
    qtbot.addWidget(host)
    grid = QGridLayout(host)
    widgets: list[QWidget] = [QLabel("a"), QPushButton("b")]
    grid.addWidget(widgets[0], 0, 0)
    grid.addWidget(widgets[1], 0, 1)
    nested = QHBoxLayout()
    nested.addWidget(QLabel("inside"))
    grid.addLayout(nested, 1, 0)
    grid.setRowStretch(2, 1)
    host.show()
    return host, grid, widgets


def test_layout_widgets_are_the_direct_widgets_in_order(qtbot: QtBot) -> None:
    _host, grid, widgets = _grid(qtbot)
    assert layout_widgets(grid) == widgets  # not the nested layout's label


def test_clear_layout_empties_it_and_deletes_the_widgets_later(qtbot: QtBot) -> None:
    _host, grid, widgets = _grid(qtbot)
    destroyed: list[str] = []
    for widget in widgets:
        widget.destroyed.connect(lambda *_: destroyed.append("gone"))
    clear_layout(grid)
    assert grid.count() == 0
    assert all(w.isVisible() for w in widgets)  # still shown until deleted
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert destroyed == ["gone", "gone"]


def test_clear_layout_can_hide_the_widgets_at_once(qtbot: QtBot) -> None:
    _host, grid, widgets = _grid(qtbot)
    clear_layout(grid, hide=True)
    assert grid.count() == 0
    assert not any(w.isVisible() for w in widgets)
