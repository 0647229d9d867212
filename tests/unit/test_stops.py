"""Stop sequences over streamed text (core/worker/stops.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from core.worker.stops import StopScanner


def test_text_that_may_begin_a_stop_is_held_back_until_it_is_known() -> None:
    scanner = StopScanner(["\nQ:"])
    assert scanner.feed("Paris.") == "Paris."
    assert scanner.feed("\n") == ""  # could be the stop's start
    assert scanner.feed("Q") == ""
    assert scanner.feed(": next") == ""
    assert scanner.stopped


def test_held_text_is_released_when_it_turns_out_not_to_be_a_stop() -> None:
    scanner = StopScanner(["\nQ:"])
    assert scanner.feed("a\n") == "a"
    assert scanner.feed("b") == "\nb"
    assert not scanner.stopped
    assert scanner.feed("\n") == ""
    assert scanner.flush() == "\n"  # the answer ended otherwise: nothing is lost


def test_the_earliest_of_several_stops_wins_within_one_piece() -> None:
    scanner = StopScanner(["END", "is"])
    assert scanner.feed("This is the END") == "Th"
    assert scanner.stopped and scanner.feed("more") == "" and scanner.flush() == ""


def test_no_stops_passes_everything_through() -> None:
    scanner = StopScanner()
    assert scanner.feed("abc") == "abc" and scanner.flush() == ""


@given(
    st.lists(st.text(alphabet="ab\nQ:", max_size=5), max_size=12),
    st.lists(st.text(alphabet="ab\nQ:", min_size=1, max_size=3), max_size=3),
)
def test_shown_text_is_the_text_before_the_first_stop(pieces: list[str], stops: list[str]) -> None:
    scanner = StopScanner(stops)
    shown = "".join(scanner.feed(piece) for piece in pieces) + scanner.flush()
    text = "".join(pieces)
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    assert shown == (text[: min(hits)] if hits else text)
    assert scanner.stopped == bool(hits)


def test_a_stop_found_waits_for_one_that_may_begin_before_it() -> None:
    """Found by the property above: with stops "\\n" and ":\\nQ", the text ":\\n" holds
    the "\\n" it found while ":\\nQ" may still complete; once it does, it wins."""
    scanner = StopScanner(["\n", ":\nQ"])
    assert scanner.feed(":\n") == "" and not scanner.stopped
    assert scanner.feed("Q") == "" and scanner.stopped
    ended = StopScanner(["\n", ":\nQ"])
    assert ended.feed(":\n") == "" and ended.flush() == ":" and ended.stopped
