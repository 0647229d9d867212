"""Telemetry math: ring buffers, token rates, TTFT, link aggregation, bounds."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.run.measure.series import RateEstimator, RingBuffer, ema_rate_step
from core.run.measure.telemetry import Headline, RankPeak, Telemetry, answer_figures, link_id
from core.worker import protocol as p


def event(kind: str, rank: int, t: float, **fields: Any) -> dict[str, Any]:
    return {"event": kind, "rank": rank, "t": t, **fields}


def token(t: float, index: int, request: str = "r1", text: str = "x", rank: int = 0) -> dict:
    return event("token", rank, t, request=request, index=index, token=1, text=text)


def done(t: float, request: str = "r1", rank: int = 0, **fields: Any) -> dict[str, Any]:
    fields = {
        "prompt_tokens": 12,
        "prompt_tps": 120.0,
        "generation_tokens": 4,
        "generation_tps": 9.5,
        "ttft_s": 0.25,
        "finish_reason": "length",
        "peak_memory_bytes": 2_000,
        "text": "xxxx",
        **fields,
    }
    return event("done", rank, t, request=request, **fields)


def traffic(rank: int, t: float, sent: dict[str, int], interval_s: float = 0.5) -> dict:
    return event("traffic", rank, t, interval_s=interval_s, sent=sent, received={})


def local_telemetry(**kwargs: Any) -> Telemetry:
    """Every rank on this host's clock: series times are the events' own."""
    return Telemetry(clock=None, **kwargs)


# -- RingBuffer --------------------------------------------------------------------


def test_ring_buffer_starts_empty() -> None:
    ring = RingBuffer(4)
    t, v = ring.arrays()
    assert len(ring) == 0 and ring.last() is None
    assert t.size == 0 and v.size == 0 and t.dtype == np.float64


def test_ring_buffer_wraps_around_keeping_newest_in_order() -> None:
    ring = RingBuffer(3)
    for i in range(7):
        ring.append(float(i), 10.0 * i)
    t, v = ring.arrays()
    assert t.tolist() == [4.0, 5.0, 6.0]
    assert v.tolist() == [40.0, 50.0, 60.0]
    assert ring.last() == (6.0, 60.0)
    assert len(ring) == ring.capacity == 3


def test_ring_buffer_arrays_are_copies() -> None:
    ring = RingBuffer(2)
    ring.append(1.0, 1.0)
    t, _ = ring.arrays()
    t[0] = 99.0
    assert ring.arrays()[0].tolist() == [1.0]


def test_ring_buffer_window_keeps_the_recent_span() -> None:
    ring = RingBuffer(5)
    for i in range(8):  # holds t = 3..7
        ring.append(float(i), float(i))
    assert ring.window(2.0)[0].tolist() == [5.0, 6.0, 7.0]
    assert ring.window(100.0)[0].tolist() == [3.0, 4.0, 5.0, 6.0, 7.0]
    assert ring.window(0.0)[0].tolist() == [7.0]


def test_ring_buffer_refuses_zero_capacity() -> None:
    with pytest.raises(ValueError):
        RingBuffer(0)


@given(
    capacity=st.integers(min_value=1, max_value=50),
    values=st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=200),
)
def test_ring_buffer_keeps_exactly_the_last_samples(capacity: int, values: list[float]) -> None:
    ring = RingBuffer(capacity)
    for i, value in enumerate(values):
        ring.append(float(i), value)
    kept = min(len(values), capacity)
    t, v = ring.arrays()
    assert len(ring) == kept
    assert t.tolist() == [float(i) for i in range(len(values) - kept, len(values))]
    assert v.tolist() == values[len(values) - kept :]


@given(
    capacity=st.integers(min_value=1, max_value=30),
    steps=st.lists(st.floats(min_value=0.0, max_value=10.0), min_size=1, max_size=100),
    seconds=st.floats(min_value=0.0, max_value=50.0),
)
def test_ring_buffer_window_matches_a_filter(
    capacity: int, steps: list[float], seconds: float
) -> None:
    ring = RingBuffer(capacity)
    times = np.cumsum(steps)
    for i, t in enumerate(times):
        ring.append(float(t), float(i))
    all_t, all_v = ring.arrays()
    keep = all_t >= all_t[-1] - seconds
    t, v = ring.window(seconds)
    assert t.tolist() == all_t[keep].tolist()
    assert v.tolist() == all_v[keep].tolist()


# -- rates ---------------------------------------------------------------------------


def test_average_and_instantaneous_rates_by_hand() -> None:
    rates = RateEstimator()
    instants = [rates.add(t) for t in (0.0, 0.1, 0.2, 0.3)]
    assert instants[0] is None
    assert instants[1:] == pytest.approx([10.0, 10.0, 10.0])
    assert rates.average() == pytest.approx(10.0)  # 3 intervals over 0.3 s
    assert rates.smoothed == pytest.approx(10.0)


def test_average_excludes_time_to_first_token() -> None:
    rates = RateEstimator()
    for t in (5.0, 5.5, 6.0):  # the first token's wait is not counted
        rates.add(t)
    assert rates.average() == pytest.approx(2.0)


def test_one_token_has_no_rate() -> None:
    rates = RateEstimator()
    assert rates.add(1.0) is None
    assert rates.average() is None and rates.smoothed is None


def test_zero_and_negative_intervals_give_no_instantaneous_rate() -> None:
    rates = RateEstimator()
    rates.add(1.0)
    assert rates.add(1.0) is None
    assert rates.add(0.9) is None
    assert rates.add(1.1) == pytest.approx(10.0)
    assert math.isfinite(rates.smoothed or math.nan)


def test_ema_step_stays_finite_for_a_zero_interval() -> None:
    assert ema_rate_step(5.0, 0.0, tau_s=1.0) == pytest.approx(6.0)  # + 1/tau


def test_ema_converges_to_a_steady_rate() -> None:
    rates = RateEstimator(tau_s=1.0)
    for i in range(200):  # 20 tok/s for 10 s
        rates.add(i * 0.05)
    assert rates.smoothed == pytest.approx(20.0, rel=1e-9)


def test_ema_follows_a_rate_change_within_a_few_time_constants() -> None:
    rates = RateEstimator(tau_s=1.0)
    t = 0.0
    for _ in range(100):  # 10 tok/s for 10 s
        rates.add(t)
        t += 0.1
    t_change = t
    samples: list[tuple[float, float]] = []
    while t < t_change + 5.0:  # then 50 tok/s
        rates.add(t)
        samples.append((t - t_change, rates.smoothed or 0.0))
        t += 0.02
    after_one_tau = next(v for dt, v in samples if dt >= 1.0)
    after_five_tau = samples[-1][1]
    assert 10.0 + 0.5 * 40.0 < after_one_tau < 50.0  # ~63% of the way after 1 tau
    assert after_five_tau == pytest.approx(50.0, rel=0.01)


def test_ema_weights_a_burst_by_time_not_by_count() -> None:
    """Ten tokens at once after a second of silence: about 10 tokens/s, not 1e6."""
    rates = RateEstimator(tau_s=1.0)
    rates.add(0.0)
    rates.add(1.0)  # 1 tok/s
    for _ in range(10):
        rates.add(2.0)
    assert rates.smoothed is not None and 1.0 < rates.smoothed < 12.0


@given(
    steps=st.lists(
        st.floats(min_value=1e-12, max_value=1e4, allow_subnormal=False), min_size=1, max_size=100
    ),
    start=st.floats(min_value=0.0, max_value=1e6),
)
def test_rates_are_finite_and_positive_for_increasing_timestamps(
    steps: list[float], start: float
) -> None:
    telemetry = local_telemetry()
    times = start + np.cumsum([0.0, *steps])
    times = times[np.concatenate(([True], np.diff(times) > 0))]  # strictly increasing
    for i, t in enumerate(times):
        telemetry.feed(token(float(t), i))
    rates = telemetry.tokens_per_s()
    for _, values in (rates.instant, rates.smoothed):
        assert np.all(np.isfinite(values)) and np.all(values > 0)
    (summary,) = telemetry.requests()
    if summary.avg_tps is not None:
        assert math.isfinite(summary.avg_tps) and summary.avg_tps > 0


# -- requests and TTFT -------------------------------------------------------------------


def test_token_series_and_request_summary() -> None:
    telemetry = local_telemetry()
    for i, t in enumerate((1.0, 1.1, 1.2, 1.3)):
        telemetry.feed(token(t, i, text="ab"))
    instant_t, instant_v = telemetry.tokens_per_s().instant
    assert instant_t.tolist() == pytest.approx([1.1, 1.2, 1.3])
    assert instant_v.tolist() == pytest.approx([10.0, 10.0, 10.0])
    assert telemetry.current().tokens_per_s == pytest.approx(10.0)

    telemetry.feed(done(1.35))
    (summary,) = telemetry.requests()
    assert summary.finished and summary.id == "r1"
    assert summary.avg_tps == pytest.approx(10.0)
    assert summary.generation_tps == 9.5  # the worker's own figure, kept as given
    assert (summary.prompt_tokens, summary.prompt_tps) == (12, 120.0)
    assert summary.generation_tokens == 4 and summary.finish_reason == "length"
    assert summary.text == "xxxx"  # the worker's final text wins over the pieces

    headline = telemetry.current()
    assert headline.tokens_per_s == 0.0  # idle again
    assert headline.last_avg_tps == pytest.approx(10.0)
    assert headline.prompt_tps == 120.0 and headline.total_tokens == 4
    smoothed_t, smoothed_v = telemetry.tokens_per_s().smoothed
    assert smoothed_v[-1] == 0.0 and smoothed_t[-1] == pytest.approx(1.35)


def test_ttft_from_request_started() -> None:
    telemetry = local_telemetry()
    telemetry.request_started("r1", 10.0)
    telemetry.feed(token(10.4, 0))
    assert telemetry.current().ttft_s == pytest.approx(0.4)
    telemetry.feed(token(10.5, 1))
    telemetry.feed(done(10.6))  # the worker says 0.25; ours includes the trip
    assert telemetry.requests()[0].ttft_s == pytest.approx(0.4)
    assert telemetry.current().ttft_s == pytest.approx(0.4)


def test_ttft_from_done_event_without_request_started() -> None:
    telemetry = local_telemetry()
    telemetry.feed(token(3.0, 0))
    assert telemetry.current().ttft_s is None
    telemetry.feed(done(3.1, ttft_s=0.125))
    assert telemetry.requests()[0].ttft_s == 0.125


def test_remote_rank_times_move_onto_the_local_clock() -> None:
    """A remote rank's clock reads 1000 s more; the smallest delay sets the offset."""
    telemetry = Telemetry(clock=lambda: 0.0)
    telemetry.feed(event("hello", 0, 1000.0, size=2), received_at=0.05)
    telemetry.feed(event("heartbeat", 0, 1001.0), received_at=1.01)  # offset -999.99
    telemetry.request_started("r1", 2.0)
    telemetry.feed(token(1002.3, 0), received_at=2.5)  # backlog: delay not used
    telemetry.feed(token(1002.4, 1), received_at=2.5)
    assert telemetry.current().ttft_s == pytest.approx(0.31)
    t, v = telemetry.tokens_per_s().instant
    assert t.tolist() == pytest.approx([2.41]) and v.tolist() == pytest.approx([10.0])


