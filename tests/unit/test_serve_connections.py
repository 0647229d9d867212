"""The API server's connection bounds (core/serve/connections.py) and its log's escaping
(core/serve/app.py), without a server: who is admitted, who is replaced, the limits
kept under the open-file limit, accept() errors as one line."""

from __future__ import annotations

import asyncio
import errno
import resource

import pytest

from core.serve.app import loggable, loggable_path
from core.serve.connections import (
    ConnectionGuard,
    ConnectionLimits,
    quiet_accept_errors,
    raise_open_file_limit,
)


class Conn:
    """A connection as the guard sees it: its client's address, and a way to drop it."""

    def __init__(self, guard: ConnectionGuard, host: str, heard: bool = True) -> None:
        self.guard, self.host, self.dropped = guard, host, False
        self.heard = heard  # part of its head arrived (a slow sender's has)

    def drop(self) -> None:
        self.dropped = True
        self.guard.release(self)  # type: ignore[arg-type]


def _join(
    guard: ConnectionGuard, host: str, reading_head: bool = True, heard: bool = True
) -> Conn | None:
    conn = Conn(guard, host, heard)
    if not guard.admit(conn):  # type: ignore[arg-type]
        return None
    if reading_head:
        guard.reading_head(conn)  # type: ignore[arg-type]
    else:
        guard.answering(conn)  # type: ignore[arg-type]
    return conn


def test_a_head_not_heard_yet_is_replaced_after_every_slow_one() -> None:
    """A request whose head is in flight (nothing of it read yet, the loop busy accepting)
    stays while any slow sender's partial head can make room."""
    guard = ConnectionGuard(ConnectionLimits(per_client=3, total=100))
    in_flight = _join(guard, "10.0.0.1", heard=False)
    slow = [_join(guard, "10.0.0.1") for _ in range(2)]
    assert in_flight is not None and all(slow)
    assert _join(guard, "10.0.0.1") is not None and _join(guard, "10.0.0.1") is not None
    assert [c.dropped for c in slow if c] == [True, True] and not in_flight.dropped


def test_a_client_over_its_bound_replaces_its_own_oldest_slow_head() -> None:
    guard = ConnectionGuard(ConnectionLimits(per_client=3, total=100))
    slow = [_join(guard, "10.0.0.9") for _ in range(3)]
    other = _join(guard, "10.0.0.1")
    newest = _join(guard, "10.0.0.9")
    assert newest is not None and slow[0] is not None and slow[0].dropped
    assert not any(c.dropped for c in (*slow[1:], other) if c is not None)
    assert guard.open == 4 and guard.replaced == 1


def test_over_the_total_the_oldest_slow_head_of_anyone_makes_room() -> None:
    guard = ConnectionGuard(ConnectionLimits(per_client=10, total=4))
    answering = _join(guard, "10.0.0.1", reading_head=False)
    heads = [_join(guard, f"10.0.0.{n}") for n in (2, 3, 4)]
    assert _join(guard, "10.0.0.5") is not None
    assert heads[0] is not None and heads[0].dropped
    assert answering is not None and not answering.dropped
    assert guard.open == 4


def test_over_the_total_the_client_holding_the_most_pays_not_a_request_in_flight() -> None:
    """Two addresses flood slow heads up to the total; a third's request, accepted but
    not read yet, is never the one replaced when the flood's newcomers need room, even
    when none of the flood's heads has been read either."""
    guard = ConnectionGuard(ConnectionLimits(per_client=4, total=8))
    flood = [_join(guard, f"10.0.0.{2 + n % 2}", heard=False) for n in range(7)]
    in_flight = _join(guard, "10.0.0.1", heard=False)
    assert in_flight is not None and all(flood) and guard.open == 8
    for n in range(20):
        assert _join(guard, f"10.0.0.{2 + n % 2}", heard=False) is not None
    assert not in_flight.dropped and guard.open == 8
    assert sum(c.dropped for c in flood if c is not None) == 7


def test_with_nobody_to_replace_a_newcomer_is_refused() -> None:
    guard = ConnectionGuard(ConnectionLimits(per_client=2, total=3))
    busy = [_join(guard, "10.0.0.1", reading_head=False) for _ in range(2)]
    assert _join(guard, "10.0.0.1") is None  # its own two are answering
    assert _join(guard, "10.0.0.2", reading_head=False) is not None
    assert _join(guard, "10.0.0.3") is None  # the total, all answering
    assert guard.refused == 2 and not any(c.dropped for c in busy if c is not None)


def test_a_closed_connection_frees_its_room_once() -> None:
    guard = ConnectionGuard(ConnectionLimits(per_client=1, total=1))
    first = _join(guard, "10.0.0.1", reading_head=False)
    assert first is not None
    guard.release(first)  # type: ignore[arg-type]
    guard.release(first)  # type: ignore[arg-type]
    assert guard.open == 0
    assert _join(guard, "10.0.0.1") is not None


def test_a_head_sent_is_no_longer_replaceable() -> None:
    guard = ConnectionGuard(ConnectionLimits(per_client=1, total=10))
    conn = _join(guard, "10.0.0.1")
    assert conn is not None
    guard.answering(conn)  # type: ignore[arg-type]
    assert _join(guard, "10.0.0.1") is None and not conn.dropped


def test_the_total_stays_under_half_the_open_file_limit() -> None:
    files = raise_open_file_limit()
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft == resource.RLIM_INFINITY or files == soft
    limits = ConnectionLimits(total=10**6, per_client=10**6).within_files()
    assert limits.total <= files // 2 and limits.per_client <= limits.total


def test_accept_out_of_files_is_one_line_a_minute_and_other_errors_go_on() -> None:
    said: list[str] = []
    passed: list[dict] = []
    handle = quiet_accept_errors(said.append)
    loop = asyncio.new_event_loop()
    try:
        loop.default_exception_handler = passed.append  # type: ignore[method-assign]
        error = OSError(errno.EMFILE, "Too many open files")
        for _ in range(500):
            handle(loop, {"message": "socket.accept() out of system resource", "exception": error})
        handle(loop, {"message": "something else"})
    finally:
        loop.close()
    assert said == [
        "The API server cannot accept more connections now (Too many open files); it retries."
    ]
    assert passed == [{"message": "something else"}]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("key file\n127.0.0.1 forged", "key file\\n127.0.0.1 forged"),
        ("red\x1b[31m", "red\\x1b[31m"),
        ("back\\slash", "back\\\\slash"),
        ("bidi\u202eevil\u2028line", "bidi\\u202eevil\\u2028line"),
        ("Zoë", "Zoë"),
    ],
)
def test_client_text_in_the_log_is_escaped(text: str, shown: str) -> None:
    assert loggable(text) == shown


def test_a_path_in_the_log_is_percent_encoded_again() -> None:
    decoded = "/x\n127.0.0.1 key file POST /v1/chat/completions 200\x1b[31mX%é"
    assert loggable_path(decoded) == (
        "/x%0A127.0.0.1%20key%20file%20POST%20/v1/chat/completions%20200%1B%5B31mX%25%C3%A9"
    )
    assert loggable_path("/v1/chat/completions") == "/v1/chat/completions"
