"""Small building blocks every pane uses: cards, section titles, badges."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QEvent, QObject, QSize, Qt, Signal
from PySide6.QtGui import QPainter, QPaintEvent
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QButtonGroup,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLayout,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QStyle,
    QStyleOptionButton,
    QStylePainter,
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


class _WheelNeedsFocus(QObject):
    """Wheel events over a combo or spin box without focus go to what holds it (the
    scroll area), so scrolling a column past a setting never changes the setting."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if (
            event.type() == QEvent.Type.Wheel
            and isinstance(watched, QWidget)
            and not watched.hasFocus()
        ):
            # Filtered but not accepted: Qt hands an ignored wheel event to the parent.
            event.ignore()
            return True
        return False


_WHEEL_GUARD: _WheelNeedsFocus | None = None


def wheel_needs_focus(widget: QComboBox | QAbstractSpinBox) -> None:
    """Qt's classic trap: a combo or spin box under the pointer takes the wheel (and the
    focus) while a person scrolls past it. Here it takes focus only from a click or Tab,
    and takes the wheel only once it has focus."""
    global _WHEEL_GUARD
    if _WHEEL_GUARD is None:
        _WHEEL_GUARD = _WheelNeedsFocus()
    widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
    widget.installEventFilter(_WHEEL_GUARD)
    widget.setProperty("wheelNeedsFocus", True)


class ElidedButton(QPushButton):
    """A push button that may be narrower than its text: the text is cut with "…" (the
    whole of it in the tooltip) rather than widening the column it sits in."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        # QPushButton's own policy never shrinks below the whole text.
        self.setSizePolicy(QSizePolicy.Policy.Preferred, self.sizePolicy().verticalPolicy())

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        chrome = self.sizeHint().width() - self.fontMetrics().horizontalAdvance(self.text())
        short = chrome + self.fontMetrics().horizontalAdvance(self.text()[:6] + "…")
        return QSize(min(hint.width(), short), hint.height())

    def shown_text(self) -> str:
        """The text as painted at the button's current width (whole at its size hint's:
        elidedText rounds a text exactly as wide as its room down to "…")."""
        if self.width() >= self.sizeHint().width():
            return self.text()
        chrome = self.sizeHint().width() - self.fontMetrics().horizontalAdvance(self.text())
        return self.fontMetrics().elidedText(
            self.text(), Qt.TextElideMode.ElideRight, max(self.width() - chrome, 0)
        )

    def paintEvent(self, event: QPaintEvent) -> None:
        option = QStyleOptionButton()
        self.initStyleOption(option)
        option.text = self.shown_text()
        self.setToolTip(self.text() if option.text != self.text() else "")
        painter = QStylePainter(self)
        painter.drawControl(QStyle.ControlElement.CE_PushButton, option)


class PanelColumn(QScrollArea):
    """A vertical stack of panels that come and go (the API panel, Compare's result, the
    checks...): it scrolls inside its pane instead of growing the window, and hides
    itself when none of its panels is shown."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.panels: list[QWidget] = []
        inner = QWidget()
        inner.setObjectName("panel-column")
        self.column = QVBoxLayout(inner)
        self.column.setContentsMargins(0, 0, 0, 0)
        self.column.setSpacing(SPACING)
        self.setWidget(inner)
        inner.installEventFilter(self)  # its layout's changes change this area's hint
        self.hide()

    def add(self, panel: QWidget, stretch: int = 0) -> None:
        self.column.addWidget(panel, stretch)
        self.panels.append(panel)
        panel.installEventFilter(self)
        self._follow()

    def sizeHint(self) -> QSize:
        """All of its panels when there is room (a scroll area's own hint is capped)."""
        inner = self.widget()
        hint = inner.sizeHint() if inner is not None else QSize(0, 0)
        return QSize(hint.width(), hint.height() + 2 * self.frameWidth())

    def minimumSizeHint(self) -> QSize:
        inner = self.widget()
        width = inner.minimumSizeHint().width() if inner is not None else 0
        return QSize(width, min(self.sizeHint().height(), 60))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() in (QEvent.Type.ShowToParent, QEvent.Type.HideToParent):
            self._follow()
        elif event.type() == QEvent.Type.LayoutRequest and watched is self.widget():
            self.updateGeometry()
        return super().eventFilter(watched, event)

    def _follow(self) -> None:
        self.setVisible(any(not panel.isHidden() for panel in self.panels))
        self.updateGeometry()
