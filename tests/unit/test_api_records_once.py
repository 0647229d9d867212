"""An answer the history cannot take at once may be journaled twice while ``serve``
stops: by the writer, when its wait for the store's lock ends, and by ``close``, which
journals the write still in flight when its time is up. Both journal the very same
record (made once), so the merge keeps one run, not two (the locked-history test once
found 9 runs of 8 answers)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from psygnal import Signal

from core.run.measure.history import History, journal_instead
from core.run.measure.telemetry import Telemetry
from core.serve.records import ApiRecords


class _Session:
    event = Signal(object)

    def __init__(self) -> None:
        self.spec = self.plan = self.job = None
        self.info = SimpleNamespace(name="tiny")
        self.hosts: list[Any] = []

    def rank_nodes(self) -> list[str]:
        return ["mac-1"]


def _done(request: str) -> dict[str, Any]:
    return {
        "event": "done",
        "rank": 0,
        "t": time.monotonic(),
        "request": request,
        "prompt_tokens": 3,
        "prompt_tps": 10.0,
        "generation_tokens": 4,
        "generation_tps": 20.0,
        "ttft_s": 0.1,
        "finish_reason": "length",
        "peak_memory_bytes": 1,
        "text": "four",
    }


def test_an_answer_journaled_by_the_writer_and_by_close_is_one_run(tmp_path: Path) -> None:
    store = tmp_path / "history.sqlite3"
    History(store)  # made, then locked by another program
    lock = sqlite3.connect(store, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    records = ApiRecords(_Session(), telemetry=Telemetry(), store=store)  # type: ignore[arg-type]
    try:
        now = time.monotonic()
        item = (_done("r1"), "key-a", now - 1, now)
        first, second = records._record(item), records._record(item)  # type: ignore[arg-type]
        assert first is second
        journal_instead(first, store, "locked")  # the writer's, as its wait ends
        journal_instead(second, store, "did not answer in time")  # close's
    finally:
        records.close(0.1)
        lock.rollback()
        lock.close()
    runs = History(store).runs()
    assert len(runs) == 1
