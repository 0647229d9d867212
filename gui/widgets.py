"""Small building blocks every pane uses: cards, section titles, badges."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import (
    QButtonGroup,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLayout,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from gui import style
from gui.style import set_role

BADGE_KINDS = ("success", "warning", "danger", "muted", "accent")
PANE_MARGIN = 16
SPACING = 10


class Card(QFrame):
    """A pane: a rounded card with a title row (title, optional widgets on the right)."""

    def __init__(self, title: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        set_role(self, "card")
        self.title = label(title, "pane-title")
        self.header = QHBoxLayout()
        self.header.setSpacing(SPACING)
        self.header.addWidget(self.title)
        self.header.addStretch(1)
        self.body = QVBoxLayout(self)
        self.body.setContentsMargins(PANE_MARGIN, 14, PANE_MARGIN, PANE_MARGIN)
        self.body.setSpacing(SPACING)
        self.body.addLayout(self.header)


def label(
    text: str = "", role: str | None = None, *, wrap: bool = False, selectable: bool = False
) -> QLabel:
    widget = QLabel(text)
    if role:
        set_role(widget, role)
    if wrap:
        widget.setWordWrap(True)
        widget.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
    if selectable:
        widget.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return widget


def section(text: str) -> QLabel:
    """A small upper-case heading inside a pane."""
    return label(text.upper(), "section")


class Badge(QLabel):
    """A coloured pill: "Fits", "RDMA on", "Not possible"..."""

    def __init__(self, text: str = "", kind: str = "muted", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.set(text, kind)

    def set(self, text: str, kind: str) -> None:
        if kind not in BADGE_KINDS:
            raise ValueError(f"unknown badge kind {kind!r}")
        self.setText(text)
        self.kind = kind
        set_role(self, f"badge-{kind}")


class Segmented(QWidget):
    """A row of joined toggle buttons, one checked: a compact choice among few values."""

    changed = Signal(object)

    def __init__(
        self,
        values: Sequence[object],
        labels: list[str] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.group = QButtonGroup(self)
        self.group.setExclusive(True)
        self.buttons: dict[object, QPushButton] = {}
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(0)
        for i, value in enumerate(values):
            button = QPushButton(labels[i] if labels else str(value))
            button.setCheckable(True)
            button.setProperty(
                "position", "first" if i == 0 else "last" if i == len(values) - 1 else "middle"
            )
            set_role(button, "segment")
            button.clicked.connect(lambda _=False, v=value: self.changed.emit(v))
            self.group.addButton(button)
            self.buttons[value] = button
            row.addWidget(button)

    def value(self) -> object:
        return next((v for v, b in self.buttons.items() if b.isChecked()), None)

    def set_value(self, value: object) -> None:
        """Checks ``value`` without emitting ``changed`` (that is for the person's clicks)."""
        if value in self.buttons:
            self.buttons[value].setChecked(True)


class OpaqueBackground(QObject):
    """Fills a widget with a theme colour before it paints, for widgets (a text view's
    viewport) marked opaque so their updates do not repaint what lies behind them."""

    def __init__(self, widget: QWidget, background: str) -> None:
        super().__init__(widget)
        self.background = background
        widget.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        widget.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint and isinstance(watched, QWidget):
            painter = QPainter(watched)
            painter.fillRect(watched.rect(), style.current().qcolor(self.background))
            painter.end()
        return False


def clear_layout(layout: QLayout, *, hide: bool = False) -> None:
    """Empty ``layout``; its widgets are deleted at the next loop turn (``hide``: hidden now,
    so they leave the view at once rather than with the deletion)."""
    while layout.count():
        item = layout.takeAt(0)
        widget = item.widget() if item is not None else None
        if widget is not None:
            if hide:
                widget.hide()
            widget.deleteLater()


def layout_widgets(layout: QLayout) -> list[QWidget]:
    """The widgets directly in ``layout``'s items, in order (nested layouts and spacers not)."""
    items = (layout.itemAt(i) for i in range(layout.count()))
    return [w for item in items if item is not None and (w := item.widget()) is not None]
