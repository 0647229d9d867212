"""What every plot in the window looks like: the live run's, the fine-tune's and a kept
run's. One place for the theme's colours on the plots, their headings with coloured keys,
and the bare plot and curve the live plots draw into, so the three read alike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtGui import QResizeEvent, QTextDocument
from PySide6.QtWidgets import QGraphicsItem, QGridLayout, QLabel, QWidget

from gui import style
from gui.style import Theme
from gui.widgets import section

AXES = ("left", "bottom")
Y_FOOT = 0.04  # share of the y range below 0, so the 0 tick keeps its label
GRID_ALPHA = 0.12
MIN_HEIGHT = 110
LABEL_PX = 11

#: A key's entry: (colour, name) or (colour, name, newest value or None).
KeyEntry = tuple[str, str] | tuple[str, str, float | None]


def live_plot(y_label: str, axis_items: dict[str, pg.AxisItem] | None = None) -> pg.PlotWidget:
    """A plot redrawn by a timer: no menu or buttons, horizontal grid lines only (vertical
    ones would redraw as time scrolls), axes blitted from a pixmap between changes, and an
    opaque viewport (a redraw repaints the plot, not the cards behind it). ``y_label`` (and
    a ``units`` property, when set) is the y axis' label ``theme_plot`` writes."""
    widget = pg.PlotWidget(axisItems=axis_items)
    item = widget.getPlotItem()
    item.setMenuEnabled(False)
    item.hideButtons()
    item.showGrid(x=False, y=True, alpha=GRID_ALPHA)
    for name in AXES:
        item.getAxis(name).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
    widget.setMinimumHeight(MIN_HEIGHT)
    widget.viewport().setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
    widget.setProperty("y_label", y_label)
    return widget


def bare_curve(plot: pg.PlotItem, pen: object = None) -> pg.PlotCurveItem:
    """A curve for data that arrives windowed and downsampled already: PlotDataItem's own
    clipping and downsampling layers would only add work. NaNs break the line."""
    curve = pg.PlotCurveItem(pen=pen, connect="finite")
    plot.addItem(curve)
    return curve


def label_style(theme: Theme) -> dict[str, str]:
    """An axis label's colour and size, as pyqtgraph's ``setLabel`` takes them."""
    return {"color": theme.text2, "font-size": f"{LABEL_PX}px"}


def theme_plot(widget: pg.PlotWidget, theme: Theme, *, tick_px: int | None = None) -> None:
    """``theme``'s colours on a plot: the card's behind it, the border's on its axes, the
    secondary text's on their numbers (in the UI font at ``tick_px``, when given). A plot
    with a ``y_label`` property (``live_plot``) gets its y label in the same colour."""
    widget.setBackground(theme.card)
    item = widget.getPlotItem()
    tick_font = style.ui_font(tick_px) if tick_px is not None else None
    for name in AXES:
        axis = item.getAxis(name)
        axis.setPen(pg.mkPen(theme.border))
        axis.setTextPen(pg.mkPen(theme.text2))
        if tick_font is not None:
            axis.setStyle(tickFont=tick_font)
    y_label = widget.property("y_label")
    if y_label is not None:
        item.setLabel("left", y_label, units=widget.property("units"), **label_style(theme))


