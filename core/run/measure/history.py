"""Run history: every run (a chat, a comparison, a link test, an API session) with its
model, nodes, strategy, split, backend, versions, figures and time series, kept in the
user data folder so a presenter can show last week's numbers.

SQLite from the standard library, one file: the list of runs is one indexed query
however long the series are (those sit in their own table, read only for the run asked
for). Writes are short transactions. A run that cannot be written now (the file locked,
the disk full, the folder read-only) waits in a journal next to it (``journal``) and is
added by the next write or read that can. A read that meets damage keeps the file as it
is and reads what it can: ``damage`` says how many runs could not be read, and from which
file (an export with runs missing is then a failure, ``macmesh history`` exits 1). Only a
write to a file that is no database at all sets it aside and begins a new one.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, TypeVar

from core.jsonfile import FileProblem
from core.paths import FolderError, data_dir
from core.run.measure import journal
from core.run.measure.damage import (
    SALVAGE_MAX,
    Damage,
    highest_id,
    not_a_database,
    regular_file,
)
from core.run.measure.runs import KINDS, RunKind, RunRecord, run_kind
from core.run.measure.telemetry import Telemetry

FILE_NAME = "history.sqlite3"


CSV_COLUMNS = ("run", "started", "kind", "model", "nodes", "strategy", "series", "t", "value")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started REAL NOT NULL,
    kind TEXT NOT NULL,
    model TEXT NOT NULL,
    nodes TEXT NOT NULL,
    strategy TEXT NOT NULL,
    split TEXT,
    backend TEXT NOT NULL,
    versions TEXT NOT NULL,
    figures TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_started ON runs (started);
CREATE TABLE IF NOT EXISTS series (
    run INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    t REAL NOT NULL,
    value REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS series_run ON series (run);
"""


_SQLITE_MAX_INT = (1 << 63) - 1
_T = TypeVar("_T")


WAIT_S = 10.0  # how long a write waits for another's lock (``keep``: ``KEEP_WAIT_S``)
MERGE_WAIT_S = 0.2  # a read adding the journal's runs first
KEEP_WAIT_S = 1.0  # a run kept while answering: then the journal takes it


@contextlib.contextmanager
def _open(where: str, uri: bool = False, wait_s: float = WAIT_S) -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(where, timeout=wait_s, uri=uri)
    db.row_factory = sqlite3.Row
    try:
        yield db
    finally:
        db.close()


def _damaged(error: sqlite3.DatabaseError) -> bool:
    """Whether the file is not a readable database (not a lock, a permission, a disk)."""
    return not isinstance(error, sqlite3.OperationalError)


__all__ = [
    "FILE_NAME", "KINDS", "SALVAGE_MAX", "Damage", "History", "RunKind", "RunRecord", "keep",
    "run_kind",
]  # fmt: skip


