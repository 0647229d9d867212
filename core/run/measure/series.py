"""Fixed-size time series and rate estimators: the numeric parts of telemetry.

Memory never grows with run length: a ring buffer allocates its arrays once.
Not thread-safe by themselves; ``core.run.measure.telemetry.Telemetry`` guards them.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

DEFAULT_TAU_S = 1.0  # time constant of the smoothed tokens/s
MIN_INTERVAL_S = 1e-6  # shorter gaps between tokens give no instantaneous rate

Series = tuple[np.ndarray, np.ndarray]


class RingBuffer:
    """The newest ``capacity`` (t, value) samples in preallocated float64 arrays.

    Memory is fixed at construction, so a plot's data never grows with run
    length. Not thread-safe. ``window`` needs ``t`` never to decrease.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self._capacity = capacity
        self._t = np.zeros(capacity)
        self._v = np.zeros(capacity)
        self._next = 0
        self._count = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        return self._count

    def append(self, t: float, value: float) -> None:
        i = self._next
        self._t[i] = t
        self._v[i] = value
        self._next = (i + 1) % self._capacity
        self._count = min(self._count + 1, self._capacity)

    def last(self) -> tuple[float, float] | None:
        """The newest sample, or None when empty."""
        if not self._count:
            return None
        i = self._next - 1
        return float(self._t[i]), float(self._v[i])

    def arrays(self) -> Series:
        """Copies of (t, values), oldest first."""
        return self._ordered(skip=0)

    def window(self, seconds: float) -> Series:
        """Copies of the samples no older than ``seconds`` before the newest."""
        newest = self.last()
        if newest is None:
            return self._ordered(skip=0)
        oldest = self._oldest()
        times = _IndexedView(self._t, oldest, self._count)
        return self._ordered(skip=bisect.bisect_left(times, newest[0] - seconds))

    def _oldest(self) -> int:
        return (self._next - self._count) % self._capacity

    def _ordered(self, skip: int) -> Series:
        first = (self._oldest() + skip) % self._capacity
        end = first + self._count - skip
        if end <= self._capacity:
            return self._t[first:end].copy(), self._v[first:end].copy()
        wrap = end - self._capacity
        return (
            np.concatenate((self._t[first:], self._t[:wrap])),
            np.concatenate((self._v[first:], self._v[:wrap])),
        )


class _IndexedView:
    """A ring's samples in time order, for ``bisect`` without copying."""

    def __init__(self, values: np.ndarray, start: int, count: int) -> None:
        self._values, self._start, self._count = values, start, count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: int) -> float:
        return float(self._values[(self._start + i) % len(self._values)])


def ema_rate_step(previous: float, dt: float, tau_s: float) -> float:
    """The smoothed rate after one more token, ``dt`` seconds after the last.

    Over ``dt`` the old value decays by exp(-dt/tau) and the new rate 1/dt
    takes the rest. The new term, (1 - exp(-dt/tau)) / dt, tends to 1/tau as
    dt -> 0, so a burst of near-simultaneous tokens adds up to the right rate
    in time instead of counting as a few huge samples.
    """
    dt = max(dt, 0.0)
    x = dt / tau_s
    gain = -math.expm1(-x) / dt if dt >= MIN_INTERVAL_S else 1.0 / tau_s
    return previous * math.exp(-x) + gain


class RateEstimator:
    """Tokens/s of one request from its tokens' timestamps on one rank's clock."""

    def __init__(self, tau_s: float = DEFAULT_TAU_S) -> None:
        self.tau_s = tau_s
        self.count = 0
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.smoothed: float | None = None

    def add(self, t: float) -> float | None:
        """Counts a token at ``t``; returns its instantaneous rate when it has one.

        The first token has none (its wait is the time to first token), nor
        has one after a gap shorter than ``MIN_INTERVAL_S`` (it would be huge).
        """
        self.count += 1
        if self.last_t is None:
            self.first_t = self.last_t = t
            return None
        dt = t - self.last_t
        self.last_t = max(self.last_t, t)
        instant = 1.0 / dt if dt >= MIN_INTERVAL_S else None
        if self.smoothed is None:
            self.smoothed = instant
        else:
            self.smoothed = ema_rate_step(self.smoothed, dt, self.tau_s)
        return instant

    def average(self) -> float | None:
        """(n - 1) tokens over (t_last - t_first): what generation_tps means.

        Like mlx-lm's generation_tps it excludes the time to first token, so the
        two compare; mlx-lm counts n tokens over those n - 1 gaps, so its figure
        reads higher by n / (n - 1) (5% at 20 tokens, nothing at 500).
        """
        if self.first_t is None or self.last_t is None or self.count < 2:
            return None
        span = self.last_t - self.first_t
        return (self.count - 1) / span if span >= MIN_INTERVAL_S else None
