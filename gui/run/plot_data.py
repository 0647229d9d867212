"""The numbers behind the live plots: pure numpy, no Qt, so they are cheap to test.

Each redraw hands pyqtgraph only what the view shows: the samples in the time window,
peak-downsampled to about a point per pixel, with the line broken (or held at zero)
between answers so a pause never looks like a slow ramp, and the y axis fitted to the
samples the view shows. The History's plots (and their exported PNGs) shape a kept run's
series with the same functions.
"""

from __future__ import annotations

import numpy as np

from core.run.measure.telemetry import STALE_INTERVALS
from core.worker import protocol as p

GAP_S = 5.0  # per-token samples further apart than this belong to different answers
REPORT_S = p.TRAFFIC_S  # a rank reports its link traffic this often while bytes move
# Link samples further apart than this have idle time between them: a rank sends no
# report while nothing moves (telemetry forgets a sender after as many intervals).
IDLE_S = STALE_INTERVALS * REPORT_S
# After a zero, a gap longer than this many reports is quiet: a reporter is at most
# half a report late (it wakes every quarter of one), so longer means nothing moved.
QUIET_REPORTS = 1.5


def axis_top(current: float, peak: float, floor: float) -> float:
    """The y-axis top: headroom over the peak, steady while the peak moves a little."""
    wanted = max(peak * 1.15, floor)
    if current < wanted or wanted < current * 0.5:
        return nice(wanted)
    return current


def finite_peak(y: np.ndarray) -> float:
    """The largest value in ``y`` that is a number (0 when none: empty, or all gaps)."""
    finite = y[np.isfinite(y)]
    return float(finite.max()) if len(finite) else 0.0


def nice(value: float) -> float:
    """1, 2, 2.5 or 5 times a power of ten, at least ``value``: round axis tops."""
    exponent = 10 ** np.floor(np.log10(value))
    return float(next(m * exponent for m in (1, 2, 2.5, 5, 10) if m * exponent >= value))


def peak_downsample(
    x: np.ndarray, y: np.ndarray, max_points: float
) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points``: each bucket of samples becomes its minimum and maximum, so
    spikes survive (pyqtgraph's "peak" mode). NaN gaps survive too."""
    n = len(x)
    size = int(np.ceil(2 * n / max_points)) if max_points else 1
    if size <= 1:
        return x, y
    m = n // size
    if m < 2:
        return x, y
    buckets = y[: m * size].reshape(m, size)
    with np.errstate(invalid="ignore"):
        low, high = np.fmin.reduce(buckets, axis=1), np.fmax.reduce(buckets, axis=1)
    gap = np.isnan(buckets).any(axis=1)
    low[gap] = np.nan  # a gap inside a bucket stays a gap
    xs = np.repeat(x[: m * size : size], 2)
    ys = np.column_stack((low, high)).ravel()
    return np.append(xs, x[m * size :]), np.append(ys, y[m * size :])


def break_gaps(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """No line across the pause between two answers: a NaN where samples are far apart."""
    gaps = np.nonzero(np.diff(x) > GAP_S)[0]
    if not len(gaps):
        return x, y
    return np.insert(x, gaps + 1, x[gaps] + 1e-3), np.insert(y, gaps + 1, np.nan)


def hold_zero(
    x: np.ndarray, y: np.ndarray, now: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The smoothed rate drops to 0 when an answer ends and stays there until the next
    starts (a line would otherwise ramp slowly across the pause), and on to ``now`` (the
    live view's present) while nothing is being answered."""
    idle = np.nonzero((y[:-1] == 0) & (np.diff(x) > 1e-3))[0]
    if len(idle):
        x, y = np.insert(x, idle + 1, x[idle + 1]), np.insert(y, idle + 1, 0.0)
    if now is not None and len(x) and y[-1] == 0 and now > x[-1]:
        x, y = np.append(x, now), np.append(y, 0.0)
    return x, y


def zero_idle(
    x: np.ndarray,
    y: np.ndarray,
    now: float | None = None,
    idle_s: float = IDLE_S,
    report_s: float = REPORT_S,
) -> tuple[np.ndarray, np.ndarray]:
    """A link's bytes/s at 0 across idle time. A sample is the rate over the report before
    it, and no report comes while nothing moves: where two samples are more than
    ``idle_s`` apart the rate fell to 0 one report after the first and rose from 0 one
    report before the second (a line straight between them would ramp across the pause,
    "traffic climbing" while nothing ran). After a sample at 0 (a zero report, a sender
    gone quiet) a shorter gap is idle too, once it outlasts a report (``QUIET_REPORTS``
    of them, for a late reporter): the rate rose from 0 one report before the next
    sample. (Telemetry now keeps where a report's interval began; runs kept before it
    did not, and are drawn the same.) So too from the last sample to ``now`` (the live
    view's present), when that is idle time."""
    step = np.diff(x)
    gaps = np.nonzero(step > idle_s)[0]
    quiet = np.nonzero((step > QUIET_REPORTS * report_s) & (step <= idle_s) & (y[:-1] == 0))[0]
    if len(gaps) or len(quiet):
        at = np.concatenate((np.repeat(gaps + 1, 2), quiet + 1))
        zeros = np.concatenate(
            (
                np.column_stack((x[gaps] + report_s, x[gaps + 1] - report_s)).ravel(),
                x[quiet + 1] - report_s,
            )
        )
        order = np.argsort(at, kind="stable")
        x, y = np.insert(x, at[order], zeros[order]), np.insert(y, at[order], 0.0)
    if now is not None and len(x) and now - x[-1] > idle_s:
        x, y = np.append(x, (x[-1] + report_s, now)), np.append(y, (0.0, 0.0))
    return x, y


def visible_peak(x: np.ndarray, y: np.ndarray, lo: float, hi: float) -> float:
    """The largest value the line takes between ``lo`` and ``hi`` (what the view shows):
    its samples there and where it crosses the two edges; samples beyond the edges do not
    count, however high (0 when nothing is in view)."""
    if not len(x):
        return 0.0
    inside = y[(x >= lo) & (x <= hi)]
    edges = [float(np.interp(edge, x, y)) for edge in (lo, hi) if x[0] <= edge <= x[-1]]
    return finite_peak(np.concatenate((inside, np.array(edges, dtype=float))))