class PlotHeading(QWidget):
    """A plot's heading: its title on the left and its key (then ``extras``: a button) on
    the right when they fit on one line. Where they do not (four links' names beside a
    long title in a narrow column, or a full-screen presentation on a small display), the
    key moves to the line under the title and wraps between its entries: title and key
    never overlap, and no key forces its column wider than the window."""

    SPACING = 10

    def __init__(self, title: str, key: QLabel | None = None, *extras: QWidget) -> None:
        super().__init__()
        self.title = section(title)
        self.key = key
        self.extras = extras
        self.stacked: bool | None = None  # the key under the title (None: not placed yet)
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(self.SPACING)
        grid.setVerticalSpacing(2)
        grid.setColumnStretch(1, 1)
        self._grid = grid
        self._place(stacked=False)

    def one_line_width(self) -> int:
        """The width title, key and extras take on one line."""
        parts = [self.title.sizeHint().width()]
        parts += [w.sizeHint().width() for w in self.extras if not w.isHidden()]
        if self.key is not None and self.key.text():
            parts.append(natural_width(self.key))
        return sum(parts) + self.SPACING * (len(parts) - 1)

    def minimumSizeHint(self) -> QSize:
        """As narrow as the title's longest word (and the extras), the key wrapped under
        it: never the one-line width, or the heading would hold its column open."""
        extras = sum(w.sizeHint().width() + self.SPACING for w in self.extras if not w.isHidden())
        metrics = self.title.fontMetrics()
        word = max((metrics.horizontalAdvance(w) for w in self.title.text().split()), default=0)
        return QSize(word + extras, super().minimumSizeHint().height())

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:  # a key's text changed: fit anew
            self._fit(self.width())
        return super().event(event)

    def resizeEvent(self, event: QResizeEvent) -> None:
        self._fit(event.size().width())
        super().resizeEvent(event)

    def _fit(self, width: int) -> None:
        stacked = width > 0 and self.one_line_width() > width
        if stacked != self.stacked:
            self._place(stacked)
        # Narrower than the title itself (a crowded window): it wraps, never cut.
        extras = sum(w.sizeHint().width() + self.SPACING for w in self.extras if not w.isHidden())
        title = self.title.fontMetrics().horizontalAdvance(self.title.text())
        wrap = width > 0 and title + extras > width
        if wrap != self.title.wordWrap():
            self.title.setWordWrap(wrap)

    def _place(self, stacked: bool) -> None:
        grid = self._grid
        for widget in (self.title, self.key, *self.extras):
            if widget is not None:
                grid.removeWidget(widget)
        grid.addWidget(self.title, 0, 0)
        for i, extra in enumerate(self.extras):
            grid.addWidget(extra, 0, 3 + i)
        if self.key is not None:
            self.key.setWordWrap(stacked)
            if stacked:
                grid.addWidget(self.key, 1, 0, 1, 3 + len(self.extras))
            else:
                grid.addWidget(self.key, 0, 2, Qt.AlignmentFlag.AlignRight)
        self.stacked = stacked


def plot_header(title: str, key: QLabel | None = None, *extras: QWidget) -> PlotHeading:
    """A plot's heading (``PlotHeading``): its title, then its key and ``extras``."""
    return PlotHeading(title, key, *extras)


def natural_width(text_label: QLabel) -> int:
    """The width of a label's rich text on one line, unwrapped."""
    document = QTextDocument()
    document.setDocumentMargin(0)
    document.setDefaultFont(text_label.font())
    document.setHtml(text_label.text())
    return math.ceil(document.idealWidth()) + 2 * text_label.margin() + 2


def key_html(entries: Iterable[KeyEntry], theme: Theme, decimals: int = 3) -> str:
    """The legend as coloured keys for a heading (never over the data), each with its
    newest value in bold when the entry has one."""

    def value(entry: KeyEntry) -> str:
        v = entry[2] if len(entry) == 3 else None
        if v is None or not math.isfinite(v):
            return ""
        return f"&nbsp;<b style='color:{theme.text}'>{v:,.{decimals}f}</b>"

    return "&nbsp;&nbsp; ".join(  # a space between entries: a narrow key wraps there
        f'<span style="white-space:nowrap"><span style="color:{entry[0]}; font-weight:700">'
        f'▬</span>&nbsp;<span style="color:{theme.text2}">{entry[1]}</span>{value(entry)}'
        "</span>"
        for entry in entries
    )


def center_hint(hint: QLabel, over: QWidget) -> None:
    """Place an empty plot's hint in the middle of ``over`` (on every resize)."""
    width = min(360, over.width() - 40)
    hint.setGeometry((over.width() - width) // 2, over.height() // 2 - 30, width, 60)
