"""Paints the RDMA column as a coloured pill, readable at a glance from across a room."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRectF, QSize, Qt
from PySide6.QtGui import QFontMetrics, QPainter
from PySide6.QtWidgets import QStyle, QStyledItemDelegate, QStyleOptionViewItem

from gui import style
from gui.nodes.table_model import RdmaRole, rdma_text

PAD_X, HEIGHT = 8, 18


class BadgeDelegate(QStyledItemDelegate):
    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        background = QStyleOptionViewItem(option)
        self.initStyleOption(background, index)
        background.text = ""
        widget = option.widget
        qstyle = widget.style() if widget else None
        if qstyle is not None:  # selection and stripes, without the text
            qstyle.drawControl(QStyle.ControlElement.CE_ItemViewItem, background, painter, widget)
        rdma = index.data(RdmaRole)
        theme = style.current()
        fg, bg = {
            True: (theme.success, theme.success_bg),
            False: (theme.warning, theme.warning_bg),
        }.get(rdma, (theme.text2, theme.track))
        text = rdma_text(rdma)
        font = style.ui_font(11, style.QFont.Weight.DemiBold)
        width = QFontMetrics(font).horizontalAdvance(text) + 2 * PAD_X
        rect = QRectF(option.rect)
        pill = QRectF(rect.left() + 6, rect.center().y() - HEIGHT / 2, width, HEIGHT)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(style.QColor(bg))
        painter.drawRoundedRect(pill, HEIGHT / 2, HEIGHT / 2)
        painter.setPen(style.QColor(fg))
        painter.setFont(font)
        painter.drawText(pill, Qt.AlignmentFlag.AlignCenter, text)
        painter.restore()

    def sizeHint(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> QSize:
        font = style.ui_font(11, style.QFont.Weight.DemiBold)
        width = QFontMetrics(font).horizontalAdvance(rdma_text(index.data(RdmaRole)))
        return QSize(width + 2 * PAD_X + 14, HEIGHT + 10)