def test_tokens_of_other_ranks_are_not_counted_twice() -> None:
    telemetry = local_telemetry()
    for rank in (0, 1):
        telemetry.feed(token(0.0, 0, rank=rank))
        telemetry.feed(token(0.1, 1, rank=rank))
    assert telemetry.current().total_tokens == 2


def test_done_without_token_events_still_counts() -> None:
    """With MACMESH_TELEMETRY=0 the worker sends only done events."""
    telemetry = local_telemetry()
    telemetry.feed(done(1.0, generation_tokens=30))
    (summary,) = telemetry.requests()
    assert summary.generation_tokens == 30 and summary.avg_tps is None
    assert telemetry.current().total_tokens == 30


def test_unfinished_requests_are_listed_with_their_text_so_far() -> None:
    telemetry = local_telemetry()
    telemetry.feed(token(0.0, 0, request="a", text="Hel"))
    telemetry.feed(token(0.1, 1, request="a", text="lo"))
    (summary,) = telemetry.requests()
    assert not summary.finished and summary.text == "Hello" and summary.generation_tokens == 2


# -- links ------------------------------------------------------------------------------


def test_two_ranks_traffic_makes_one_link() -> None:
    telemetry = local_telemetry()
    telemetry.feed(traffic(0, 1.0, {"1": 1000}))  # 2000 B/s from 0 to 1
    telemetry.feed(traffic(1, 1.1, {"0": 3000}))  # 6000 B/s from 1 to 0
    series = telemetry.link_series()
    assert list(series) == ["0↔1"]
    t, v = series["0↔1"]
    assert t.tolist() == pytest.approx([1.0, 1.1])
    assert v.tolist() == pytest.approx([2000.0, 8000.0])
    assert telemetry.link_totals() == {"0↔1": 4000}
    headline = telemetry.current()
    assert dict(headline.link_bytes_per_s) == {"0↔1": pytest.approx(8000.0)}
    assert headline.total_bytes_per_s == pytest.approx(8000.0)


