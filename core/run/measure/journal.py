"""Runs the history could not take yet (locked, full, read-only, damaged): one JSON line
each in an append-only file next to it, ``history.sqlite3.pending.jsonl`` (0600, as the
history), added to the history by its next write (``History.add``) or read
(``History.runs``), then emptied.

Every access holds an exclusive ``flock`` on the journal for a moment: an append never
lands between a merge's read and its emptying. A record already in the history (a merge
that committed but was stopped before it emptied the journal) is not added twice: the
merge skips one whose start, kind, model and nodes are there.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SUFFIX = ".pending.jsonl"
LINE_MAX = 64 << 20  # a record (its series) larger than this is not one of ours


def journal_path(store: Path) -> Path:
    return store.with_name(store.name + SUFFIX)


def _open(path: Path, flags: int) -> int:
    """The journal opened without following a link, and only if it is a regular file."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def append(store: Path, record: dict[str, Any]) -> Path:
    """Add ``record`` (``RunRecord.to_dict()``) to the journal of ``store``; its path.
    OSError where it cannot be written either."""
    path = journal_path(store)
    line = (json.dumps(record, default=str, ensure_ascii=False) + "\n").encode()
    fd = _open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def pending(store: Path) -> bool:
    """Whether the journal of ``store`` holds anything."""
    try:
        return journal_path(store).lstat().st_size > 0
    except OSError:
        return False


@contextlib.contextmanager
def taken(store: Path) -> Iterator[list[dict[str, Any]]]:
    """The journal's records, under its lock; emptied when the block ends without an
    error (the caller has committed them), kept as it was otherwise. Lines that are not
    a record (a write cut short by a crash) are dropped with it."""
    fd = _open(journal_path(store), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(os.dup(fd), "rb") as file:
            records = [r for r in (_parse(line) for line in file) if r is not None]
        yield records
        os.ftruncate(fd, 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def _parse(line: bytes) -> dict[str, Any] | None:
    if len(line) > LINE_MAX:
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None
