"""Live plots: tokens/s, bytes/s per link, memory per node (docs/design.md, rule 5).

Data never pushes a redraw: ``refresh`` is called by the Run pane's timer at a fixed
rate, reads copies from ``Telemetry`` and hands pyqtgraph only the samples in (and just
around) the visible time window, so a redraw costs the same after a minute or an hour.
Times are seconds since Start (Telemetry's clock is ``time.monotonic()``). The view
follows the present (time moves on while the cluster idles) until the person pans or
zooms; "Back to live" resumes it. Every line holds at zero or breaks across idle time
(``gui.run.plot_data``), and each y axis fits what its view shows: after a link test at
GB/s has left the view (or the person looks at a chat answer alone), KB/s of chat
traffic fill the plot instead of lying flat on its floor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Protocol

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QResizeEvent
from PySide6.QtWidgets import QPushButton, QVBoxLayout, QWidget

from core.plan.planner import Plan
from core.run.measure.telemetry import Telemetry
from gui import style
from gui.plot_style import (
    LABEL_PX,
    Y_FOOT,
    bare_curve,
    center_hint,
    key_html,
    live_plot,
    plot_header,
    theme_plot,
)
from gui.run.plot_data import (
    axis_top,
    break_gaps,
    hold_zero,
    peak_downsample,
    visible_peak,
    zero_idle,
)
from gui.style import Theme, set_role
from gui.widgets import label

# The least height each plot reads at (pyqtgraph's own is more): with a panel open above
# them on a 1280×800 screen the three still fit their column, whole, none over another.
TIME_PLOT_MIN_H, MEMORY_PLOT_MIN_H = 76, 64
WINDOW_S = 180.0  # what the plots show while following: the last three minutes
MIN_WINDOW_S = 30.0
MARGIN = 0.05  # share of the window kept beyond each edge, so lines run off the plot
LINK_EVERY = 2  # ticks between link redraws
STEPS_PER_WINDOW = 90  # the followed window moves in steps of 1/90 of it (2 s of 3 min)


class LiveSource(Protocol):
    """What the plots read: ``RunController`` in the app, a stand-in in the benchmark."""

    telemetry: Telemetry | None
    t0: float
    plan: Plan | None
    averages: list[tuple[float, float, float]]

    def rank_names(self) -> dict[int, str]: ...


class TimeAxis(pg.AxisItem):  # type: ignore[misc]  # pyqtgraph is untyped
    """Seconds since Start as m:ss."""

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        return [f"{int(v // 60)}:{int(v % 60):02d}" if v >= 0 else "" for v in values]


def _plot(y_label: str, units: str | None, time_axis: bool = True) -> pg.PlotWidget:
    # Clipping to the view and peak downsampling happen in _set_window, once per tick:
    # pyqtgraph's own would redo them (and repaint again) on every range change. Axes
    # change at most once a second (the time axis moves in whole steps, the value axis
    # keeps its top while it can), so live_plot's cached axes rarely redraw.
    axes = {"bottom": TimeAxis(orientation="bottom")} if time_axis else None
    widget = live_plot(y_label, axes)
    item = widget.getPlotItem()
    item.setLabel("left", y_label, units=units)
    item.getViewBox().setMouseEnabled(x=time_axis, y=False)
    if time_axis:
        widget.setToolTip(
            "The last 3 minutes, following the newest data. Drag or scroll to "
            'look back; "Back to live" follows again.'
        )
    widget.setProperty("units", units)
    return widget


class LivePlots(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.following = True
        self._window = WINDOW_S
        self._tokens_top = self._links_top = 1.0
        self._ticks = 0
        self._newest = 0.0
        self.tokens = _plot("", None)
        item = self.tokens.getPlotItem()
        self.instant, self.smoothed, self.average = (bare_curve(item) for _ in range(3))
        # the cluster's tokens/s, every request together (``Telemetry.aggregate_series``)
        self.cluster = bare_curve(item)
        self.links = _plot("", "B/s")
        self.links.setXLink(self.tokens)
        self.link_curves: dict[str, pg.PlotCurveItem] = {}
        self._link_names: dict[str, str] = {}
        self.memory = _plot("", "B", time_axis=False)
        self.planned_bars = pg.BarGraphItem(x=[], height=[], width=0.36)
        self.used_bars = pg.BarGraphItem(x=[], height=[], width=0.36)
        mem_item = self.memory.getPlotItem()
        mem_item.addItem(self.planned_bars)
        mem_item.addItem(self.used_bars)
        self._memory_key: tuple[tuple[tuple[int, int], ...], ...] | None = None
        mem_item.getAxis("bottom").setTicks([[], []])
        for plot, least in (
            (self.tokens, TIME_PLOT_MIN_H),
            (self.links, TIME_PLOT_MIN_H),
            (self.memory, MEMORY_PLOT_MIN_H),
        ):
            plot.setMinimumHeight(least)
        self.token_key = label("", "hint")
        self.link_key = label("", "hint")
        self.memory_key = label("", "hint")
        self.live_button = QPushButton("Back to live")
        set_role(self.live_button, "link")
        self.live_button.hide()
        self.live_button.clicked.connect(self.follow)
        self.tokens.getPlotItem().getViewBox().sigRangeChangedManually.connect(self._panned)
        self.links.getPlotItem().getViewBox().sigRangeChangedManually.connect(self._panned)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addWidget(plot_header("Tokens per second", self.token_key, self.live_button))
        layout.addWidget(self.tokens, 3)
        layout.addWidget(
            plot_header("Link bandwidth · bytes moved by MLX collectives", self.link_key)
        )
        layout.addWidget(self.links, 3)
        layout.addWidget(plot_header("Memory per node", self.memory_key))
        layout.addWidget(self.memory, 2)
        self.empty_hint = label(
            "Press Start: tokens per second, link traffic and memory "
            "appear here as the cluster works.",
            "hint",
            wrap=True,
        )
        self.empty_hint.setParent(self)
        self.empty_hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._show_values(False)
        style.notifier().changed.connect(self.apply_theme)
        self.apply_theme(style.current())
        self.tokens.getPlotItem().getViewBox().setRange(
            xRange=(0, MIN_WINDOW_S), yRange=(-Y_FOOT, 1), padding=0
        )
        self.links.getPlotItem().getViewBox().setRange(yRange=(-Y_FOOT * 1000, 1000), padding=0)
        for widget in (self.tokens, self.links):  # ranges are set by refresh, never guessed
            widget.getPlotItem().getViewBox().disableAutoRange()

    # -- the timer's work --------------------------------------------------------------------

    def refresh(self, source: LiveSource) -> None:
        telemetry = source.telemetry
        if telemetry is None:
            return
        t0 = source.t0
        if not self._has_data:
            self._show_values(True)
        links_due = self.links_due()
        self._ticks += 1
        rates = telemetry.tokens_per_s()
        # Links report every half second: redrawing them every other tick shows every report.
        links = telemetry.link_series() if links_due else {}
        newest = (
            max(
                (
                    series[0][-1]
                    for series in (rates.instant, rates.smoothed, *links.values())
                    if len(series[0])
                ),
                default=t0,
            )
            - t0
        )
        now = telemetry.now()
        if now is not None:  # the present, not the last sample: idle time passes on screen
            newest = max(newest, now - t0)
        newest = max(newest, self._newest)
        self._newest = newest
        present = None if now is None else now - t0
        if self.following:  # the window moves in whole steps: the axes redraw once a step
            step = self._window / STEPS_PER_WINDOW
            high = max(math.ceil(newest / step) * step + step, MIN_WINDOW_S)
            low = max(0.0, high - self._window)
        else:
            low, high = self.tokens.getPlotItem().getViewBox().viewRange()[0]
        span = max(high - low, 1.0)
        lo, hi = t0 + low - MARGIN * span, t0 + high + MARGIN * span
        view = (low, high)
        peak = max(
            _set_window(self.instant, rates.instant, lo, hi, t0, view, break_gaps),
            _set_window(
                self.smoothed, rates.smoothed, lo, hi, t0, view, partial(hold_zero, now=present)
            ),
            self._set_averages(source.averages, low, high),
            _set_window(
                self.cluster,
                telemetry.aggregate_series(),
                lo,
                hi,
                t0,
                view,
                partial(hold_zero, now=present),
            ),
        )
        self._tokens_top = axis_top(self._tokens_top, peak, 1.0)
        self._set_view(self.tokens, (low, high) if self.following else None, self._tokens_top)
        names = source.rank_names()
        if links:
            link_peak = 0.0
            for link, series in links.items():
                curve = self.link_curves.get(link) or self._add_link(link, names)
                shape = partial(zero_idle, now=present)
                link_peak = max(link_peak, _set_window(curve, series, lo, hi, t0, view, shape))
            self._links_top = axis_top(self._links_top, link_peak, 1000.0)
            self._set_view(self.links, None, self._links_top)
        for widget in (self.tokens, self.links):
            # pyqtgraph applies a range change while painting, and that change asks for a
            # second paint: apply it now, so each tick paints once.
            widget.getPlotItem().getViewBox().updateMatrix()
        self._set_memory(telemetry.peak_memory(), source.plan)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        center_hint(self.empty_hint, self)

    def _show_values(self, shown: bool) -> None:
        """No numbers on empty axes (0.2, 0.4 ... of nothing); a hint instead."""
        self.empty_hint.setVisible(not shown)
        self.empty_hint.raise_()
        for widget in (self.tokens, self.links, self.memory):
            widget.getPlotItem().getAxis("left").setStyle(showValues=shown)
        self._has_data = shown

    def links_due(self) -> bool:
        """Whether the next refresh redraws the link plot too."""
        return self._ticks % LINK_EVERY == 0

    def clear(self) -> None:
        curves = (self.instant, self.smoothed, self.average, self.cluster)
        for curve in (*curves, *self.link_curves.values()):
            curve.setData([], [])
            curve._drawn_key = None
        for link in list(self.link_curves):
            self.links.getPlotItem().removeItem(self.link_curves.pop(link))
        self._link_names = {}
        self._memory_key = None
        self._tokens_top = self._links_top = 1.0
        self._ticks, self._newest = 0, 0.0
        self.planned_bars.setOpts(x=[], height=[])
        self.used_bars.setOpts(x=[], height=[])
        self.memory.getPlotItem().getAxis("bottom").setTicks([[], []])
        self._update_keys(style.current())
        self._show_values(False)
        self.follow()

    def follow(self) -> None:
        self.following = True
        self.live_button.hide()

    def _panned(self, *_args: object) -> None:
        self.following = False
        self.live_button.show()

    # -- series ---------------------------------------------------------------------------------

    def _set_averages(
        self, averages: list[tuple[float, float, float]], lo: float, hi: float
    ) -> float:
        """The answers' averages as segments; the largest of those the view (``lo`` to
        ``hi``) shows."""
        span = max(hi - lo, 1.0)
        near = [(a, b, v) for a, b, v in averages if b >= lo - MARGIN * span]
        shown = [(a, b, v) for a, b, v in near if a <= hi + MARGIN * span]
        if not shown:
            self.average.setData([], [])
            return 0.0
        x = np.array([[a, b, np.nan] for a, b, _ in shown]).ravel()
        y = np.array([[v, v, np.nan] for _, _, v in shown]).ravel()
        self.average.setData(x, y, connect="finite")
        return max((v for a, b, v in shown if b >= lo and a <= hi), default=0.0)

    def _set_view(self, widget: pg.PlotWidget, x: tuple[float, float] | None, top: float) -> None:
        """One range change per tick (each is a repaint), and only when it moved. The y
        range starts a little below 0 so the 0 tick keeps its label."""
        box = widget.getPlotItem().getViewBox()
        (x0, x1), (_y0, y1) = box.viewRange()
        y = (-Y_FOOT * top, top)
        if x is not None and (abs(x[0] - x0) > 1e-6 or abs(x[1] - x1) > 1e-6):
            box.setRange(xRange=x, yRange=y, padding=0)
        elif abs(top - y1) > 1e-9:
            box.setRange(yRange=y, padding=0)

    def _add_link(self, link: str, names: dict[int, str]) -> pg.PlotCurveItem:
        a, _, b = link.partition("↔")
        name = " ↔ ".join(names.get(int(r), f"rank {r}") if r.isdigit() else r for r in (a, b))
        theme = style.current()
        color = theme.series[(len(self.link_curves) + 1) % len(theme.series)]
        curve = bare_curve(self.links.getPlotItem(), pg.mkPen(color, width=2))
        self.link_curves[link] = curve
        self._link_names[link] = name
        self._update_keys(theme)
        return curve

    def _set_memory(self, used: dict[int, int], plan: Plan | None) -> None:
        planned = {rank.rank: rank.need_bytes for rank in plan.ranks} if plan else {}
        key = (tuple(sorted(used.items())), tuple(sorted(planned.items())))
        if key == self._memory_key:
            return
        self._memory_key = key
        ranks = sorted(set(planned) | set(used))
        names = {rank.rank: rank.node for rank in plan.ranks} if plan else {}
        x = np.arange(len(ranks), dtype=float)
        self.planned_bars.setOpts(x=x - 0.19, height=[planned.get(r, 0) for r in ranks])
        self.used_bars.setOpts(x=x + 0.19, height=[used.get(r, 0) for r in ranks])
        ticks = [(float(i), names.get(r, f"rank {r}")) for i, r in enumerate(ranks)]
        self.memory.getPlotItem().getAxis("bottom").setTicks([ticks, []])
        self.memory.setXRange(-0.6, max(len(ranks), 1) - 0.4, padding=0)

    # -- theme ------------------------------------------------------------------------------------

    def apply_theme(self, theme: Theme) -> None:
        series = theme.series
        self.instant.setPen(pg.mkPen(theme.qcolor("accent", 90), width=1))
        self.smoothed.setPen(pg.mkPen(theme.accent, width=2.5))
        self.average.setPen(pg.mkPen(series[2], width=2, style=Qt.PenStyle.DashLine))
        self.cluster.setPen(pg.mkPen(series[3 % len(series)], width=2, style=Qt.PenStyle.DotLine))
        for i, curve in enumerate(self.link_curves.values()):
            curve.setPen(pg.mkPen(series[(i + 1) % len(series)], width=2))
        self.planned_bars.setOpts(brush=theme.qcolor("text3", 140), pen=pg.mkPen(None))
        self.used_bars.setOpts(brush=theme.qcolor("accent"), pen=pg.mkPen(None))
        for widget in (self.tokens, self.links, self.memory):
            theme_plot(widget, theme, tick_px=LABEL_PX)
        self._update_keys(theme)

    def _update_keys(self, theme: Theme) -> None:
        """The legends, as coloured keys in each plot's heading (never over the data)."""
        series = theme.series
        self.token_key.setText(
            key_html(
                [
                    (theme.accent, "smoothed"),
                    (_faded(theme.accent), "per token"),
                    (series[2], "answer average"),
                    (series[3 % len(series)], "cluster (all answers)"),
                ],
                theme,
            )
        )
        self.link_key.setText(
            key_html(
                [
                    (series[(i + 1) % len(series)], name)
                    for i, name in enumerate(self._link_names.values())
                ],
                theme,
            )
        )
        self.memory_key.setText(key_html([(theme.text3, "planned"), (theme.accent, "peak")], theme))