def test_three_rank_ring_makes_three_links() -> None:
    telemetry = local_telemetry()
    for rank in range(3):  # each sends 500 B in 0.5 s to each neighbour
        peers = {str(p): 500 for p in range(3) if p != rank}
        telemetry.feed(traffic(rank, 1.0 + rank * 0.01, peers))
    latest = telemetry.current().link_bytes_per_s
    assert dict(latest) == {"0↔1": 2000.0, "0↔2": 2000.0, "1↔2": 2000.0}
    assert telemetry.total_link_series()[1][-1] == pytest.approx(6000.0)
    assert telemetry.link_totals() == {"0↔1": 1000, "0↔2": 1000, "1↔2": 1000}


def test_a_silent_sender_stops_counting() -> None:
    telemetry = local_telemetry()
    telemetry.feed(traffic(1, 0.0, {"0": 1000}))
    telemetry.feed(traffic(0, 0.2, {"1": 1000}))
    assert telemetry.current().link_bytes_per_s["0↔1"] == pytest.approx(4000.0)
    telemetry.feed(traffic(0, 10.0, {"1": 1000}))  # rank 1's report is long stale
    assert telemetry.current().link_bytes_per_s["0↔1"] == pytest.approx(2000.0)


def test_links_fall_to_zero_when_traffic_stops() -> None:
    """Workers report traffic only while bytes move; heartbeats keep coming."""
    telemetry = local_telemetry()
    telemetry.feed(traffic(0, 1.0, {"1": 1000}))
    telemetry.feed(traffic(1, 1.0, {"0": 1000}))
    telemetry.feed(event("heartbeat", 0, 1.5))  # within 3 intervals: still counting
    assert telemetry.current().link_bytes_per_s["0↔1"] == pytest.approx(4000.0)
    telemetry.feed(event("heartbeat", 1, 3.0))
    headline = telemetry.current()
    assert dict(headline.link_bytes_per_s) == {"0↔1": 0.0}
    assert headline.total_bytes_per_s == 0.0
    t, v = telemetry.link_series()["0↔1"]
    assert t[-1] == 3.0 and v[-1] == 0.0
    assert telemetry.link_totals() == {"0↔1": 2000}  # totals stay


