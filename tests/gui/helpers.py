"""Small helpers shared by the GUI tests."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QWidget


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
