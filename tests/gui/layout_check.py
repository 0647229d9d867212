"""What a person sees laid out whole (issue 35): every visible widget of a window inside
it (or inside the scroll area that holds it), no two laid-out siblings overlapping, and no
text cut to "…" or clipped where it matters. The checks return the problems found, each
named, so a failing test lists them all."""

from __future__ import annotations

from collections.abc import Iterator

from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractScrollArea,
    QGraphicsView,
    QLabel,
    QLayout,
    QLineEdit,
    QScrollBar,
    QWidget,
)

from gui.run.numbers import BigNumbers
from gui.widgets import ElidedButton


def name(widget: QWidget) -> str:
    text = ""
    if isinstance(widget, QLabel | QAbstractButton):
        text = f" {widget.text()[:40]!r}"
    elif isinstance(widget, QLineEdit):
        text = f" placeholder {widget.placeholderText()!r}"
    return f"{type(widget).__name__}{text}"


def laid_out(layout: QLayout) -> Iterator[QWidget]:
    """The widgets ``layout`` places, through its nested layouts."""
    for i in range(layout.count()):
        item = layout.itemAt(i)
        if item is None:
            continue
        if item.widget() is not None:
            yield item.widget()
        elif item.layout() is not None:
            yield from laid_out(item.layout())


def shown(root: QWidget) -> Iterator[QWidget]:
    """Every widget shown under ``root``, not looking inside what draws itself (plots,
    tables' cells) or a scroll area's own parts (its bars and corners)."""
    for child in root.findChildren(QWidget, options=_direct()):
        if not child.isVisible() or isinstance(child, QScrollBar):
            continue
        yield child
        if isinstance(child, QGraphicsView):
            continue
        if isinstance(child, QAbstractScrollArea):
            inner = getattr(child, "widget", lambda: None)()
            if isinstance(inner, QWidget) and inner.isVisible():
                yield inner
                yield from shown(inner)
            continue
        yield from shown(child)


def _direct() -> Qt.FindChildOption:
    return Qt.FindChildOption.FindDirectChildrenOnly


def _scrolled(widget: QWidget, top: QWidget) -> bool:
    parent = widget.parentWidget()
    while parent is not None and parent is not top:
        if isinstance(parent, QAbstractScrollArea):
            return True
        parent = parent.parentWidget()
    return False


def problems(top: QWidget) -> list[str]:
    found: list[str] = []
    room = top.rect()
    for widget in shown(top):
        where = QRect(widget.mapTo(top, QPoint(0, 0)), widget.size())
        if not _scrolled(widget, top) and not room.contains(where):
            found.append(f"{name(widget)} leaves the window: {where} outside {room}")
        found += _cut(widget)
        layout = widget.layout()
        if layout is None:
            continue
        siblings = [w for w in laid_out(layout) if w.isVisible() and w.parentWidget() is widget]
        for i, a in enumerate(siblings):
            for b in siblings[i + 1 :]:
                if a.geometry().intersects(b.geometry()):
                    found.append(
                        f"{name(a)} {a.geometry()} overlaps {name(b)} {b.geometry()} "
                        f"in {name(widget)}"
                    )
            if not widget.rect().contains(a.geometry()):
                found.append(f"{name(a)} {a.geometry()} sticks out of {name(widget)}")
    return found


def _cut(widget: QWidget) -> list[str]:
    """Text the widget shows cut or clipped."""
    metrics = widget.fontMetrics()
    if isinstance(widget, ElidedButton):
        return [] if widget.shown_text() == widget.text() else [f"{name(widget)} is cut"]
    if isinstance(widget, BigNumbers):
        return [f"a number tile's {text!r} is cut" for text in widget.cut()]
    need = widget.sizeHint().width()
    if isinstance(widget, QAbstractButton) and widget.text() and widget.width() < need - 1:
        return [f"{name(widget)} is cut: {widget.width()} < {need}"]
    if isinstance(widget, QLineEdit) and widget.placeholderText() and not widget.text():
        room = widget.width() - 16  # the frame and its padding
        if metrics.horizontalAdvance(widget.placeholderText()) > room:
            return [f"{name(widget)} is cut ({room} px of room)"]
    if isinstance(widget, QLabel) and widget.text() and widget.pixmap().isNull():
        text = widget.text()
        if "<" in text:  # rich text: laid out by Qt's document, checked by its height
            return _clipped(widget)
        if widget.wordWrap():
            return _clipped(widget)
        need = max(metrics.horizontalAdvance(line) for line in text.splitlines() or [""])
        if need > widget.contentsRect().width() + 1:
            return [f"{name(widget)} is cut: {widget.contentsRect().width()} < {need}"]
    return []


def _clipped(label: QLabel) -> list[str]:
    need = label.heightForWidth(label.width())
    if label.hasHeightForWidth() and label.height() < need - 1:
        return [f"{name(label)} is clipped: {label.height()} < {need}"]
    return []
