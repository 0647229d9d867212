"""The rule the several-models e2e test holds an unload to (tests/helpers/stalls.py): the
gap that overlaps the unload's window, less the streams' own longest gap outside it."""

from __future__ import annotations

import pytest

from tests.helpers.stalls import stall_in_window


def test_a_gap_across_the_window_is_the_windows_and_the_others_are_noise() -> None:
    steady = [0.0, 0.1, 0.2, 0.3, 1.8, 1.9, 2.0]  # 1.5 s across the window [0.35, 0.5]
    noisy = [-1.0, -0.4, 0.3, 0.55, 0.6, 1.6]  # 0.7 s before it, 1.0 s after it
    stall = stall_in_window([steady, noisy], 0.35, 0.5)
    assert stall.during_s == pytest.approx(1.5)
    assert stall.outside_s == pytest.approx(1.0)
    assert stall.attributable_s == pytest.approx(0.5)
    assert (stall.fewest_before, stall.fewest_after) == (3, 3)


def test_a_stream_that_stops_before_the_window_ends_has_nothing_after_it() -> None:
    stall = stall_in_window([[0.0, 0.1, 0.2], [0.0, 0.1, 0.2, 0.9]], 0.15, 0.5)
    assert stall.fewest_after == 0 and stall.during_s == pytest.approx(0.7)
    with pytest.raises(ValueError, match="ends before it starts"):
        stall_in_window([], 1.0, 0.5)
