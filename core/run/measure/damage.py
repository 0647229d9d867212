"""What a read of a damaged run history could not read, and the checks it reads with
(``core.run.measure.history``): a damaged file is read around and kept in place."""

from __future__ import annotations

import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path

from core.jsonfile import FileProblem


@dataclass(frozen=True)
class Damage:
    """What a read could not: ``missing`` runs (None: the file is no database at all)."""

    path: Path
    error: str
    missing: int | None

    def __str__(self) -> str:
        if self.missing is None:
            return (
                f"The run history {self.path} could not be read ({self.error}): none of its "
                "runs could be read; the file is kept as it is."
            )
        runs = "run" if self.missing == 1 else "runs"
        return (
            f"{self.missing} {runs} of the run history {self.path} could not be read "
            f"({self.error}); the file is kept as it is."
        )


def regular_file(path: Path) -> None:
    """FileProblem unless ``path`` is a regular file (SQLite would wait on a FIFO)."""
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise FileProblem(path, "not a regular file, so not a run history")


def not_a_database(error: BaseException) -> bool:
    """No database at all (not one with a damaged part: that is read around)."""
    return getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_NOTADB


SALVAGE_MAX = 1_000_000  # runs looked for one by one in a damaged history


def highest_id(db: sqlite3.Connection) -> int | None:
    """The highest run id the history gave (its AUTOINCREMENT counter, else the largest
    id still readable); None if neither can be read."""
    for query in (
        "SELECT seq FROM sqlite_sequence WHERE name = 'runs'",
        "SELECT max(id) FROM runs",
    ):
        try:
            row = db.execute(query).fetchone()
        except sqlite3.DatabaseError:
            continue
        if row is not None and isinstance(row[0], int):
            return max(0, min(row[0], SALVAGE_MAX))
        if row is not None and row[0] is None:
            return 0
    return None