class History:
    """The runs kept in ``path`` (default: the data folder's history file).

    Reading needs no write access: a read-only data folder reads, a history not begun
    yet reads as empty. Writing makes the file 0600 first (it holds answers' text). A
    file that is not a readable history (damaged, truncated) is set aside and a new one
    begun, and ``notice`` says so; where it cannot be set aside, a ``FolderError`` does.
    """

    def __init__(self, path: Path | None = None, wait_s: float = WAIT_S) -> None:
        self._in_data_dir = path is None
        self.path = path or data_dir(writable=False) / FILE_NAME
        self.wait_s = wait_s  # how long a write waits for another writer's lock
        self.notice: str | None = None  # a damaged file set aside, in one line
        self.damage: Damage | None = None  # what the last read could not read

    def add(self, record: RunRecord) -> int:
        """Keep ``record`` (and its series), with whatever the journal holds; its id."""
        if not journal.pending(self.path):
            with self._writing() as db:
                return self._insert(db, record)
        with journal.taken(self.path) as waiting, self._writing() as db:
            self._merge(db, waiting)
            return self._insert(db, record)

    def merge_pending(self, wait_s: float | None = None) -> bool:
        """Add the journal's runs to the history, if it has any and the history can be
        written now (waiting at most ``wait_s`` for another writer); whether it could (a
        read does this first, quietly, with a short wait: a locked history is read as it
        is)."""
        if not journal.pending(self.path):
            return True
        waited, self.wait_s = self.wait_s, self.wait_s if wait_s is None else wait_s
        try:
            with journal.taken(self.path) as waiting, self._writing() as db:
                self._merge(db, waiting)
        except (FolderError, FileProblem, OSError, sqlite3.Error):
            return False
        finally:
            self.wait_s = waited
        return True

    def _merge(self, db: sqlite3.Connection, waiting: list[dict[str, Any]]) -> None:
        for data in waiting:
            try:
                record = RunRecord.from_dict(data)
            except ValueError:
                continue  # not a run of ours: nothing to keep
            same = db.execute(
                "SELECT 1 FROM runs WHERE started = ? AND kind = ? AND model = ? AND nodes = ?",
                (record.started, record.kind.value, record.model, json.dumps(record.nodes)),
            ).fetchone()
            if same is None:  # (a merge cut short after its commit: not twice)
                self._insert(db, record)

    def _insert(self, db: sqlite3.Connection, record: RunRecord) -> int:
        kind = run_kind(record.kind)  # (a RunRecord made it one; set since?)
        cursor = db.execute(
            "INSERT INTO runs (started, kind, model, nodes, strategy, split, backend, "
            "versions, figures) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.started,
                kind.value,
                record.model,
                json.dumps(record.nodes),
                record.strategy,
                None if record.split is None else json.dumps(record.split),
                record.backend,
                json.dumps(record.versions, default=str),
                json.dumps(record.figures, default=str),
            ),
        )
        run = int(cursor.lastrowid or 0)
        db.executemany(
            "INSERT INTO series (run, name, t, value) VALUES (?, ?, ?, ?)",
            (
                (run, name, float(t), float(v))
                for name, points in record.series.items()
                for t, v in points
            ),
        )
        record.id = run
        return run

    def runs(self, limit: int | None = None) -> list[RunRecord]:
        """The runs, newest first, without their series (``series(id)`` has them). Those
        waiting in the journal are added first where the history can be written. Damage
        is read around: the runs that can be, ``damage`` saying how many could not."""
        self.merge_pending(MERGE_WAIT_S)
        self.damage = None
        query = "SELECT * FROM runs ORDER BY started DESC, id DESC"
        if limit:
            limit = min(limit, _SQLITE_MAX_INT)  # more than SQLite counts: all of them
        args = (limit,) if limit else ()

        def read(db: sqlite3.Connection) -> list[RunRecord]:
            try:
                return [_record(row) for row in db.execute(query + " LIMIT ?" * bool(limit), args)]
            except (sqlite3.DatabaseError, ValueError, KeyError) as error:
                if isinstance(error, sqlite3.OperationalError) or not_a_database(error):
                    raise
                return self._salvaged(db, error, limit)

        return self._reading(read)

    def get(self, run: int) -> RunRecord | None:
        """The run with its series; None if there is none. sqlite3.DatabaseError (or
        ValueError) where its part of the file is damaged."""

        def read(db: sqlite3.Connection) -> RunRecord | None:
            row = db.execute("SELECT * FROM runs WHERE id = ?", (run,)).fetchone()
            if row is None:
                return None
            record = _record(row)
            record.series = self._series(db, run)
            return record

        return self._reading(read)

    def delete(self, run: int) -> None:
        with self._writing() as db:
            db.execute("DELETE FROM series WHERE run = ?", (run,))
            db.execute("DELETE FROM runs WHERE id = ?", (run,))

    def export_json(self, out: IO[str], runs: Iterable[int] | None = None) -> None:
        """Everything of the runs (default: all), series included, as one JSON document.
        Runs that could not be read are left out and counted in ``damage``."""
        records = list(self._exported(runs))
        json.dump({"runs": [r.to_dict() for r in records]}, out, indent=1, default=str)

    def export_csv(self, out: IO[str], runs: Iterable[int] | None = None) -> None:
        """The series of the runs (default: all), one row per sample, with each run's
        model, nodes and strategy; a run without series gives one row of its figures.
        Runs that could not be read are left out and counted in ``damage``."""
        writer = csv.writer(out)
        writer.writerow(CSV_COLUMNS)
        for record in self._exported(runs):
            head = [
                record.id,
                _iso(record.started),
                record.kind,
                record.model,
                " ".join(record.nodes),
                record.strategy,
            ]
            if not record.series:
                for name, value in _flat(record.figures):
                    writer.writerow([*head, name, "", value])
            for name, points in record.series.items():
                for t, value in points:
                    writer.writerow([*head, name, f"{t:.3f}", value])

    # -- internals ------------------------------------------------------------------

    def _exported(self, runs: Iterable[int] | None) -> Iterator[RunRecord]:
        chosen = [r.id for r in self.runs()] if runs is None else list(runs)
        for run in chosen:
            if run is None:
                continue
            try:
                record = self.get(run)
            except (sqlite3.DatabaseError, ValueError, KeyError) as error:
                if isinstance(error, sqlite3.OperationalError):
                    raise
                self._unread(error, 1)
                continue
            if record is not None:
                yield record

    def _unread(self, error: BaseException, count: int | None) -> None:
        """``count`` more runs could not be read (None: none could)."""
        before = self.damage.missing if self.damage is not None else 0
        missing = None if count is None or before is None else before + count
        self.damage = Damage(self.path, str(error), missing)

    def _salvaged(
        self, db: sqlite3.Connection, error: BaseException, limit: int | None
    ) -> list[RunRecord]:
        """Each run read on its own where the list as a whole could not be: the ones
        that can be, newest first, and the count of those that cannot in ``damage``."""
        highest = highest_id(db)
        if highest is None:  # not even which runs there were
            self._unread(error, None)
            return []
        records, missing = [], 0
        for run in range(1, highest + 1):
            try:
                row = db.execute("SELECT * FROM runs WHERE id = ?", (run,)).fetchone()
                if row is not None:
                    records.append(_record(row))
            except (sqlite3.DatabaseError, ValueError, KeyError):
                missing += 1
        if missing:
            self._unread(error, missing)
        records.sort(key=lambda r: (r.started, r.id or 0), reverse=True)
        return records[:limit] if limit else records

    def _reading(self, read: Callable[[sqlite3.Connection], _T]) -> _T:
        """``read`` over the history opened read-only; no file yet, one being begun (its
        first write makes the file before its tables), or a file that is no database,
        reads as an empty history (in memory: nothing is written, nothing moved; the
        last is said in ``damage``)."""
        if self.path.exists():
            regular_file(self.path)
            try:
                with _open(f"{self.path.resolve().as_uri()}?mode=ro", uri=True) as db:
                    return read(db)
            except sqlite3.OperationalError as error:
                if "no such table" not in str(error):
                    raise
            except sqlite3.DatabaseError as error:
                if not not_a_database(error):
                    raise
                self._unread(error, None)
        with _open(":memory:") as db:
            db.executescript(_SCHEMA)
            return read(db)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (committed, or rolled back on an error) on the file,
        made 0600 first; a damaged file is set aside and a new one begun."""
        if self._in_data_dir:
            data_dir()  # made, and writable: else a FolderError that says so
        if self.path.exists():
            regular_file(self.path)
        self._make_private()
        try:
            with _open(str(self.path), wait_s=self.wait_s) as db:
                db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as error:
            if not not_a_database(error):
                raise
            self._set_aside(error)
            self._make_private()
        with _open(str(self.path), wait_s=self.wait_s) as db:
            db.executescript(_SCHEMA)
            with db:
                yield db

    def _make_private(self) -> None:
        """The file exists, readable by its owner only (an older one is tightened)."""
        try:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            if self.path.stat().st_mode & 0o077:
                with contextlib.suppress(OSError):  # another user's file: theirs to keep
                    self.path.chmod(0o600)

    def _set_aside(self, error: sqlite3.DatabaseError) -> None:
        stamp = int(time.time())
        damaged = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
        while damaged.exists():
            stamp += 1
            damaged = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
        try:
            self.path.replace(damaged)
        except OSError as exc:
            raise FolderError(
                f"The run history {self.path} cannot be read ({error}), and it cannot be "
                f"set aside ({exc.strerror or type(exc).__name__}): move it away, or make "
                "its folder writable."
            ) from None
        self.notice = (
            f"The run history {self.path} could not be read ({error}): it was set aside as "
            f"{damaged.name}; a new history begins."
        )

    @staticmethod
    def _series(db: sqlite3.Connection, run: int) -> dict[str, list[tuple[float, float]]]:
        series: dict[str, list[tuple[float, float]]] = {}
        rows = db.execute("SELECT name, t, value FROM series WHERE run = ? ORDER BY rowid", (run,))
        for name, t, value in rows:
            series.setdefault(name, []).append((t, value))
        return series


def local_versions() -> dict[str, Any]:
    """MacMesh's, MLX's and mlx-lm's versions on this machine."""
    import core
    from core.worker.version import package_version

    return {
        "macmesh": core.__version__,
        "mlx": package_version("mlx", "mlx.core"),
        "mlx_lm": package_version("mlx-lm", "mlx_lm"),
    }


