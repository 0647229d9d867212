"""Live plots: windowed data, line shapes between answers, following and looking back."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from pytestqt.qtbot import QtBot

from core.plan.planner import Plan
from core.run.measure.telemetry import Telemetry
from gui import style
from gui.run.plot_data import axis_top, break_gaps, hold_zero, peak_downsample
from gui.run.plots import WINDOW_S, LivePlots


@dataclass
class Source:
    telemetry: Telemetry
    t0: float = 0.0
    plan: Plan | None = None
    averages: list[tuple[float, float, float]] = field(default_factory=list)

    def rank_names(self) -> dict[int, str]:
        return {0: "Studio A", 1: "Studio B"}


def _hour_of_data(rate_hz: float = 10.0, seconds: float = 3600.0) -> Telemetry:
    """One request streaming for ``seconds`` plus traffic on one link, at ``rate_hz``."""
    telemetry = Telemetry(clock=None)
    for i in range(int(seconds * rate_hz)):
        t = i / rate_hz
        telemetry.feed(
            {"event": "token", "rank": 0, "t": t, "request": "r1", "index": i, "text": "x"}
        )
        telemetry.feed(
            {
                "event": "traffic",
                "rank": 0,
                "t": t,
                "interval_s": 1 / rate_hz,
                "sent": {"1": 1000},
                "received": {},
            }
        )
    return telemetry


@pytest.fixture
def plots(qtbot: QtBot) -> LivePlots:
    widget = LivePlots()
    qtbot.addWidget(widget)
    widget.resize(700, 600)
    widget.show()
    return widget


def test_break_gaps_andhold_zero() -> None:
    x = np.array([0.0, 0.2, 0.4, 10.0, 10.2])
    y = np.array([5.0, 5.0, 5.0, 6.0, 6.0])
    bx, by = break_gaps(x, y)
    assert len(bx) == 6 and np.isnan(by[3])  # no line across the 9.6 s pause
    hx, hy = hold_zero(np.array([0.0, 1.0, 9.0]), np.array([4.0, 0.0, 5.0]))
    assert list(hx) == [0.0, 1.0, 9.0, 9.0] and list(hy) == [4.0, 0.0, 0.0, 5.0]
    same = hold_zero(np.array([0.0, 1.0]), np.array([1.0, 2.0]))
    assert list(same[0]) == [0.0, 1.0]


def test_peak_downsampling_keeps_spikes_and_gaps() -> None:
    x = np.arange(1000.0)
    y = np.zeros(1000)
    y[500] = 99.0
    y[700:705] = np.nan
    dx, dy = peak_downsample(x, y, 100)
    assert len(dx) <= 110 and np.nanmax(dy) == 99.0
    assert np.isnan(dy).any()
    same = peak_downsample(x[:50], y[:50], 100)
    assert len(same[0]) == 50


def test_axis_tops_are_round_and_steady() -> None:
    assert axis_top(1.0, 4.3, 1.0) == 5.0
    assert axis_top(5.0, 4.1, 1.0) == 5.0  # a little lower: the axis stays
    assert axis_top(5.0, 1.0, 1.0) == 2.0  # much lower: it shrinks to a round value
    assert axis_top(1.0, 0.0, 1000.0) == 1000.0


def test_only_the_visible_window_is_handed_to_pyqtgraph(plots: LivePlots) -> None:
    source = Source(_hour_of_data())
    plots.refresh(source)
    x, _y = plots.smoothed.getData()
    assert x[-1] == pytest.approx(3599.9, abs=0.01)
    assert len(x) < (WINDOW_S * 1.2) * 10 + 10  # three minutes, not an hour
    low, high = plots.tokens.getPlotItem().getViewBox().viewRange()[0]
    assert high >= 3599.9 and low == pytest.approx(3599.9 - WINDOW_S, abs=15)
    assert list(plots.link_curves) == ["0↔1"]
    assert "Studio A ↔ Studio B" in plots.link_key.text()


def test_panning_stops_following_until_back_to_live(plots: LivePlots) -> None:
    source = Source(_hour_of_data(seconds=600))
    plots.refresh(source)
    box = plots.tokens.getPlotItem().getViewBox()
    box.setXRange(100, 200, padding=0)
    box.sigRangeChangedManually.emit([True, False])
    assert not plots.following and not plots.live_button.isHidden()
    plots.refresh(source)
    x, _y = plots.smoothed.getData()
    assert x[0] >= 90 and x[-1] <= 210  # the data around the view the person chose
    plots.live_button.click()
    plots.refresh(source)
    assert plots.following and plots.live_button.isHidden()
    assert box.viewRange()[0][1] >= 599


def test_answer_averages_are_segments(plots: LivePlots) -> None:
    source = Source(_hour_of_data(seconds=20), averages=[(1.0, 5.0, 9.5), (8.0, 12.0, 10.5)])
    plots.refresh(source)
    x, y = plots.average.getData()
    assert list(x[:2]) == [1.0, 5.0] and list(y[:2]) == [9.5, 9.5]
    assert np.isnan(y[2])


def test_a_theme_change_restyles_the_plots(plots: LivePlots, qapp) -> None:
    try:
        style.apply(qapp, style.DARK)
        assert plots.tokens.backgroundBrush().color().name() == style.DARK.card.lower()
        assert style.DARK.text2.lower() in plots.token_key.text().lower()
    finally:
        style.apply(qapp, style.LIGHT)


def test_clear_forgets_links(plots: LivePlots) -> None:
    plots.refresh(Source(_hour_of_data(seconds=5)))
    plots.clear()
    assert plots.link_curves == {} and plots.link_key.text() == ""
    assert plots.smoothed.getData()[0] is None or len(plots.smoothed.getData()[0]) == 0


def test_every_redraw_of_an_hour_hands_pyqtgraph_the_window_only(plots: LivePlots, qapp) -> None:
    """What keeps a redraw cheap however long the job ran (its time per redraw is a
    figure of ``make bench``: gui.redraw, budget 16 ms)."""
    source = Source(_hour_of_data())
    plots.refresh(source)
    qapp.processEvents()
    for _ in range(10):
        plots.refresh(source)
        plots.repaint()
        curves = (plots.instant, plots.smoothed, *plots.link_curves.values())
        assert plots.link_curves and all(
            len(curve.getData()[0]) < (WINDOW_S * 1.2) * 10 + 10  # three minutes, not an hour
            for curve in curves
        )


def test_memory_bars_show_each_ranks_plan_beside_its_measured_peak(plots: LivePlots) -> None:
    from core.plan.planner import Node, PlanOptions, make_plan
    from tests.helpers.header_models import synthetic_model_info

    info = synthetic_model_info(layers=8, layer_bytes=200 << 20, shared_bytes=100 << 20)
    nodes = [Node("Studio A", 64 << 30), Node("Studio B", 64 << 30)]
    plan = make_plan(info, nodes, options=PlanOptions(strategy="pipeline"))
    telemetry = _hour_of_data(seconds=2)
    loaded = {"load_s": 1.0, "memory_bytes": 5, "layers": None}
    for rank in (0, 1):
        telemetry.feed(
            {
                "event": "loaded",
                "rank": rank,
                "t": 1.0,
                **loaded,
                "base_bytes": 100 << 20,
                "peak_load_bytes": (100 << 20) + (rank + 1) * (300 << 20),
            }
        )
    plots.refresh(Source(telemetry, plan=plan))
    planned = plots.planned_bars.opts["height"]
    peaks = plots.used_bars.opts["height"]
    assert list(planned) == [r.need_bytes for r in plan.ranks]
    assert list(peaks) == [300 << 20, 600 << 20]  # above each rank's base
    assert "peak" in plots.memory_key.text() and "planned" in plots.memory_key.text()
