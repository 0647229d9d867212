"""A remote rank's signal goes over its session, or over a fresh connection when the
session does not answer: within a bound, whatever the link does (issue 12, fault 5)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from core.remote.ssh import ConnectionLost
from core.run.job import remote_ranks
from core.run.job.remote_ranks import RemoteRank


class FakeProcess:
    pgid = 4242

    def poll(self) -> int | None:
        return None

    def wait(self, timeout: float | None = None) -> int | None:
        return None


class FakeConnection:
    """``kill_group`` answers, fails, or hangs like a frozen link (until released)."""

    host = "node1"

    def __init__(self, behaviour: str = "answers") -> None:
        self.behaviour = behaviour
        self.signals: list[str] = []
        self.release = threading.Event()

    def start(self, command: str, env: dict[str, str]) -> FakeProcess:
        return FakeProcess()

    def kill_group(self, pgid: int, sig: str = "TERM", timeout: float | None = None) -> None:
        if self.behaviour == "fails":
            raise ConnectionLost(self.host, "gone")
        if self.behaviour == "hangs":
            self.release.wait(timeout)
            raise ConnectionLost(self.host, "no answer")
        self.signals.append(sig)

    def __enter__(self) -> FakeConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _rank(tmp_path: Path, session: FakeConnection, fresh: FakeConnection) -> RemoteRank:
    return RemoteRank(1, session, "worker", {}, tmp_path / "rank1.log", reconnect=lambda: fresh)


def test_a_healthy_session_carries_the_signal_alone(tmp_path: Path) -> None:
    session, fresh = FakeConnection(), FakeConnection()
    assert _rank(tmp_path, session, fresh).signal("TERM")
    assert session.signals == ["TERM"] and fresh.signals == []


def test_a_lost_session_hands_the_signal_to_a_fresh_connection_at_once(tmp_path: Path) -> None:
    session, fresh = FakeConnection("fails"), FakeConnection()
    started = time.monotonic()
    assert _rank(tmp_path, session, fresh).signal("KILL")
    assert fresh.signals == ["KILL"]
    assert time.monotonic() - started < remote_ranks.HEDGE_S


def test_a_frozen_session_is_hedged_and_later_signals_skip_it(tmp_path: Path) -> None:
    session, fresh = FakeConnection("hangs"), FakeConnection()
    rank = _rank(tmp_path, session, fresh)
    try:
        started = time.monotonic()
        assert rank.signal("TERM")
        assert remote_ranks.HEDGE_S <= time.monotonic() - started < remote_ranks.SIGNAL_WITHIN_S
        started = time.monotonic()
        assert rank.signal("KILL")  # the session did not answer: no second wait for it
        assert time.monotonic() - started < remote_ranks.HEDGE_S
        assert fresh.signals == ["TERM", "KILL"]
    finally:
        session.release.set()


def test_nothing_answering_gives_up_within_the_bound(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(remote_ranks, "SIGNAL_WITHIN_S", 0.5)
    monkeypatch.setattr(remote_ranks, "HEDGE_S", 0.1)
    session, fresh = FakeConnection("hangs"), FakeConnection("hangs")
    try:
        started = time.monotonic()
        assert not _rank(tmp_path, session, fresh).signal("KILL")
        assert 0.5 <= time.monotonic() - started < 2.0  # the bound; 2 s: a hang guard
    finally:
        session.release.set()
        fresh.release.set()
