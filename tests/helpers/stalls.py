"""How long streams stalled because of something that happened in a window of time (an
unload), told apart from the stalls a busy machine gives them anyway.

Each stream is the ``time.monotonic()`` of each of its text pieces, from its first. A gap
is the time between two pieces. A gap that overlaps the window (from just before the
thing began to just after it ended) is the window's; a gap wholly before or after it is
the machine's own noise for those same streams. What the window added is at most the
window's longest gap less the longest noise gap: on a quiet machine that is the stall,
on a busy one the noise already paid for is not charged to the window.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Stall:
    during_s: float  # the longest gap that overlaps the window (0: none)
    outside_s: float  # the longest gap wholly before or after it (0: none)
    fewest_before: int  # the fewest pieces any stream had before the window began
    fewest_after: int  # the fewest pieces any stream had after the window ended

    @property
    def attributable_s(self) -> float:
        """The part of the window's longest gap above the machine's own noise."""
        return max(0.0, self.during_s - self.outside_s)

    def to_dict(self) -> dict[str, float | int]:
        return {
            "longest_gap_in_window_s": round(self.during_s, 3),
            "longest_gap_outside_s": round(self.outside_s, 3),
            "attributable_s": round(self.attributable_s, 3),
            "fewest_pieces_before": self.fewest_before,
            "fewest_pieces_after": self.fewest_after,
        }


def stall_in_window(streams: Sequence[Sequence[float]], start: float, end: float) -> Stall:
    """The gaps of ``streams`` (each its pieces' times, in order) in and out of the
    window ``[start, end]``."""
    if end < start:
        raise ValueError("the window ends before it starts")
    during = outside = 0.0
    before, after = [], []
    for times in streams:
        before.append(sum(1 for t in times if t < start))
        after.append(sum(1 for t in times if t > end))
        for prev, now in itertools.pairwise(times):
            gap = now - prev
            if now > start and prev < end:
                during = max(during, gap)
            else:
                outside = max(outside, gap)
    return Stall(during, outside, min(before, default=0), min(after, default=0))