def telemetry_series(
    telemetry: Telemetry, origin: float, since: float | None = None
) -> dict[str, list[tuple[float, float]]]:
    """A run's plotted series, as kept: tokens/s (smoothed) and bytes/s per link, in
    seconds from ``origin``, only from ``since`` on when given (monotonic, both)."""
    series = {"tokens_per_s": series_points(*telemetry.tokens_per_s().smoothed, origin, since)}
    for link, (times, values) in telemetry.link_series().items():
        series[f"link {link} bytes_per_s"] = series_points(times, values, origin, since)
    return series


def keep(record: RunRecord, path: Path | None = None, wait_s: float = KEEP_WAIT_S) -> str | None:
    """Add ``record`` to the history, waiting at most ``wait_s`` for another writer;
    where it cannot be written now, to its journal (added by the next write or read
    that can). None, or what became of it (one line: a run's figures are never lost to
    a history that cannot be written)."""
    try:
        history = History(path, wait_s)
    except (FolderError, OSError) as error:  # no data folder: no journal either
        return f"the run was not kept in the history: {error}"
    try:
        history.add(record)
    except (FolderError, FileProblem, OSError, sqlite3.Error) as error:
        return journal_instead(record, history.path, error)
    return None


def history_mode(path: Path) -> int:
    """The permission bits an export of the history at ``path`` is made with: the
    history's own (0600), or 0600 where it cannot be read."""
    try:
        return stat.S_IMODE(path.stat().st_mode) or 0o600
    except OSError:
        return 0o600


