"""The headline numbers in type big enough to read from across the room.

The four tiles are painted by one opaque widget: a new number (up to ten times a second)
repaints this strip alone, with no layout pass and nothing repainted behind it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QFont, QFontMetrics, QPainter, QPaintEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from core import units
from gui import style

if TYPE_CHECKING:
    from core.run.measure.telemetry import Headline

VALUE_PX, UNIT_PX, CAPTION_PX, NOTE_PX = 40, 15, 12, 12
GAP, PAD_X, PAD_Y, RADIUS = 10, 14, 10, 12


@dataclass
class Tile:
    caption: str
    unit: str
    number: str = "–"
    note: str = ""

    def set(self, number: str, unit: str | None = None, note: str = "") -> bool:
        """True when something shown changed."""
        new = (number, self.unit if unit is None else unit, note)
        if new == (self.number, self.unit, self.note):
            return False
        self.number, self.unit, self.note = new
        return True


class BigNumbers(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.tps = Tile("Tokens per second", "tokens/s")
        self.ttft = Tile("Time to first token", "")
        self.links = Tile("Link traffic", "B/s")
        self.total = Tile("Tokens generated", "")
        self._fonts()
        self.clear()
        style.notifier().changed.connect(self._restyle)  # a method: disconnected on delete

    def tiles(self) -> tuple[Tile, ...]:
        return (self.tps, self.ttft, self.links, self.total)

    def clear(self) -> None:
        self.tps.set("–", note="live, smoothed")
        self.ttft.set("–", "", note="this or the last answer")
        self.links.set("–", "B/s", note="moved by collectives")
        self.total.set("0", note="since Start")
        self.update()

    def update_from(self, headline: Headline, generating: bool, live: bool = True) -> None:
        """Live rate while generating; the last answer's average once it is done. Once
        the job has ended (``live`` False) no link carries anything any more. While
        several answers generate at once the cluster's aggregate leads (``Telemetry``'s:
        every request's tokens together), the current answer's beside it."""
        if generating and headline.generating > 1 and headline.aggregate_tps > 0:
            tps = self.tps.set(
                units.rate(headline.aggregate_tps),
                note=f"all {headline.generating} · this one {units.rate(headline.tokens_per_s)}",
            )
        elif generating and headline.tokens_per_s > 0:
            tps = self.tps.set(units.rate(headline.tokens_per_s), note="live, smoothed")
        elif headline.last_avg_tps is not None:
            tps = self.tps.set(units.rate(headline.last_avg_tps), note="average of the last answer")
        else:
            tps = self.tps.set("–", note="live, smoothed")
        if headline.ttft_s is None:
            ttft = self.ttft.set("–", "", note="this or the last answer")
        else:
            number, _, unit = units.seconds(headline.ttft_s).partition(" ")
            ttft = self.ttft.set(number, unit, note="this or the last answer")
        number, unit = units.bytes_per_s_parts(headline.total_bytes_per_s if live else 0.0)
        links = len(headline.link_bytes_per_s)
        note = (
            "moved by collectives"
            if not links
            else "the job has ended"
            if not live
            else "the link, now"
            if links == 1
            else f"all {links} links, now"
        )
        link = self.links.set(number, unit, note=note)
        total = self.total.set(f"{headline.total_tokens:,}", note="since Start")
        for i, changed in enumerate((tps, ttft, link, total)):
            if changed:  # only that tile's pixels
                self.update(self._tile_rect(i).toAlignedRect())

    def texts(self) -> dict[str, str]:
        return {
            name: f"{tile.number} {tile.unit}".strip()
            for name, tile in (
                ("tps", self.tps),
                ("ttft", self.ttft),
                ("links", self.links),
                ("total", self.total),
            )
        }

    def cut(self) -> list[str]:
        """The captions and notes that do not fit their tile at its width (painted "…")."""
        width = int(self._tile_rect(0).width()) - 2 * PAD_X
        said = [(self.caption_font, t.caption.upper()) for t in self.tiles()]
        said += [(self.note_font, t.note) for t in self.tiles()]
        return [text for font, text in said if QFontMetrics(font).horizontalAdvance(text) > width]

    # -- painting ------------------------------------------------------------------------

    def _fonts(self) -> None:
        self.caption_font = style.ui_font(CAPTION_PX, QFont.Weight.DemiBold)
        self.value_font = style.number_font(VALUE_PX)
        self.unit_font = style.ui_font(UNIT_PX)
        self.note_font = style.ui_font(NOTE_PX)
        self._heights = [
            QFontMetrics(f).height() for f in (self.caption_font, self.value_font, self.note_font)
        ]

    def _restyle(self, _theme: object) -> None:
        self._fonts()
        self.update()

    def sizeHint(self) -> QSize:
        return QSize(4 * 160 + 3 * GAP, sum(self._heights) + 2 * PAD_Y + 2)

    def minimumSizeHint(self) -> QSize:
        return QSize(4 * 120 + 3 * GAP, self.sizeHint().height())

    def paintEvent(self, event: QPaintEvent) -> None:
        theme = style.current()
        painter = QPainter(self)
        painter.fillRect(event.rect(), theme.qcolor("card"))  # the Run card behind the tiles
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.TextAntialiasing)
        for i, tile in enumerate(self.tiles()):
            box = self._tile_rect(i)
            if not event.rect().intersects(box.toAlignedRect()):
                continue
            painter.setPen(theme.qcolor("border"))
            painter.setBrush(theme.qcolor("card_alt"))
            painter.drawRoundedRect(box, RADIUS, RADIUS)
            self._paint_tile(painter, tile, box.adjusted(PAD_X, PAD_Y, -PAD_X, -PAD_Y), theme)

    def _tile_rect(self, i: int) -> QRectF:
        width = (self.width() - 3 * GAP) / 4
        return QRectF(i * (width + GAP) + 0.5, 0.5, width - 1, self.height() - 1)

    def _paint_tile(self, painter: QPainter, tile: Tile, box: QRectF, theme: style.Theme) -> None:
        caption_h, value_h, note_h = self._heights
        top = box.top()
        painter.setFont(self.caption_font)
        painter.setPen(theme.qcolor("text2"))
        caption = QFontMetrics(self.caption_font).elidedText(
            tile.caption.upper(), Qt.TextElideMode.ElideRight, int(box.width())
        )
        painter.drawText(
            QRectF(box.left(), top, box.width(), caption_h),
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            caption,
        )
        top += caption_h
        value_metrics = QFontMetrics(self.value_font)
        baseline = top + value_metrics.ascent()
        painter.setFont(self.value_font)
        painter.setPen(theme.qcolor("text3" if tile.number == "–" else "text"))
        painter.drawText(
            QRectF(box.left(), top, box.width(), value_h),
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            tile.number,
        )
        if tile.unit:
            x = box.left() + value_metrics.horizontalAdvance(tile.number) + 6
            painter.setFont(self.unit_font)
            painter.setPen(theme.qcolor("text2"))
            painter.drawText(int(x), int(baseline), tile.unit)
        top += value_h
        painter.setFont(self.note_font)
        painter.setPen(theme.qcolor("text3"))
        note = QFontMetrics(self.note_font).elidedText(
            tile.note, Qt.TextElideMode.ElideRight, int(box.width())
        )
        painter.drawText(
            QRectF(box.left(), top, box.width(), note_h),
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            note,
        )