def test_a_link_rises_where_its_first_report_after_quiet_began() -> None:
    """A report's bytes moved within its interval, not before: after a quiet stretch the
    link's series says where that interval began (its rate then, 0), so no line ramps
    from the last zero (a heartbeat's expiry, 1.3 s earlier here) across the quiet."""
    telemetry = local_telemetry()
    telemetry.feed(traffic(0, 9.5, {"1": 4}))
    telemetry.feed(traffic(0, 10.0, {}))  # the report at zero once bytes stop
    telemetry.feed(event("heartbeat", 1, 11.6))  # rank 0's direction expires: 0 at 11.6
    telemetry.feed(traffic(1, 12.87, {"0": 86_819}))  # an answer's first report
    telemetry.feed(traffic(0, 12.89, {"1": 100}))  # (rank 0 was quiet too: no ramp)
    t, v = telemetry.link_series()["0↔1"]
    assert t.tolist() == pytest.approx([9.5, 10.0, 11.6, 12.37, 12.87, 12.89])
    assert v.tolist() == pytest.approx([8.0, 0.0, 0.0, 0.0, 173_638.0, 173_838.0])
    total_t, total_v = telemetry.total_link_series()
    assert 12.37 in total_t.round(6).tolist() and total_v[total_t.round(6) == 12.37] == [0.0]
    telemetry.feed(traffic(1, 13.37, {"0": 50_000}))  # still moving: reports follow on
    assert telemetry.link_series()["0↔1"][0].tolist()[-1] == pytest.approx(13.37)
    assert len(telemetry.link_series()["0↔1"][0]) == 7


