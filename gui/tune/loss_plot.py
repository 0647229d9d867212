"""The fine-tune's live plots: train and validation loss, and trained tokens/s, against
the iteration (docs/design.md, rule 5).

Reports append to growable numpy arrays (``TrainSeries``, no Qt); nothing redraws when
a report arrives. ``refresh`` (the view's timer, 10 times a second) draws only when a
point arrived since the last one, and hands pyqtgraph only the points inside the x range
shown, peak-downsampled to about two points per pixel: a redraw costs the same at 100
or 100,000 iterations. The x axis spans the planned iterations from the start, so the
curves fill the plot from left to right as training goes.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QVBoxLayout, QWidget

from gui import style
from gui.plot_style import (
    LABEL_PX,
    Y_FOOT,
    bare_curve,
    center_hint,
    key_html,
    label_style,
    live_plot,
    plot_header,
    theme_plot,
)
from gui.run.plot_data import axis_top, finite_peak, peak_downsample
from gui.style import Theme
from gui.widgets import label

FIRST_CAPACITY = 1024
AXIS_WIDTH = 56
X_MARGIN = 0.015  # share of the iterations left empty at each end


class TrainSeries:
    """Points appended in iteration order, in arrays that double when full."""

    def __init__(self, columns: int) -> None:
        self._data = np.empty((FIRST_CAPACITY, columns), dtype=float)
        self.size = 0

    def append(self, *values: float) -> None:
        if self.size == len(self._data):
            grown = np.empty((2 * len(self._data), self._data.shape[1]), dtype=float)
            grown[: self.size] = self._data[: self.size]
            self._data = grown
        self._data[self.size] = values
        self.size += 1

    def column(self, index: int) -> np.ndarray:
        return self._data[: self.size, index]

    def last(self, index: int) -> float | None:
        return float(self._data[self.size - 1, index]) if self.size else None

    def clear(self) -> None:
        self.size = 0


STEPS = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)


def loss_top(current: float, peak: float) -> float:
    """The loss axis' top: a little over the peak, on a round value, steady while the
    peak moves a little (losses fall, so the top follows them down by steps)."""
    wanted = max(peak * 1.08, 1e-3)
    if current >= wanted and wanted >= current * 0.6:
        return current
    exponent = 10 ** np.floor(np.log10(wanted))
    return float(next(m * exponent for m in STEPS if m * exponent >= wanted))


def in_view(
    x: np.ndarray, y: np.ndarray, lo: float, hi: float, pixels: float
) -> tuple[np.ndarray, np.ndarray]:
    """The points between ``lo`` and ``hi`` plus one each side (the line runs off the
    edge), peak-downsampled to about two points per pixel."""
    start = max(0, int(np.searchsorted(x, lo)) - 1)
    end = min(len(x), int(np.searchsorted(x, hi, side="right")) + 1)
    return peak_downsample(x[start:end], y[start:end], max(200.0, pixels))


def _plot(y_label: str) -> pg.PlotWidget:
    widget = live_plot(y_label)
    item = widget.getPlotItem()
    item.getAxis("left").setWidth(AXIS_WIDTH)  # both plots' x axes line up
    item.getViewBox().setMouseEnabled(x=False, y=False)
    item.getViewBox().disableAutoRange()
    return widget


class LossPlot(QWidget):
    """Train loss and validation loss (top), trained tokens/s (bottom), by iteration."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.train = TrainSeries(3)  # iteration, train loss, tokens/s
        self.valid = TrainSeries(2)  # iteration, validation loss
        self.iterations = 0  # planned: the x axis spans them
        self.version = 0  # points appended; refresh draws when it moved
        self._drawn = -1
        self._loss_top = self._rate_top = 1.0
        self.loss = _plot("loss")
        self.train_curve = bare_curve(self.loss.getPlotItem())
        self.valid_curve = pg.PlotDataItem(symbol="o", symbolSize=7)
        self.loss.getPlotItem().addItem(self.valid_curve)
        self.rate = _plot("tokens/s")
        self.rate.setXLink(self.loss)
        self.rate_curve = bare_curve(self.rate.getPlotItem())
        self.loss_key = label("", "hint")
        self.rate_key = label("", "hint")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addWidget(plot_header("Loss", self.loss_key))
        layout.addWidget(self.loss, 3)
        layout.addWidget(plot_header("Trained tokens per second", self.rate_key))
        layout.addWidget(self.rate, 2)
        self.empty_hint = label(
            "Press Start: the loss and the tokens per second appear here, step by step.",
            "hint",
            wrap=True,
        )
        self.empty_hint.setParent(self)
        self.empty_hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        style.notifier().changed.connect(self.apply_theme)
        self.apply_theme(style.current())
        self._set_x(-X_MARGIN * 10, (1 + X_MARGIN) * 10)
        self._show_values(False)

    # -- data in (never draws) ---------------------------------------------------------

    def set_iterations(self, iterations: int) -> None:
        """The planned iterations: the x axis spans them."""
        self.iterations = max(0, int(iterations))
        self.version += 1

    def add_point(self, iteration: int, train_loss: float, tokens_per_s: float) -> None:
        self.train.append(iteration, train_loss, tokens_per_s)
        self.version += 1

    def add_validation(self, iteration: int, val_loss: float) -> None:
        self.valid.append(iteration, val_loss)
        self.version += 1

    def clear(self) -> None:
        self.train.clear()
        self.valid.clear()
        self.iterations = 0
        self._loss_top = self._rate_top = 1.0
        for curve in (self.train_curve, self.valid_curve, self.rate_curve):
            curve.setData([], [])
        self.version += 1
        self._drawn = -1
        self._show_values(False)

    # -- drawing (the timer's work) ----------------------------------------------------

    def refresh(self, force: bool = False) -> bool:
        """Draw what arrived since the last call; False when there was nothing new."""
        if self.version == self._drawn and not force:
            return False
        self._drawn = self.version
        its = self.train.column(0)
        newest = max(float(its[-1]) if len(its) else 0.0, self.valid.last(0) or 0.0)
        high = float(max(self.iterations, newest, 10))
        self._set_x(-X_MARGIN * high, (1 + X_MARGIN) * high)  # the first and last points show
        lo, hi = 0.0, high
        if not len(its) and not self.valid.size:
            self._show_values(False)
            return True
        self._show_values(True)
        pixels = float(self.loss.getPlotItem().getViewBox().width())
        x, y = in_view(its, self.train.column(1), lo, hi, pixels)
        finite = bool(np.isfinite(y).all())
        self.train_curve.setData(x, y, skipFiniteCheck=finite)
        loss_peak = finite_peak(y)
        vx, vy = self.valid.column(0), self.valid.column(1)
        self.valid_curve.setData(vx, vy)
        loss_peak = max(loss_peak, finite_peak(vy))
        x, y = in_view(its, self.train.column(2), lo, hi, pixels)
        self.rate_curve.setData(x, y, skipFiniteCheck=bool(np.isfinite(y).all()))
        self._loss_top = loss_top(self._loss_top, loss_peak)
        self._rate_top = axis_top(self._rate_top, finite_peak(y), 1.0)
        self._set_y(self.loss, self._loss_top)
        self._set_y(self.rate, self._rate_top)
        self._update_keys(style.current())
        for widget in (self.loss, self.rate):
            widget.getPlotItem().getViewBox().updateMatrix()
        return True

    def _set_x(self, lo: float, hi: float) -> None:
        box = self.loss.getPlotItem().getViewBox()
        (x0, x1), _ = box.viewRange()
        if abs(x0 - lo) > 1e-9 or abs(x1 - hi) > 1e-9:
            box.setXRange(lo, hi, padding=0)

    @staticmethod
    def _set_y(widget: pg.PlotWidget, top: float) -> None:
        box = widget.getPlotItem().getViewBox()
        _, (_y0, y1) = box.viewRange()
        if abs(top - y1) > 1e-12:
            box.setYRange(-Y_FOOT * top, top, padding=0)

    def resizeEvent(self, event: object) -> None:
        super().resizeEvent(event)  # type: ignore[arg-type]
        center_hint(self.empty_hint, self)
        self.version += 1  # more or fewer pixels: downsample again

    def _show_values(self, shown: bool) -> None:
        self.empty_hint.setVisible(not shown)
        self.empty_hint.raise_()
        for widget in (self.loss, self.rate):
            widget.getPlotItem().getAxis("left").setStyle(showValues=shown)

    # -- theme ----------------------------------------------------------------------------

    def apply_theme(self, theme: Theme) -> None:
        series = theme.series
        self.train_curve.setPen(pg.mkPen(theme.accent, width=2))
        valid = series[2]
        self.valid_curve.setPen(pg.mkPen(valid, width=2, style=Qt.PenStyle.DashLine))
        self.valid_curve.setSymbolBrush(pg.mkBrush(valid))
        self.valid_curve.setSymbolPen(pg.mkPen(theme.card, width=1.5))
        self.rate_curve.setPen(pg.mkPen(series[1], width=2))
        for widget in (self.loss, self.rate):
            theme_plot(widget, theme, tick_px=LABEL_PX)
        self.rate.getPlotItem().setLabel("bottom", "iteration", **label_style(theme))
        self._update_keys(theme)

    def _update_keys(self, theme: Theme) -> None:
        train, valid, rate = self.train.last(1), self.valid.last(1), self.train.last(2)
        self.loss_key.setText(
            key_html(
                [
                    (theme.accent, "train", train),
                    (theme.series[2], "validation", valid),
                ],
                theme,
            )
        )
        self.rate_key.setText(key_html([(theme.series[1], "tokens/s", rate)], theme, decimals=0))
