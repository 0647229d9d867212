"""What every plot in the window looks like: the live run's, the fine-tune's and a kept
run's. One place for the theme's colours on the plots, their headings with coloured keys,
and the bare plot and curve the live plots draw into, so the three read alike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGraphicsItem, QHBoxLayout, QLabel, QWidget

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


def bare_curve(plot: pg.PlotItem, pen: Any = None) -> pg.PlotCurveItem:
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


def plot_header(title: str, *widgets: QWidget) -> QHBoxLayout:
    """A plot's heading: its title on the left, ``widgets`` (its key) on the right."""
    row = QHBoxLayout()
    row.setSpacing(10)
    row.addWidget(section(title))
    row.addStretch(1)
    for widget in widgets:
        row.addWidget(widget)
    return row


def key_html(entries: Iterable[KeyEntry], theme: Theme, decimals: int = 3) -> str:
    """The legend as coloured keys for a heading (never over the data), each with its
    newest value in bold when the entry has one."""

    def value(entry: KeyEntry) -> str:
        v = entry[2] if len(entry) == 3 else None
        if v is None or not math.isfinite(v):
            return ""
        return f"&nbsp;<b style='color:{theme.text}'>{v:,.{decimals}f}</b>"

    return "&nbsp;&nbsp;&nbsp;".join(
        f'<span style="color:{entry[0]}; font-weight:700">▬</span>&nbsp;'
        f'<span style="color:{theme.text2}">{entry[1]}</span>{value(entry)}'
        for entry in entries
    )


def center_hint(hint: QLabel, over: QWidget) -> None:
    """Place an empty plot's hint in the middle of ``over`` (on every resize)."""
    width = min(360, over.width() - 40)
    hint.setGeometry((over.width() - width) // 2, over.height() // 2 - 30, width, 60)