def test_a_first_report_on_a_new_link_adds_no_earlier_point() -> None:
    """Nothing drawn before a link's first sample, so nothing to ramp from."""
    telemetry = local_telemetry()
    telemetry.feed(traffic(0, 5.0, {"1": 1000}))
    assert telemetry.link_series()["0↔1"][0].tolist() == [5.0]


def test_a_peer_missing_from_a_report_got_nothing() -> None:
    telemetry = local_telemetry()
    telemetry.feed(traffic(0, 0.0, {"1": 1000}))
    telemetry.feed(traffic(0, 0.5, {}))
    assert telemetry.current().link_bytes_per_s["0↔1"] == 0.0


def test_link_id_is_undirected() -> None:
    assert link_id(2, 0) == link_id(0, 2) == "0↔2"


# -- memory and bounds ---------------------------------------------------------------------


def test_memory_per_rank_from_loaded_and_done() -> None:
    telemetry = local_telemetry()
    telemetry.feed(event("loaded", 0, 0.0, load_s=1.0, memory_bytes=1_000, layers=None))
    telemetry.feed(event("loaded", 1, 0.0, load_s=1.0, memory_bytes=1_500, layers=None))
    telemetry.feed(done(1.0, rank=1, peak_memory_bytes=3_000))
    assert telemetry.memory() == {0: 1_000, 1: 3_000}
    assert telemetry.requests() == []  # rank 1's done is not a request summary


def test_memory_stays_bounded_over_a_long_run() -> None:
    capacity, text_limit = 100, 256
    telemetry = local_telemetry(capacity=capacity, text_limit=text_limit, max_requests=3)
    for i in range(10 * capacity):
        telemetry.feed(token(i * 0.01, i, text="abcdefgh"))
    rates = telemetry.tokens_per_s()
    assert rates.instant[0].size == capacity and rates.smoothed[0].size == capacity
    (active,) = telemetry.requests()
    assert active.text == "abcdefgh" * 32 and active.generation_tokens == 10 * capacity
    for i in range(10):
        telemetry.feed(done(100.0 + i, request=f"q{i}", text="y" * 10_000))
    summaries = telemetry.requests()
    assert [s.id for s in summaries[:3]] == ["q7", "q8", "q9"]
    assert all(len(s.text) <= text_limit for s in summaries)


