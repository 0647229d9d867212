"""Live plots: windowed data, line shapes between answers, following and looking back."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from pytestqt.qtbot import QtBot

from core.plan.planner import Plan
from core.run.measure.telemetry import Telemetry
from gui import style
from gui.run.plot_data import (
    axis_top,
    break_gaps,
    hold_zero,
    peak_downsample,
    visible_peak,
    zero_idle,
)
from gui.run.plots import LINK_EVERY, WINDOW_S, LivePlots


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


# -- idle time and axes that fit the view (issue 25, item 2) ---------------------------------


def test_a_link_holds_zero_across_idle_time() -> None:
    """No report while nothing moves: the line falls to 0 one report after the last and
    rises one report before the next, never ramping across the pause."""
    x = np.array([10.0, 10.5, 11.0, 40.0, 40.5])
    y = np.array([5.0, 5.0, 5.0, 3.0, 3.0])
    zx, zy = zero_idle(x, y)
    assert list(zx) == [10.0, 10.5, 11.0, 11.5, 39.5, 40.0, 40.5]
    assert list(zy) == [5.0, 5.0, 5.0, 0.0, 0.0, 3.0, 3.0]
    assert np.interp(25.0, zx, zy) == 0.0  # a straight line would say 4
    dense = zero_idle(x[:3], y[:3], now=11.4)  # still within a report: nothing changes
    assert list(dense[0]) == [10.0, 10.5, 11.0]
    tx, ty = zero_idle(x, y, now=100.0)  # the live view's present: idle since 40.5
    assert list(tx[-2:]) == [41.0, 100.0] and list(ty[-2:]) == [0.0, 0.0]


def test_a_link_at_zero_holds_it_through_a_shorter_quiet_gap() -> None:
    """After a sample at 0 a gap of more than a report and a half (shorter than the idle
    gap) is quiet too: the line rises one report before the next sample (a run kept
    before telemetry said where a report began ramped there: 1.3 s in a screenshot).
    A gap after a rate, or within a report's lateness, is left as it is."""
    x = np.array([9.5, 10.0, 10.5, 11.8, 12.3, 13.3])
    y = np.array([8.0, 0.0, 0.0, 9e4, 7e4, 7e4])
    zx, zy = zero_idle(x, y)
    assert zx.tolist() == pytest.approx([9.5, 10.0, 10.5, 11.3, 11.8, 12.3, 13.3])
    assert zy.tolist() == [8.0, 0.0, 0.0, 0.0, 9e4, 7e4, 7e4]
    late = zero_idle(np.array([1.0, 1.7]), np.array([0.0, 5.0]))  # a late report
    assert late[0].tolist() == [1.0, 1.7]
    both = zero_idle(np.array([0.0, 1.0, 10.0]), np.array([0.0, 5.0, 5.0]))  # quiet, idle
    assert both[0].tolist() == pytest.approx([0.0, 0.5, 1.0, 1.5, 9.5, 10.0])
    assert both[1].tolist() == [0.0, 0.0, 5.0, 0.0, 0.0, 5.0]


def test_tokens_per_second_hold_zero_up_to_now() -> None:
    hx, hy = hold_zero(np.array([0.0, 1.0, 9.0]), np.array([4.0, 0.0, 5.0]), now=12.0)
    assert list(hx) == [0.0, 1.0, 9.0, 9.0] and list(hy) == [4.0, 0.0, 0.0, 5.0]  # generating
    ix, iy = hold_zero(np.array([0.0, 1.0]), np.array([4.0, 0.0]), now=30.0)
    assert list(ix) == [0.0, 1.0, 30.0] and list(iy) == [4.0, 0.0, 0.0]  # idle since 1 s


def test_the_visible_peak_is_what_the_view_shows() -> None:
    x = np.array([0.0, 1.0, 2.0, 50.0, 51.0, 52.0])
    y = np.array([2e9, 2e9, 0.0, 0.0, 4e3, 0.0])
    assert visible_peak(x, y, 40.0, 60.0) == 4e3  # the GB/s burst is out of view
    assert visible_peak(x, y, 0.0, 60.0) == 2e9
    assert visible_peak(x, y, 1.5, 60.0) == 1e9  # the line where it enters the view
    assert visible_peak(x, y, 100.0, 200.0) == 0.0
    assert visible_peak(np.array([]), np.array([]), 0.0, 1.0) == 0.0
    gaps = break_gaps(np.array([0.0, 1.0, 20.0]), np.array([3.0, 3.0, 4.0]))
    assert visible_peak(*gaps, 0.0, 30.0) == 4.0  # NaN gaps are no values


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _burst(telemetry: Telemetry, start: float, seconds: float, bytes_per_s: float) -> None:
    """Both ranks of one link report ``bytes_per_s`` every half second, then go quiet;
    heartbeats every second go on for the next 5 s (they are what ends a rate)."""
    t = start
    while t < start + seconds:
        for rank, peer in ((0, "1"), (1, "0")):
            report = {"interval_s": 0.5, "sent": {peer: int(bytes_per_s / 4)}, "received": {}}
            telemetry.feed({"event": "traffic", "rank": rank, "t": t, **report}, received_at=t)
        t += 0.5
    for beat in range(1, 6):
        telemetry.feed({"event": "heartbeat", "rank": 0, "t": t + beat}, received_at=t + beat)


