"""Every answer asked through the API kept in the run history (``RunKind.API``), the way
the chat task keeps one (``core.run.tasks.chat.keep_answer``), whoever serves: ``macmesh
serve`` and the window's API keep the same records by construction.

The session's events arrive on the job's reader threads; the history is written on a
thread of its own, so reading the ranks never waits on the disk.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from core.run.measure.history import RunKind, RunRecord
from core.run.measure.telemetry import Telemetry, answer_figures
from core.run.session import Session
from core.run.tasks.chat import keep_answer
from core.worker import protocol as p

log = logging.getLogger(__name__)


class ApiRecords:
    """Follows ``session`` while the API serves it: ``sent`` for each request the API
    sends, then its ``done`` kept with who asked (``client``), its figures handed to
    ``on_answered`` (the metrics) as soon as it arrives (on the reader thread)."""

    def __init__(
        self,
        session: Session,
        on_answered: Callable[[Mapping[str, Any]], None] | None = None,
        telemetry: Telemetry | None = None,
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
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="api-history")
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

    def close(self) -> None:
        """Stop following the session; what is being written is written."""
        if self._own:
            self.session.event.disconnect(self.telemetry.feed)
        self.session.event.disconnect(self._on_event)
        self._writer.shutdown(wait=True)

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
        self._writer.submit(self._keep, event, *sent, time.monotonic())

    def _keep(self, done: p.Done, client: str, started: float, done_at: float) -> None:
        """Keep an answer with its series from its request's start (in seconds from the
        server's): each record holds its own answer's, not everything since the server
        began (which grew every record, and the controller's memory, as it served)."""
        about = {"client": client}
        record, problem = keep_answer(
            self.session, done, self.telemetry, self.began, RunKind.API, about, done_at, started
        )
        with self._lock:
            self.kept = [*self.kept[-63:], record]
            self.problem = problem
        if problem:
            log.warning("%s", problem)