def test_unfinished_requests_are_bounded() -> None:
    telemetry = local_telemetry()
    for i in range(1000):
        telemetry.request_started(f"lost{i}", float(i))
    assert len(telemetry.requests()) <= 32


# -- robustness ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        None,
        "token",
        {},
        {"event": "token"},
        {"event": "token", "rank": 0, "t": 1.0},  # no request
        {"event": "token", "rank": 0, "t": 1.0, "request": "r1", "text": 5},
        {"event": "token", "rank": "zero", "t": 1.0, "request": "r1"},
        {"event": "token", "rank": 0, "t": "soon", "request": "r1"},
        {"event": "token", "rank": 0, "t": float("nan"), "request": "r1"},
        {"event": "traffic", "rank": 0, "t": 1.0, "interval_s": 0, "sent": {"1": 5}},
        {"event": "traffic", "rank": 0, "t": 1.0, "interval_s": 0.5, "sent": [1, 2]},
        {"event": "traffic", "rank": 0, "t": 1.0, "interval_s": 0.5, "sent": {"x": 5}},
        {"event": "traffic", "rank": 0, "t": 1.0, "interval_s": 0.5, "sent": {"0": 5}},
        {"event": "traffic", "rank": 0, "t": 1.0, "interval_s": 0.5, "sent": {"1": -5}},
        {"event": "loaded", "rank": 0, "t": 1.0},
        {"event": "done", "rank": 0, "t": 1.0},
        {"event": "a-future-kind", "rank": 0, "t": 1.0},
    ],
)
def test_malformed_or_unknown_events_are_ignored(bad: Any) -> None:
    """Through the one door (``parse_event`` checks the types): what it lets through with
    a bad value (NaN, a negative count, no such peer) the telemetry refuses itself."""
    telemetry = local_telemetry()
    parsed = p.parse_event(json.dumps(bad))
    if parsed is not None:
        telemetry.feed(parsed)
    assert telemetry.link_series() == {} and telemetry.memory() == {}
    assert telemetry.requests() == []
    assert telemetry.current() == Headline(
        tokens_per_s=0.0,
        last_avg_tps=None,
        ttft_s=None,
        prompt_tps=None,
        total_tokens=0,
        link_bytes_per_s={},
        total_bytes_per_s=0.0,
    )


def test_a_bad_traffic_report_changes_nothing() -> None:
    """Typed right (``parse_event`` lets it in), but one entry names no other rank: the
    whole report is refused, counted as malformed."""
    telemetry = local_telemetry()
    telemetry.feed(traffic(0, 1.0, {"1": 1000, "0": 5}))
    assert telemetry.link_totals() == {} and telemetry.malformed_events == 1


def test_a_done_whose_rates_are_not_finite_still_finishes_the_request() -> None:
    """JSON may say NaN: a figure that is not finite is no figure (None), the answer ends."""
    telemetry = local_telemetry()
    telemetry.feed(token(0.0, 0))
    line = json.dumps(done(1.0, prompt_tps=float("nan"), generation_tps=float("inf")))
    parsed = p.parse_event(line)
    assert parsed is not None
    telemetry.feed(parsed)
    (summary,) = telemetry.requests()
    assert summary.finished and summary.prompt_tps is None and summary.text == "xxxx"


def test_rank_facts_say_what_each_rank_runs_on() -> None:
    """Issue 17: the BLAS and weight precision of every rank, from its loaded event."""
    from core.run.measure.telemetry import Telemetry

    telemetry = Telemetry(clock=None)
    blas = {"name": "OpenBLAS 0.3.31", "path": "/x.so", "threads": 1, "gflops": 90.0, "fast": True}
    weights = {"precision": "float32", "dequantized": True, "from": "4-bit"}
    for rank in (1, 0):
        telemetry.feed(
            {"event": "loaded", "rank": rank, "t": 1.0, "memory_bytes": 10, "device": "cpu",
             "blas": blas, "weights": weights}
        )  # fmt: skip
    facts = telemetry.rank_facts()
    assert [f["rank"] for f in facts] == [0, 1]
    assert facts[0]["blas"] == "OpenBLAS 0.3.31" and facts[0]["blas_fast"] is True
    assert facts[0]["blas_gflops"] == 90.0 and facts[0]["weights"] == "float32"
    assert facts[0]["dequantized"] is True


