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


def _owned(limit: int) -> tuple[WaitingLine[str], list[str]]:
    """A line of items named "<key><n>", owned by their first letter."""
    bumped: list[str] = []
    line: WaitingLine[str] = WaitingLine(limit, owner=lambda item: item[0], on_bumped=bumped.append)
    return line, bumped


def test_one_key_alone_may_fill_the_line_but_makes_room_for_another_key() -> None:
    line, bumped = _owned(4)
    for n in range(4):
        line.push(f"a{n}")
    with pytest.raises(QueueFull):
        line.push("a4")
    assert line.push("b0") == 4  # a held all 4: its newest makes room
    assert bumped == ["a3"]
    assert line.push("c0") == 4 and bumped == ["a3", "a2"]  # a still held more than half
    with pytest.raises(QueueFull):  # now a holds its half: nobody holds more
        line.push("d0")
    assert line.held() == {"a": 2, "b": 1, "c": 1}


def test_a_key_holding_half_the_places_waits_for_no_more_while_others_wait() -> None:
    line, bumped = _owned(4)
    line.push("b0")
    line.push("a0")
    line.push("a1")
    with pytest.raises(QueueFull):  # a holds 2 of 4 and b waits
        line.push("a2")
    assert line.push("b1") == 4 and not bumped


def test_a_free_slot_goes_to_a_key_running_fewer_than_half_of_them() -> None:
    line, _ = _owned(8)
    for item in ("a0", "a1", "b0", "a2"):
        line.push(item)
    assert line.pop({"a": 4}, 8) == "b0"  # a runs 4 of 8: b's goes first
    assert line.pop({"a": 4, "b": 1}, 8) == "a0"  # only a waits: a may take it
    assert line.pop({"a": 1}, 8) == "a1"
    assert line.pop() == "a2" and line.pop() is None
