"""Helpers for the Cluster pane's tests: read a row, click a row's action pill."""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from pytestqt.qtbot import QtBot

from gui.cluster.delegates import action_rect
from gui.cluster.pane import ClusterPane
from gui.cluster.table_model import CHIP, StatusRole


def names(pane: ClusterPane) -> list[str]:
    return [n.name for n in pane.nodes()]


def row_data(pane: ClusterPane, name: str, column: int, role: int = Qt.ItemDataRole.DisplayRole):
    row = pane.model.row_of(name)
    assert row is not None, f"{name} is not shown"
    return pane.model.index(row, column).data(role)


def click_action(qtbot: QtBot, pane: ClusterPane, name: str) -> None:
    """Click the action pill at the right of a row's status, as a person would."""
    index = pane.model.index(pane.model.row_of(name), CHIP)
    status = index.data(StatusRole)
    rect = action_rect(QRectF(pane.table.visualRect(index)), status.action_label)
    qtbot.mouseClick(pane.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center().toPoint())