# -- one definition per figure (issue 25, item 1) ------------------------------------------


def test_an_answers_figures_are_the_telemetrys_not_the_workers_raw_fields() -> None:
    """mlx-lm counts n tokens over the n - 1 gaps (9.5 here, for 10 by the timestamps);
    every surface shows the timestamps' figure, the worker's count and our TTFT."""
    telemetry = local_telemetry()
    telemetry.request_started("r1", 0.6)
    for i, t in enumerate((1.0, 1.1, 1.2, 1.3)):
        telemetry.feed(token(t, i))
    telemetry.feed(done(1.35))
    (summary,) = telemetry.requests()
    figures = answer_figures(done(1.35), summary)
    assert figures.generation_tps == pytest.approx(10.0) == summary.tokens_per_s
    assert figures.generation_tokens == 4 == telemetry.current().total_tokens
    assert figures.ttft_s == pytest.approx(0.4) == telemetry.current().ttft_s
    assert telemetry.current().last_avg_tps == figures.generation_tps
    assert "avg_tps" not in figures.as_dict()  # one tokens/s, not two


def test_an_answers_figures_keep_their_keys_in_order_for_the_history_and_json() -> None:
    """The history, the CLI's JSON and the metrics read the same keys as before the
    dataclass: ``as_dict`` keeps them, in the order they were written."""
    figures = answer_figures(done(1.0, generation_tokens=5, generation_tps=12.5), None)
    assert list(figures.as_dict()) == [
        "prompt_tokens", "prompt_tps", "cached_tokens", "generation_tokens",
        "generation_tps", "ttft_s", "finish_reason", "text",
    ]  # fmt: skip
    assert figures.as_dict()["generation_tokens"] == 5 == figures.generation_tokens
    assert figures.as_dict()["cached_tokens"] == 0


def test_without_token_events_the_workers_rate_is_converted_to_the_same_definition() -> None:
    telemetry = local_telemetry()
    telemetry.feed(done(1.0, generation_tokens=5, generation_tps=12.5))
    (summary,) = telemetry.requests()
    assert summary.tokens_per_s == pytest.approx(10.0)  # 12.5 * 4 / 5
    assert answer_figures(done(1.0), None).generation_tps == pytest.approx(9.5 * 3 / 4)
    single = local_telemetry()
    single.feed(done(1.0, generation_tokens=1, generation_tps=4.0))
    assert single.requests()[0].tokens_per_s is None  # one token has no rate


def test_tokens_the_worker_counted_but_did_not_send_still_count() -> None:
    """A worker that sends no event for the end-of-sequence token (before issue 25): the
    card's total still ends at the worker's count."""
    telemetry = local_telemetry()
    for i, t in enumerate((1.0, 1.1, 1.2)):
        telemetry.feed(token(t, i))
    telemetry.feed(done(1.3, generation_tokens=4))
    assert telemetry.current().total_tokens == 4 == telemetry.requests()[0].generation_tokens


def test_a_send_time_learnt_after_the_first_token_still_gives_our_ttft() -> None:
    """The request's id is known once it is sent: its first token can come first."""
    telemetry = local_telemetry()
    telemetry.feed(token(10.4, 0))
    telemetry.request_started("r1", 10.0)
    assert telemetry.current().ttft_s == pytest.approx(0.4)
    telemetry.feed(token(10.5, 1))
    telemetry.feed(done(10.6))  # the worker says 0.25
    assert telemetry.requests()[0].ttft_s == pytest.approx(0.4)
    telemetry.request_started("r1", 10.1)  # too late: kept as it was, nothing tracked anew
    assert [r.ttft_s for r in telemetry.requests()] == [pytest.approx(0.4)]


