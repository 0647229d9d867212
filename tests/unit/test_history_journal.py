"""Runs the history cannot take now wait in its journal and are added by the next write
or read that can, once each (issue 33, "What to build" 4)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from core.run.measure import journal
from core.run.measure.history import History, RunRecord, keep


def _run(n: int) -> RunRecord:
    return RunRecord(
        kind="api", model="m", nodes=["a"], strategy="single", backend="single",
        figures={"client": f"c{n}"}, series={"tokens_per_s": [(0.0, 1.0)]}, started=float(n),
    )  # fmt: skip


def test_a_locked_history_passes_the_run_to_its_journal_then_merges_it_once(
    tmp_path: Path,
) -> None:
    store = tmp_path / "history.sqlite3"
    History(store).add(_run(1))
    lock = sqlite3.connect(store, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    said = keep(_run(2), store, wait_s=0.1)
    assert said == (
        f"the run history {store} could not be written (database is locked): the run waits "
        f"in {journal.journal_path(store)} and is added when the history can be written"
    )
    assert journal.journal_path(store).stat().st_mode & 0o777 == 0o600
    assert keep(_run(3), store, wait_s=0.1) is not None
    lock.rollback()
    lock.close()
    History(store).add(_run(4))  # the next write takes the journal's runs with its own
    runs = History(store).runs()
    assert sorted(r.started for r in runs) == [1.0, 2.0, 3.0, 4.0]
    assert runs[-1].figures == {"client": "c1"}
    assert [r.series for r in [History(store).get(r.id or 0) for r in runs] if r][2] == {
        "tokens_per_s": [(0.0, 1.0)]
    }
    assert not journal.pending(store)


def test_a_merge_cut_short_after_its_commit_adds_nothing_twice(tmp_path: Path) -> None:
    store = tmp_path / "history.sqlite3"
    History(store).add(_run(1))
    journal.append(store, _run(1).to_dict())  # already in: as after a crash before emptying
    journal.append(store, _run(2).to_dict())
    with open(journal.journal_path(store), "ab") as cut:
        cut.write(b'{"kind": "api", "model"')  # a line a crash cut short
        cut.write(b"\n" + b"[" * 100_000 + b"]" * 100_000 + b"\n")  # deeper than json goes
    assert sorted(r.started for r in History(store).runs()) == [1.0, 2.0]


def test_a_journal_that_is_not_a_regular_file_is_never_followed(tmp_path: Path) -> None:
    store = tmp_path / "history.sqlite3"
    target = tmp_path / "elsewhere"
    target.write_text("")
    journal.journal_path(store).symlink_to(target)
    lock = sqlite3.connect(store, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    said = keep(_run(1), store, wait_s=0.1)
    lock.rollback()
    assert said is not None and said.startswith("the run was not kept in the history: ")
    assert target.read_text() == ""
    journal.journal_path(store).unlink()
    os.mkfifo(journal.journal_path(store))
    lock.execute("BEGIN EXCLUSIVE")
    said = keep(_run(1), store, wait_s=0.1)  # a FIFO: refused at once, no hang
    lock.rollback()
    assert said is not None and "nor in" in said


def test_a_read_of_a_locked_history_lists_it_as_it_is_and_keeps_the_journal(
    tmp_path: Path,
) -> None:
    store = tmp_path / "history.sqlite3"
    History(store).add(_run(1))
    journal.append(store, _run(2).to_dict())
    lock = sqlite3.connect(store, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")  # a writer holds it; readers still read
    assert [r.started for r in History(store).runs()] == [1.0]
    assert journal.pending(store)
    lock.rollback()
    lock.close()
    assert [r.started for r in History(store).runs()] == [2.0, 1.0]
    assert not journal.pending(store)
