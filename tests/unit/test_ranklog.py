"""A rank's log line per step of its life (``core.run.job.ranklog``)."""

from __future__ import annotations

import json

from core.run.job.ranklog import MAX_VALUE_CHARS, journal_line
from core.worker import protocol as p

T = 1_765_000_000.0


def test_lifecycle_events_are_journaled_without_the_answer_text() -> None:
    done = p.parse_event(
        '{"event":"done","rank":0,"t":1.0,"request":"r1","prompt_tokens":3,"prompt_tps":9.0,'
        '"generation_tokens":2,"generation_tps":4.5,"ttft_s":0.2,"finish_reason":"stop",'
        '"peak_memory_bytes":10,"text":"my secret answer"}'
    )
    assert done is not None
    line = journal_line(done, now=T)
    assert line is not None and line.startswith("2025-12-06T05:46:40Z done: request=r1 ")
    assert "generation_tokens=2" in line and "secret" not in line


def test_tokens_beats_and_traffic_are_not_journaled() -> None:
    for raw in (
        '{"event":"token","rank":0,"t":1.0,"request":"r1","index":0,"token":7,"text":"Paris"}',
        '{"event":"heartbeat","rank":0,"t":1.0}',
    ):
        event = p.parse_event(raw)
        assert event is not None, raw
        assert journal_line(event, now=T) is None


def test_a_hostile_error_stays_one_bounded_line() -> None:
    message = "boom\nforged line\r" + "x" * 5000
    event = p.parse_event(
        '{"event":"error","rank":1,"t":1.0,"message":' + json.dumps(message) + ',"fatal":true}'
    )
    assert event is not None
    line = journal_line(event, now=T)
    assert line is not None and "\n" not in line and "\r" not in line
    assert len(line) < MAX_VALUE_CHARS + 100
