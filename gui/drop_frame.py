"""A frame things are dropped on from Finder or a browser: the model's drop zone, the
training data's box.

Each says what a drop would mean (``drop_action``: the thing to do with it, or None when
it has no use for it); the frame does the rest the same way for both: it shows as active
while a usable drop hovers over it, refuses the others, and does the thing on the drop.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QMimeData
from PySide6.QtGui import QDragEnterEvent, QDragLeaveEvent, QDropEvent
from PySide6.QtWidgets import QFrame, QWidget

from gui.style import set_role


class DropFrame(QFrame):
    """A "drop-zone" card that accepts drops; subclasses say what a drop means."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        set_role(self, "drop-zone")
        self.setAcceptDrops(True)

    def drop_action(self, mime: QMimeData) -> Callable[[], None] | None:
        """What dropping ``mime`` here does, or None when this frame has no use for it."""
        raise NotImplementedError

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if self.drop_action(event.mimeData()) is not None:
            event.acceptProposedAction()
            self._set_active(True)
        else:
            event.ignore()

    def dragLeaveEvent(self, event: QDragLeaveEvent) -> None:
        self._set_active(False)
        super().dragLeaveEvent(event)

    def dropEvent(self, event: QDropEvent) -> None:
        self._set_active(False)
        action = self.drop_action(event.mimeData())
        if action is None:
            event.ignore()
            return
        event.acceptProposedAction()
        action()

    def _set_active(self, active: bool) -> None:
        self.setProperty("active", "true" if active else "false")
        self.style().unpolish(self)
        self.style().polish(self)