Shape = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def _set_window(
    curve: pg.PlotCurveItem,
    series: tuple[np.ndarray, np.ndarray],
    lo: float,
    hi: float,
    t0: float,
    view: tuple[float, float],
    shape: Shape | None = None,
) -> float:
    """Hands the curve the samples between ``lo`` and ``hi`` (absolute times), plus one on
    each side, shaped; returns the largest value the line takes in ``view`` (seconds since
    Start: what the plot shows), 0 when none."""
    t, v = series
    key = (len(t), float(t[-1]) if len(t) else None, lo, hi, view)
    if getattr(curve, "_drawn_key", None) == key:  # nothing new in view: no repaint
        return getattr(curve, "_drawn_peak", 0.0)
    curve._drawn_key = key
    if not len(t):
        curve.setData([], [])
        curve._drawn_peak = 0.0
        return 0.0
    start = max(0, int(np.searchsorted(t, lo)) - 1)
    end = min(len(t), int(np.searchsorted(t, hi, side="right")) + 1)
    x, y = t[start:end] - t0, v[start:end]
    if shape is not None:
        x, y = shape(x, y)
    peak = visible_peak(x, y, *view)
    box = curve.getViewBox()
    x, y = peak_downsample(x, y, max(200.0, box.width() if box is not None else 2000.0))
    finite = bool(np.isfinite(y).all())
    curve.setData(x, y, connect="all" if finite else "finite", skipFiniteCheck=finite)
    curve._drawn_peak = peak
    return peak


def _faded(color: str) -> str:
    faded = QColor(color)
    faded.setAlpha(110)
    return faded.name(QColor.NameFormat.HexArgb)
