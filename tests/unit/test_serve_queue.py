"""The waiting line: in order, bounded, Retry-After from recent answers."""

from __future__ import annotations

import pytest

from core.serve.queue import RETRY_MAX_S, QueueFull, WaitingLine


def test_first_in_first_out_with_its_depth() -> None:
    line: WaitingLine[str] = WaitingLine(3)
    assert [line.push(x) for x in "abc"] == [1, 2, 3]
    assert line.depth == 3
    assert line.remove("b") and not line.remove("b")
    assert [line.pop(), line.pop(), line.pop()] == ["a", "c", None]


def test_a_full_line_refuses_with_when_to_retry() -> None:
    line: WaitingLine[int] = WaitingLine(2)
    line.push(1)
    line.push(2)
    for _ in range(20):
        line.answered_in(3.2)
    with pytest.raises(QueueFull) as full:
        line.push(3)
    assert full.value.depth == 2 and full.value.retry_after_s == 4
    line.pop()
    line.push(3)  # room again
    for _ in range(50):
        line.answered_in(10_000)
    assert line.retry_after() == RETRY_MAX_S
    assert line.drain() == [2, 3] and line.depth == 0


def test_a_line_holds_at_least_one() -> None:
    with pytest.raises(ValueError):
        WaitingLine(0)
