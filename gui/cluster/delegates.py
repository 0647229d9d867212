"""Paint a node row's name (state dot or spinner, name, "this Mac") and, while a node is
not ready, its status across the fact columns with the one action it needs.

The words come from ``table_model`` (``StatusRole``, ``HintRole``); these only paint and
turn a click on the action pill into ``action_requested(name, action)``.
"""

from __future__ import annotations

from PySide6.QtCore import (
    QAbstractItemModel,
    QEvent,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPointF,
    QRectF,
    QSize,
    Qt,
    Signal,
)
from PySide6.QtGui import QColor, QFont, QFontMetrics, QMouseEvent, QPainter, QPen
from PySide6.QtWidgets import QStyledItemDelegate, QStyleOptionViewItem

from gui import style
from gui.cluster.badge_delegate import badge_colors, draw_item_background
from gui.cluster.table_model import HintRole, Status, StatusRole

Index = QModelIndex | QPersistentModelIndex
DOT_X, DOT_R, TEXT_X = 12, 4.0, 24
ACTION_H, ACTION_PAD = 22, 10


def state_color(current: Status | None) -> str:
    """The dot's colour: green when ready, else the status's kind."""
    theme = style.current()
    if current is None:
        return theme.success
    if current.busy:
        return theme.accent
    return badge_colors(current.kind)[0] if current.kind != "muted" else theme.text3


class NameDelegate(QStyledItemDelegate):
    """● name (and under it "this Mac") — the dot is green when ready, a spinner while
    probing, amber or red when the node needs something."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.phase = 0.0  # the spinner's angle in degrees, advanced by the pane's timer

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        draw_item_background(self, painter, option, index)
        theme = style.current()
        rect = QRectF(option.rect)
        current: Status | None = index.data(StatusRole)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        centre = QPointF(rect.left() + DOT_X, rect.center().y())
        color = QColor(state_color(current))
        if current is not None and current.busy:
            pen = QPen(color, 1.8)
            pen.setCapStyle(Qt.PenCapStyle.RoundCap)
            painter.setPen(pen)
            arc = QRectF(centre.x() - 5, centre.y() - 5, 10, 10)
            painter.drawArc(arc, int(-self.phase * 16), 270 * 16)
        else:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(color)
            painter.drawEllipse(centre, DOT_R, DOT_R)
        name_font = style.ui_font(13, QFont.Weight.Medium)
        hint_font = style.ui_font(11)
        note = index.data(HintRole) or ""
        room = int(max(rect.width() - TEXT_X - 4, 20))
        name = QFontMetrics(name_font).elidedText(
            index.data() or "", Qt.TextElideMode.ElideRight, room
        )
        left = Qt.AlignmentFlag.AlignLeft
        painter.setFont(name_font)
        painter.setPen(theme.qcolor("text"))
        x = rect.left() + TEXT_X
        if not note:
            painter.drawText(
                QRectF(x, rect.top(), room, rect.height()),
                left | Qt.AlignmentFlag.AlignVCenter,
                name,
            )
        else:  # the name, and under it the note ("this Mac", "Linux · ring only")
            mid = rect.center().y()
            painter.drawText(
                QRectF(x, mid - 18, room, 18), left | Qt.AlignmentFlag.AlignBottom, name
            )
            painter.setFont(hint_font)
            painter.setPen(theme.qcolor("text3"))
            painter.drawText(
                QRectF(x, mid + 1, room, 15),
                left | Qt.AlignmentFlag.AlignTop,
                QFontMetrics(hint_font).elidedText(note, Qt.TextElideMode.ElideRight, room),
            )
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:
        name = QFontMetrics(style.ui_font(13, QFont.Weight.Medium))
        note = QFontMetrics(style.ui_font(11)).horizontalAdvance(index.data(HintRole) or "")
        width = max(name.horizontalAdvance(index.data() or ""), note) + TEXT_X + 8
        return QSize(width, 34)


def action_rect(cell: QRectF, label: str) -> QRectF:
    """Where a status's action pill sits: at the right end of the spanned cell."""
    width = QFontMetrics(_action_font()).horizontalAdvance(label) + 2 * ACTION_PAD
    return QRectF(cell.right() - width - 6, cell.center().y() - ACTION_H / 2, width, ACTION_H)


def _action_font() -> QFont:
    return style.ui_font(12, QFont.Weight.DemiBold)


class StatusDelegate(QStyledItemDelegate):
    """The chip column: the chip when ready; otherwise, across the fact columns (the pane
    spans them), the status headline, its reason, and the action pill."""

    action_requested = Signal(str, str)  # node name, action (table_model.TRUST ...)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        current: Status | None = index.data(StatusRole)
        if current is None:
            super().paint(painter, option, index)
            return
        draw_item_background(self, painter, option, index)
        theme = style.current()
        rect = QRectF(option.rect).adjusted(6, 0, 0, 0)
        right = rect.right()
        if current.action:
            pill = action_rect(QRectF(option.rect), current.action_label)
            right = pill.left() - 8
        width = max(int(right - rect.left()), 10)
        title_font = style.ui_font(12, QFont.Weight.DemiBold)
        detail_font = style.ui_font(11)
        kind_color = {"muted": theme.text2}.get(current.kind) or badge_colors(current.kind)[0]
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        title = QFontMetrics(title_font).elidedText(
            current.title, Qt.TextElideMode.ElideRight, width
        )
        left = Qt.AlignmentFlag.AlignLeft
        if current.detail:
            detail = QFontMetrics(detail_font).elidedText(
                current.detail, Qt.TextElideMode.ElideRight, width
            )
            mid = rect.center().y()
            painter.setFont(title_font)
            painter.setPen(QColor(kind_color))
            painter.drawText(
                QRectF(rect.left(), mid - 17, width, 17), left | Qt.AlignmentFlag.AlignBottom, title
            )
            painter.setFont(detail_font)
            painter.setPen(theme.qcolor("text2"))
            painter.drawText(
                QRectF(rect.left(), mid + 1, width, 16), left | Qt.AlignmentFlag.AlignTop, detail
            )
        else:
            painter.setFont(title_font)
            painter.setPen(QColor(kind_color))
            painter.drawText(
                QRectF(rect.left(), rect.top(), width, rect.height()),
                left | Qt.AlignmentFlag.AlignVCenter,
                title,
            )
        if current.action:
            pill = action_rect(QRectF(option.rect), current.action_label)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(theme.qcolor("selection"))
            painter.drawRoundedRect(pill, 6, 6)
            painter.setFont(_action_font())
            painter.setPen(theme.qcolor("accent"))
            painter.drawText(pill, Qt.AlignmentFlag.AlignCenter, current.action_label)
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:
        if index.data(StatusRole) is not None:  # spans the fact columns: widens none
            return QSize(0, 34)
        return super().sizeHint(option, index)

    def editorEvent(
        self,
        event: QEvent,
        model: QAbstractItemModel,
        option: QStyleOptionViewItem,
        index: Index,
    ) -> bool:
        current: Status | None = index.data(StatusRole)
        if (
            current is not None
            and current.action
            and event.type() == QEvent.Type.MouseButtonRelease
            and isinstance(event, QMouseEvent)
            and event.button() == Qt.MouseButton.LeftButton
            and action_rect(QRectF(option.rect), current.action_label).contains(event.position())
        ):
            self.action_requested.emit(str(index.sibling(index.row(), 0).data()), current.action)
            return True
        return super().editorEvent(event, model, option, index)
