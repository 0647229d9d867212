"""The fine-tune loss plot: points appended live, drawn only on refresh, clipped and
downsampled to the view; validation points; the x axis spans the planned iterations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pytestqt.qtbot import QtBot

from gui.tune.loss_plot import LossPlot, TrainSeries, in_view, loss_top


def _drawn(plot: LossPlot) -> int:
    x = plot.train_curve.getData()[0]
    return 0 if x is None else len(x)


@pytest.fixture
def plot(qtbot: QtBot) -> LossPlot:
    widget = LossPlot()
    qtbot.addWidget(widget)
    widget.resize(700, 500)
    widget.show()
    return widget


def test_series_grow_past_their_first_capacity() -> None:
    series = TrainSeries(2)
    for i in range(5000):
        series.append(i, i * 2.0)
    assert series.size == 5000
    assert series.column(1)[-1] == 9998.0 and series.last(0) == 4999.0
    series.clear()
    assert series.size == 0 and series.last(0) is None


def test_in_view_clips_and_downsamples_keeping_peaks() -> None:
    x = np.arange(10_000, dtype=float)
    y = np.zeros_like(x)
    y[5000] = 9.0  # a spike must survive the downsampling
    vx, vy = in_view(x, y, 2000, 8000, pixels=300)
    assert len(vx) <= 2 * 300 + 4
    assert vx[0] >= 1999 and vx[-1] <= 8001
    assert vy.max() == 9.0


def test_the_loss_axis_top_is_round_and_steady() -> None:
    assert loss_top(1.0, 4.8) == 6.0  # just over the peak, on a round value
    assert loss_top(6.0, 5.0) == 6.0  # a small move keeps it
    assert loss_top(6.0, 2.0) == 2.5  # losses fall: the top follows down
    assert loss_top(1.0, 0.42) == 0.5


def test_points_draw_on_refresh_only(plot: LossPlot) -> None:
    plot.set_iterations(200)
    assert plot.empty_hint.isVisible()
    for i in range(1, 41):
        plot.add_point(i, 3.0 - i * 0.05, 500.0 + i)
    assert _drawn(plot) == 0
    assert plot.refresh()
    x, y = plot.train_curve.getData()
    assert list(x[:3]) == [1.0, 2.0, 3.0] and math.isclose(y[-1], 1.0)
    assert plot.rate_curve.getData()[1][-1] == 540.0
    assert not plot.empty_hint.isVisible()
    low, high = plot.loss.getPlotItem().getViewBox().viewRange()[0]
    assert -5 < low < 0 and 200 < high < 205  # the planned iterations, a margin each side
    assert not plot.refresh()  # nothing new: no redraw
    plot.add_validation(40, 1.4)
    assert plot.refresh()
    assert list(plot.valid_curve.getData()[1]) == [1.4]
    assert "validation" in plot.loss_key.text() and "1.400" in plot.loss_key.text()


def test_ten_thousand_points_reach_pyqtgraph_downsampled(plot: LossPlot) -> None:
    plot.set_iterations(10_000)
    for i in range(1, 10_001):
        plot.add_point(i, 2.0 + math.sin(i), 400.0)
    plot.refresh()
    x, _ = plot.train_curve.getData()
    assert 200 <= len(x) < 2500  # about two points per pixel, never all 10,000
    assert x[0] == 1.0 and x[-1] == 10_000.0


def test_clear_empties_the_plot(plot: LossPlot) -> None:
    plot.set_iterations(10)
    plot.add_point(1, 2.0, 100.0)
    plot.add_validation(1, 2.5)
    plot.refresh()
    plot.clear()
    plot.refresh()
    assert plot.train.size == 0 and plot.valid.size == 0
    assert _drawn(plot) == 0
    assert plot.empty_hint.isVisible()
