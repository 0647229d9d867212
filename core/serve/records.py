"""Every answer asked through the API kept in the run history (``RunKind.API``), the way
the chat task keeps one (``core.run.tasks.chat.keep_answer``), whoever serves: ``macmesh
serve`` and the window's API keep the same records by construction.

The session's events arrive on the job's reader threads; the history is written on a
thread of its own, so reading the ranks never waits on the disk. A history that cannot
take an answer now (locked, full, read-only) passes it to its journal
(``core.run.measure.journal``), and ``close`` never waits on the store for more than
``CLOSE_WITHIN_S``: what is still queued then goes to the journal, so ``serve`` stops in
time whatever the store does and no answer is lost.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

from core.run.measure.history import FILE_NAME, RunKind, RunRecord, journal_instead, keep
from core.run.measure.telemetry import AnswerFigures, Telemetry, answer_figures
from core.run.session import Session
from core.run.tasks.chat import SETTLE_S, answer_record
from core.worker import protocol as p

log = logging.getLogger(__name__)

CLOSE_WITHIN_S = 1.5  # ``close`` waits this long for the writes at most
MADE_KEPT = 64  # records remembered once made (more than the writer is ever behind by)
CLOSING_WAIT_S = 0.1  # a write while closing waits this long for the store's lock
_Item = tuple[p.Done, str, float, float]  # an answer's done, client, sent, done at


class ApiRecords:
    """Follows ``session`` while the API serves it: ``sent`` for each request the API
    sends, then its ``done`` kept with who asked (``client``), its figures handed to
    ``on_answered`` (the metrics) as soon as it arrives (on the reader thread)."""

    def __init__(
        self,
        session: Session,
        on_answered: Callable[[AnswerFigures], None] | None = None,
        telemetry: Telemetry | None = None,
        store: Path | None = None,
    ) -> None:
        """``telemetry``: the one the window already feeds from this session (its figures
        are then the very numbers its card and chat line show); else one of its own."""
        self.session = session
        self._own = telemetry is None
        self.telemetry = Telemetry() if telemetry is None else telemetry
        self._on_answered = on_answered
        if self._own:
            self._loaded(session)
        self.began = time.monotonic()
        self.kept: list[RunRecord] = []  # this server's, newest last (bounded)
        self.problem: str | None = None  # why the last one could not be kept
        self._sent: dict[str, tuple[str, float]] = {}  # request → client, sent (monotonic)
        self._lock = threading.Lock()
        self._store = store  # the history file (default: the data folder's)
        self._queue: queue.Queue[_Item | None] = queue.Queue()
        self._closing = threading.Event()  # no more settling; a short wait for the store
        self._writing: _Item | None = None  # what the writer is keeping now
        # Each answer's record, made once: the writer and ``close`` may both journal the
        # one in flight, and the merge keeps one of two records with the same start.
        self._made: dict[str, RunRecord] = {}
        self._writer = threading.Thread(target=self._write, name="api-history", daemon=True)
        self._writer.start()
        if self._own:
            session.event.connect(self.telemetry.feed)
        session.event.connect(self._on_event)

    def _loaded(self, session: Session) -> None:
        """The ranks loaded before the API began serving: what they said then (their
        memory) is fed first, as if it had just arrived."""
        job = getattr(session, "job", None)  # None too for a server with no cluster yet
        for rank in job.ranks if job is not None else ():
            if rank.loaded_event is not None:
                self.telemetry.feed(rank.loaded_event)

    def sent(self, request: str, started: float, client: str) -> None:
        """Any thread: the API sent ``request`` for ``client`` at ``started``."""
        self.telemetry.request_started(request, started)
        with self._lock:
            self._sent[request] = (client, started)

    def close(self, within: float = CLOSE_WITHIN_S) -> None:
        """Stop following the session; what is queued is kept, in the history where it
        can be written at once, else in its journal, all within ``within`` seconds: a
        write still blocked then (a store that never answers) is journaled as well (a
        merge skips a run the history already has)."""
        if self._own:
            self.session.event.disconnect(self.telemetry.feed)
        self.session.event.disconnect(self._on_event)
        self._closing.set()
        self._queue.put(None)
        self._writer.join(within)
        if not self._writer.is_alive():
            return
        stuck = [self._writing] if self._writing is not None else []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                stuck.append(item)
        for item in stuck:
            record = self._record(item)
            said = journal_instead(record, self._store_path(), "it did not answer in time")
            log.warning("%s", said)

    def _on_event(self, event: p.Event) -> None:
        if event["event"] != p.DONE or event["rank"] != 0:
            return
        with self._lock:
            sent = self._sent.pop(event["request"], None)
        if sent is None:
            return
        if self._on_answered is not None:
            request = event["request"]
            summary = next((r for r in self.telemetry.requests() if r.id == request), None)
            try:
                self._on_answered(answer_figures(event, summary))
            except Exception:  # the reader thread must keep reading
                log.exception("an answer's figures could not be counted")
        self._queue.put((event, *sent, time.monotonic()))

    def _write(self) -> None:
        while (item := self._queue.get()) is not None:
            self._writing = item
            try:
                self._keep(item)
            except Exception:  # the writer must keep writing
                log.exception("an answer could not be kept")
            self._writing = None

    def _store_path(self) -> Path:
        if self._store is not None:
            return self._store
        from core.paths import data_dir

        return data_dir(writable=False) / FILE_NAME

    def _record(self, item: _Item) -> RunRecord:
        """An answer with its figures and series over its own span, send to end, in
        seconds from its send (``answer_record``): each record holds its own answer's, not
        everything since the server began (which grew every record, and the controller's
        memory, as it served), nor the server's other answers' (but for the cluster's, in
        a batch)."""
        done, client, started, done_at = item
        request = done["request"]
        with self._lock:
            made = self._made.get(request)
        if made is not None:
            return made
        summary = next((r for r in self.telemetry.requests() if r.id == request), None)
        figures = {**answer_figures(done, summary).as_dict(), "client": client}
        answer = (summary, done_at) if summary is not None else None  # its own span, series
        record = answer_record(
            self.session, figures, self.telemetry, self.began, RunKind.API, started, answer
        )
        with self._lock:
            self._made = {**dict(list(self._made.items())[-MADE_KEPT:]), request: record}
        return record

    def _keep(self, item: _Item) -> None:
        """Keep an answer once its traffic is in (``chat.settle``; not while closing)."""
        self._closing.wait(max(0.0, item[3] + SETTLE_S - time.monotonic()))
        record = self._record(item)
        wait_s = CLOSING_WAIT_S if self._closing.is_set() else None
        problem = keep(record, self._store) if wait_s is None else keep(record, self._store, wait_s)
        with self._lock:
            self.kept = [*self.kept[-63:], record]
            self.problem = problem
        if problem:
            log.warning("%s", problem)
