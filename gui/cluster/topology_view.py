"""The Thunderbolt map widget: paints a ``topology_scene.Scene`` with the current theme's
colours (Macs as rounded boxes, cables coloured by RDMA state, missing mesh cables
dashed, the verdict above and what to connect below) and answers tooltips from it.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QEvent, QPointF, QRectF, QSize, Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetrics,
    QHelpEvent,
    QPainter,
    QPaintEvent,
    QPen,
    QResizeEvent,
)
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from gui import style
from gui.cluster.topology_diagram import MISSING_COLOR, Diagram
from gui.cluster.topology_scene import (
    LEGEND_H,
    NOTE_H,
    TAG_H,
    Line,
    Measured,
    Scene,
    Tag,
    layout_scene,
    scene_fonts,
)


class TopologyView(QWidget):
    """Paints a ``Diagram``; ``scene`` is what it drew at its current width."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.diagram: Diagram | None = None
        self.scene: Scene | None = None
        self.measured: dict[frozenset[str], Measured] = {}
        self.setMouseTracking(True)
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)
        style.notifier().changed.connect(self._restyle)  # a method: disconnected on delete

    def _restyle(self, _theme: object = None) -> None:
        self.update()

    def set_diagram(self, diagram: Diagram | None) -> None:
        self.diagram = diagram
        self._relayout()

    def set_measured(self, measured: dict[frozenset[str], Measured]) -> None:
        """Captions from a link test or live traffic, per pair of Macs ({}: none)."""
        if measured != self.measured:
            self.measured = dict(measured)
            self._relayout()

    def _relayout(self) -> None:
        width = self.width() if self.width() > 50 else 400
        self.scene = layout_scene(self.diagram, width, self.measured) if self.diagram else None
        self.setFixedHeight(math.ceil(self.scene.height) if self.scene else 0)
        self.update()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self.scene is None or abs(self.scene.width - self.width()) > 0.5:
            self._relayout()

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        if not self.diagram:
            return 0
        return math.ceil(layout_scene(self.diagram, width, self.measured).height)

    def sizeHint(self) -> QSize:
        return QSize(400, self.heightForWidth(400))

    # -- tooltips ---------------------------------------------------------------------

    def item_at(self, point: QPointF) -> str | None:
        """The tooltip for what is under ``point``: a box, a tag, a caption or a line."""
        scene = self.scene
        if scene is None:
            return None
        for box in scene.boxes:
            if box.rect.contains(point):
                return f"{box.name}\n{box.subtitle}".strip()
        for line in scene.lines:
            near = [tag.rect for tag in line.tags] + (
                [line.caption_rect] if line.caption_rect else []
            )
            if any(rect.contains(point) for rect in near) or _distance(point, line) < 5:
                return line.tooltip
        return None

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            text = self.item_at(QPointF(event.pos()))
            if text:
                QToolTip.showText(event.globalPos(), text, self)
            else:
                QToolTip.hideText()
                event.ignore()
            return True
        return super().event(event)

    # -- painting ---------------------------------------------------------------------

    def paintEvent(self, event: QPaintEvent) -> None:
        scene = self.scene
        if scene is None:
            return
        theme = style.current()
        fonts = scene_fonts()
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        self._paint_headline(painter, scene, fonts)
        for line in sorted(scene.lines, key=lambda item: not item.dashed):  # missing below
            pen = QPen(theme.qcolor(line.color), 1.6 if line.dashed else 2.4)
            if line.dashed:
                pen.setStyle(Qt.PenStyle.DashLine)
            pen.setCapStyle(Qt.PenCapStyle.RoundCap)
            painter.setPen(pen)
            painter.drawLine(line.p1, line.p2)
        for box in scene.boxes:
            painter.setPen(QPen(theme.qcolor("accent" if box.is_self else "border"), 1.2))
            painter.setBrush(theme.qcolor("card_alt"))
            painter.drawRoundedRect(box.rect, 9, 9)
            inner = box.rect.adjusted(8, 5, -8, -5)
            painter.setFont(fonts["title"])
            painter.setPen(theme.qcolor("text"))
            title = QFontMetrics(fonts["title"]).elidedText(
                box.name, Qt.TextElideMode.ElideRight, int(inner.width())
            )
            painter.drawText(
                QRectF(inner.left(), inner.top(), inner.width(), inner.height() / 2 + 2),
                Qt.AlignmentFlag.AlignCenter,
                title,
            )
            painter.setFont(fonts["sub"])
            painter.setPen(theme.qcolor("text2"))
            sub = QFontMetrics(fonts["sub"]).elidedText(
                box.subtitle, Qt.TextElideMode.ElideRight, int(inner.width())
            )
            painter.drawText(
                QRectF(inner.left(), inner.center().y(), inner.width(), inner.height() / 2),
                Qt.AlignmentFlag.AlignCenter,
                sub,
            )
        for line in scene.lines:
            for tag in line.tags:
                self._paint_tag(painter, tag, line, fonts["tag"])
            if line.caption and line.caption_rect is not None:
                painter.setPen(Qt.PenStyle.NoPen)
                painter.setBrush(theme.qcolor("card"))
                painter.drawRoundedRect(line.caption_rect, 5, 5)
                painter.setFont(fonts["measured" if line.measured else "caption"])
                painter.setPen(theme.qcolor("accent" if line.measured else "text2"))
                painter.drawText(line.caption_rect, Qt.AlignmentFlag.AlignCenter, line.caption)
        self._paint_notes(painter, scene, fonts)
        painter.end()

    def _paint_tag(self, painter: QPainter, tag: Tag, line: Line, font: QFont) -> None:
        theme = style.current()
        pen = QPen(theme.qcolor(line.color), 1.2)
        if line.dashed:
            pen.setStyle(Qt.PenStyle.DashLine)
        painter.setPen(pen)
        painter.setBrush(theme.qcolor("card"))
        painter.drawRoundedRect(tag.rect, TAG_H / 2, TAG_H / 2)
        painter.setFont(font)
        painter.setPen(theme.qcolor("text" if not line.dashed else "text2"))
        painter.drawText(tag.rect, Qt.AlignmentFlag.AlignCenter, tag.text)

    def _paint_headline(self, painter: QPainter, scene: Scene, fonts: dict[str, QFont]) -> None:
        from gui.cluster.badge_delegate import badge_colors

        fg, bg = badge_colors(scene.headline_kind)
        metrics = QFontMetrics(fonts["headline"])
        pill = QRectF(0, 2, metrics.horizontalAdvance(scene.headline) + 18, 20)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(bg))
        painter.drawRoundedRect(pill, 10, 10)
        painter.setFont(fonts["headline"])
        painter.setPen(QColor(fg))
        painter.drawText(pill, Qt.AlignmentFlag.AlignCenter, scene.headline)
        painter.setFont(fonts["note"])
        painter.setPen(style.current().qcolor("text2"))
        painter.drawText(
            QRectF(pill.right() + 10, 2, scene.width - pill.right() - 10, 20),
            Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
            scene.summary,
        )

    def _paint_notes(self, painter: QPainter, scene: Scene, fonts: dict[str, QFont]) -> None:
        theme = style.current()
        y = scene.notes_top
        metrics = QFontMetrics(fonts["note"])
        for note, kind in scene.note_lines:
            if kind != "more":
                pen = QPen(theme.qcolor("accent" if kind == "ring" else MISSING_COLOR), 1.6)
                if kind == "missing":
                    pen.setStyle(Qt.PenStyle.DashLine)
                painter.setPen(pen)
                painter.drawLine(QPointF(2, y + NOTE_H / 2), QPointF(20, y + NOTE_H / 2))
            painter.setFont(fonts["note"])
            painter.setPen(theme.qcolor("text2"))
            text = metrics.elidedText(note, Qt.TextElideMode.ElideRight, int(scene.width - 28))
            painter.drawText(
                QRectF(28, y, scene.width - 28, NOTE_H),
                Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                text,
            )
            y += NOTE_H
        if not scene.legend:
            return
        y += 6
        x = 0.0
        for words, color, dashed in scene.legend:
            pen = QPen(theme.qcolor(color), 1.6 if dashed else 2.4)
            if dashed:
                pen.setStyle(Qt.PenStyle.DashLine)
            painter.setPen(pen)
            painter.drawLine(QPointF(x + 2, y + LEGEND_H / 2), QPointF(x + 20, y + LEGEND_H / 2))
            painter.setPen(theme.qcolor("text3"))
            painter.setFont(fonts["note"])
            w = metrics.horizontalAdvance(words)
            painter.drawText(
                QRectF(x + 26, y, w + 4, LEGEND_H),
                Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                words,
            )
            x += 26 + w + 18


def _distance(point: QPointF, line: Line) -> float:
    ax, ay, bx, by = line.p1.x(), line.p1.y(), line.p2.x(), line.p2.y()
    dx, dy = bx - ax, by - ay
    length2 = dx * dx + dy * dy or 1.0
    t = max(0.0, min(1.0, ((point.x() - ax) * dx + (point.y() - ay) * dy) / length2))
    return math.hypot(point.x() - (ax + t * dx), point.y() - (ay + t * dy))
