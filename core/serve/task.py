"""The serve task: a session's job served as the HTTP API until it ends.

``macmesh serve`` runs it on its main thread; the window's API (``core.serve.service``)
follows a job the Run pane started instead. The steps before the launch are the
session's (``Session.start``); this task adds the server around the running job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.run.errors import ClusterError
from core.run.session import Session
from core.run.states import RunState
from core.run.tasks.watch import Phase, Watch, watched
from core.serve.server import APIServer

POLL_S = 0.5  # the main thread wakes this often (a Ctrl-C or SIGTERM is taken at once)


@dataclass(frozen=True)
class ServeEnd:
    """How serving ended: the job failed (``message``, the ranks' logs in ``logs``) or
    was stopped."""

    failed: bool
    message: str
    logs: Path | None
    answered: int


def serve(
    session: Session,
    server: APIServer,
    serving: Callable[[], None] | None = None,
    watch: Watch | None = None,
) -> ServeEnd:
    """Launch ``session`` (its steps not run yet first), wait for every rank to load,
    serve until the job ends; ``serving()`` once the server accepts connections. The
    server and every rank are stopped when it returns or raises (ClusterError when the
    Start was cancelled, JobError when the job failed to load). ``watch`` hears of the
    session first (its steps left, if any, are said there)."""
    watched(watch, session, Phase.RUN)
    ended = threading.Event()

    def on_state(state: str, _detail: str) -> None:
        if RunState(state) in (RunState.FAILED, RunState.STOPPED):
            ended.set()

    session.state_changed.connect(on_state)
    try:
        if not session.start():
            raise ClusterError(session.error or "the Start was cancelled: nothing is served")
        session.wait_ready()
        server.start()
        if serving is not None:
            serving()
        while not ended.wait(POLL_S):
            pass
        job = session.job
        failed = session.state == RunState.FAILED
        return ServeEnd(
            failed=failed,
            message=job.message if job is not None and failed else "",
            logs=job.run_dir if job is not None else None,
            answered=server.answers.served,
        )
    finally:
        server.stop()
        session.stop()
        session.state_changed.disconnect(on_state)
