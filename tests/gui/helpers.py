"""Small helpers shared by the GUI tests."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from core.model.info import ModelInfo
from core.plan.planner import Plan
from gui.bridge import Bridge
from gui.run.cluster_source import ClusterSource
from gui.run.pane import RunPane


def drop_paths(widget: QWidget, *paths: Path) -> bool:
    """Drag ``paths`` onto ``widget`` as Finder would (file URLs); True if it took them."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path)) for path in paths])
    centre = widget.rect().center()
    action, button = Qt.DropAction.CopyAction, Qt.MouseButton.LeftButton
    modifiers = Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(QPoint(centre), action, mime, button, modifiers)
    QApplication.sendEvent(widget, enter)
    if not enter.isAccepted():
        return False
    drop = QDropEvent(QPointF(centre), action, mime, button, modifiers)
    QApplication.sendEvent(widget, drop)
    return drop.isAccepted()


def broken_model(folder: Path, config: str = "{ not json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(config)
    return folder


def shown_run_pane(qtbot: QtBot, info: ModelInfo, plan: Plan, cluster: ClusterSource) -> RunPane:
    """A Run pane on its own bridge, shown at a working size with ``plan`` for ``info`` and
    ``cluster`` set; shut down with the test."""
    bridge = Bridge()
    pane = RunPane(bridge)

    def before_close(_widget: RunPane) -> None:
        pane.shutdown()
        bridge.close()

    qtbot.addWidget(pane, before_close_func=before_close)
    pane.resize(1000, 820)
    pane.show()
    pane.set_plan(info, plan)
    pane.set_cluster(cluster)
    return pane