def _link_top(plots: LivePlots, source: Source) -> float:
    for _ in range(LINK_EVERY):  # every tick that redraws the links
        plots.refresh(source)
    return float(plots.links.getPlotItem().getViewBox().viewRange()[1][1])


def _curve_at(plots: LivePlots, t: float) -> float:
    x, y = plots.link_curves["0↔1"].getData()
    return float(np.interp(t, x, y))


def test_the_link_axis_follows_the_data_after_a_large_then_a_small_burst(
    plots: LivePlots,
) -> None:
    """A link test at GB/s, then chat traffic at KB/s once the test has left the view:
    the axis re-fits to the KB/s (they fill the plot instead of lying flat), the line is
    at zero all through the idle time between, and time passes on screen while idle."""
    clock = Clock()
    telemetry = Telemetry(clock=clock)
    source = Source(telemetry)
    _burst(telemetry, 10.0, 10.0, 2e9)
    clock.now = 30.0
    assert _link_top(plots, source) >= 2e9  # the link test fills the axis
    clock.now = 240.0  # idle: the view moves on with time, the burst leaves it
    top = _link_top(plots, source)
    low, high = plots.tokens.getPlotItem().getViewBox().viewRange()[0]
    assert high >= 240.0 and low > 20.0
    assert top == 1000.0  # nothing in view: the floor, not GB/s
    _burst(telemetry, 245.0, 5.0, 8e3)
    clock.now = 252.0
    top = _link_top(plots, source)
    assert 8e3 <= top <= 2 * 8e3  # the KB/s fill the plot
    assert _curve_at(plots, 247.0) == pytest.approx(8e3)
    assert _curve_at(plots, 230.0) == 0.0 and _curve_at(plots, 244.0) == 0.0  # no ramp
    # Looking back at the link test: the axis fits it again.
    box = plots.tokens.getPlotItem().getViewBox()
    box.setXRange(0.0, 40.0, padding=0)
    box.sigRangeChangedManually.emit([True, False])
    assert _link_top(plots, source) >= 2e9
    assert _curve_at(plots, 30.0) == 0.0  # and idle time after it is at zero


def test_presentation_fits_the_link_axis_to_its_view_too(qtbot: QtBot) -> None:
    from types import SimpleNamespace

    from core.run.states import RunState
    from gui.run.presentation import PresentationView

    clock = Clock()
    telemetry = Telemetry(clock=clock)
    controller = SimpleNamespace(
        telemetry=telemetry,
        t0=0.0,
        plan=None,
        averages=[],
        version=0,
        state=RunState.READY,
        rank_names=lambda: {0: "Studio A", 1: "Studio B"},
    )
    run = SimpleNamespace(
        controller=controller,
        comparison=SimpleNamespace(result=None),
        shown_plan=lambda: (None, None),
    )
    view = PresentationView(run, lambda: None)  # type: ignore[arg-type]
    qtbot.addWidget(view)
    view.resize(1280, 800)
    view.show()
    links = view.plots.links.getPlotItem().getViewBox()

    def top() -> float:
        for _ in range(2):
            controller.version += 1
            view.refresh()
        return float(links.viewRange()[1][1])

    _burst(telemetry, 10.0, 10.0, 2e9)
    clock.now = 30.0
    assert top() >= 2e9
    _burst(telemetry, 245.0, 5.0, 8e3)
    clock.now = 252.0
    assert 8e3 <= top() <= 2 * 8e3
    assert _curve_at(view.plots, 244.0) == 0.0  # no ramp up to the chat's traffic


def test_memory_bars_show_each_ranks_plan_beside_its_measured_peak(plots: LivePlots) -> None:
    from core.plan.planner import Node, PlanOptions, make_plan
    from tests.helpers.header_models import synthetic_model_info

    info = synthetic_model_info(layers=8, layer_bytes=200 << 20, shared_bytes=100 << 20)
    nodes = [Node("Studio A", 64 << 30), Node("Studio B", 64 << 30)]
    plan = make_plan(info, nodes, options=PlanOptions(strategy="pipeline"))
    telemetry = _hour_of_data(seconds=2)
    loaded = {"load_s": 1.0, "memory_bytes": 5, "layers": None, "strategy": "pipeline"}
    loaded |= {"device": "cpu", "blas": None, "weights": {}}  # a loaded event's whole fields
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