def journal_instead(record: RunRecord, store: Path, why: BaseException | str) -> str:
    """``record`` added to the journal of ``store`` (the history could not take it:
    ``why``); what became of it, in one line."""
    try:
        waiting = journal.append(store, record.to_dict())
    except OSError as error:
        return (
            f"the run was not kept in the history: {why}; nor in {journal.journal_path(store)}"
            f" ({error.strerror or error})"
        )
    return (
        f"the run history {store} could not be written ({why}): the run waits in "
        f"{waiting} and is added when the history can be written"
    )


def series_points(
    times: Iterable[float], values: Iterable[float], origin: float, since: float | None = None
) -> list[tuple[float, float]]:
    """A telemetry series as (seconds from ``origin``, value) pairs, from ``since`` on."""
    start = -math.inf if since is None else since
    return [(float(t) - origin, float(v)) for t, v in zip(times, values, strict=True) if t >= start]


def _record(row: sqlite3.Row) -> RunRecord:
    return RunRecord(
        id=row["id"],
        started=row["started"],
        kind=RunKind(row["kind"]),
        model=row["model"],
        nodes=_json(row["nodes"]),
        strategy=row["strategy"],
        split=None if row["split"] is None else _json(row["split"]),
        backend=row["backend"],
        versions=_json(row["versions"]),
        figures=_json(row["figures"]),
    )


def _json(text: str) -> Any:
    """A column's JSON; ValueError (a damaged run, read around) for text that is not JSON
    or is nested deeper than json goes (its RecursionError)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("a column is nested too deeply") from None


def _flat(figures: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in figures.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _flat(value, f"{name}.")
        elif isinstance(value, int | float | str | bool) or value is None:
            yield name, value


def _iso(started: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started))