def test_each_ranks_peaks_while_loading_and_generating() -> None:
    telemetry = local_telemetry()
    telemetry.feed(event("heartbeat", 0, 0.5, stage="weights", peak_bytes=900))
    telemetry.feed(event("heartbeat", 1, 0.5, stage="weights", peak_bytes=400))
    loaded = {"load_s": 1.0, "memory_bytes": 10, "layers": None, "strategy": "pipeline"}
    loaded |= {"device": "cpu", "blas": None, "weights": {}}  # a loaded event's whole fields
    telemetry.feed(event("loaded", 0, 1.0, **loaded, base_bytes=100, peak_load_bytes=700))
    telemetry.feed(event("loaded", 1, 1.0, **loaded, base_bytes=100, peak_load_bytes=500))
    telemetry.feed(event("heartbeat", 0, 2.0, peak_bytes=600))
    telemetry.feed(event("heartbeat", 1, 2.0, peak_bytes=650))
    telemetry.feed(done(3.0, rank=0, peak_generation_bytes=640))
    peaks = telemetry.peaks()
    assert peaks[0] == RankPeak(base=100, load=900, generation=640)
    assert peaks[1] == RankPeak(base=100, load=500, generation=650)
    # What the window's bars and the summary compare with the plan: above the base.
    assert telemetry.peak_memory() == {0: 800, 1: 550}


def test_a_rank_that_measures_nothing_shows_what_mlx_reported() -> None:
    telemetry = local_telemetry()
    telemetry.feed(event("loaded", 0, 0.0, load_s=1.0, memory_bytes=1_000, layers=None))
    telemetry.feed(event("heartbeat", 0, 1.0))
    assert telemetry.peaks() == {}
    assert telemetry.peak_memory() == {0: 1_000}


def test_a_ranks_stopped_event_gives_its_last_generation_peak() -> None:
    telemetry = local_telemetry()
    loaded = {"load_s": 1.0, "memory_bytes": 10, "layers": None, "strategy": "pipeline"}
    loaded |= {"device": "cpu", "blas": None, "weights": {}}  # a loaded event's whole fields
    telemetry.feed(event("loaded", 1, 1.0, **loaded, base_bytes=100, peak_load_bytes=500))
    telemetry.feed(event("stopped", 1, 2.0, peak_generation_bytes=450))
    assert telemetry.peaks()[1] == RankPeak(base=100, load=500, generation=450)


def test_the_cluster_over_an_answers_span_is_final_while_others_stream() -> None:
    """Issue 35 item 3: an answer that ends while another still streams keeps the
    cluster's figure over its own span (every answer's tokens then), which later tokens
    do not change; ``batch()`` is the batch so far."""
    telemetry = local_telemetry()
    for i in range(11):  # r1: 1.0 … 2.0, r2: 1.05 … 3.05, 10 tokens/s each
        telemetry.feed(token(1.0 + i / 10, i, request="r1"))
        telemetry.feed(token(1.05 + i / 10, i, request="r2"))
    telemetry.feed(done(2.01, request="r1", generation_tokens=11))
    (first,) = [r for r in telemetry.requests() if r.id == "r1"]
    assert (first.first_at, first.last_at) == pytest.approx((1.0, 2.0))
    during = telemetry.cluster_between(first.first_at, first.last_at)
    assert during is not None
    assert during.tokens == 21 and during.most == 2  # r1's 11 and r2's 10 up to 1.95
    assert during.tokens_per_s == pytest.approx(20 / 1.0)
    for i in range(11, 21):  # r2 goes on alone
        telemetry.feed(token(1.05 + i / 10, i, request="r2"))
    assert telemetry.cluster_between(first.first_at, first.last_at) == during  # final
    so_far = telemetry.batch()
    assert so_far is not None and so_far.tokens == 32  # the batch went on
    assert telemetry.cluster_between(5.0, 6.0) is None  # nothing then
