"""Paints the RDMA column as a coloured pill, readable at a glance from across a room.

A pill whose node has a guide (how to turn RDMA on, restart, turn the bridge off) ends
with a chevron: a click on it opens that guide (the pane listens to the table's clicks).
"""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter
from PySide6.QtWidgets import QStyle, QStyledItemDelegate, QStyleOptionViewItem

from gui import style
from gui.cluster.table_model import BadgeRole, RdmaBadge

PAD_X, HEIGHT = 8, 18
CHEVRON = " ›"


def badge_colors(kind: str) -> tuple[str, str]:
    """(text, background) theme colours of a badge kind."""
    theme = style.current()
    return {
        "success": (theme.success, theme.success_bg),
        "warning": (theme.warning, theme.warning_bg),
        "danger": (theme.danger, theme.danger_bg),
        "accent": (theme.accent, theme.selection),
    }.get(kind, (theme.text2, theme.track))


def pill_text(badge: RdmaBadge) -> str:
    return badge.text + (CHEVRON if badge.guide else "")


def pill_rect(cell: QRectF, badge: RdmaBadge) -> QRectF:
    width = QFontMetrics(_font()).horizontalAdvance(pill_text(badge)) + 2 * PAD_X
    return QRectF(cell.left() + 6, cell.center().y() - HEIGHT / 2, width, HEIGHT)


def draw_item_background(
    delegate: QStyledItemDelegate,
    painter: QPainter,
    option: QStyleOptionViewItem,
    index: QModelIndex | QPersistentModelIndex,
) -> None:
    """Stripes and selection, without the item's own text (the delegate draws that)."""
    background = QStyleOptionViewItem(option)
    delegate.initStyleOption(background, index)
    background.text = ""
    widget = option.widget
    qstyle = widget.style() if widget else None
    if qstyle is not None:
        qstyle.drawControl(QStyle.ControlElement.CE_ItemViewItem, background, painter, widget)


def _font() -> QFont:
    return style.ui_font(11, QFont.Weight.DemiBold)


class BadgeDelegate(QStyledItemDelegate):
    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        draw_item_background(self, painter, option, index)
        badge: RdmaBadge | None = index.data(BadgeRole)
        if badge is None:
            return
        fg, bg = badge_colors(badge.kind)
        pill = pill_rect(QRectF(option.rect), badge)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(bg))
        painter.drawRoundedRect(pill, HEIGHT / 2, HEIGHT / 2)
        painter.setPen(QColor(fg))
        painter.setFont(_font())
        painter.drawText(pill, Qt.AlignmentFlag.AlignCenter, pill_text(badge))
        painter.restore()

    def sizeHint(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> QSize:
        badge: RdmaBadge | None = index.data(BadgeRole)
        text = pill_text(badge) if badge else ""
        width = QFontMetrics(_font()).horizontalAdvance(text)
        return QSize(width + 2 * PAD_X + 14, HEIGHT + 10)
