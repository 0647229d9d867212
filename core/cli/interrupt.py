"""Ctrl-C in ``macmesh run`` and ``macmesh demo --headless``: one line, exit 130.

Whatever the stage, a Ctrl-C becomes a ``KeyboardInterrupt`` on the main thread. The
session's steps cancel themselves on it (a copy stops between chunks, what arrived is
kept); the front end then stops the session (every rank ends) and says, in one line,
what it was doing and what stopped. From the first Ctrl-C on, more are ignored, so
that clean-up (a copy's threads joining, ranks being ended, a conversion's unfinished
folder removed) is never cut short and never prints a traceback.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, TextIO

from core.run.states import Step

if TYPE_CHECKING:
    from core.run.session import Session

INTERRUPTED = 130  # the shell's code for a command ended by SIGINT (128 + 2)


class Stage:
    """What a front end is doing now (for the interrupted line), and its session."""

    def __init__(self, doing: str) -> None:
        self.doing = doing
        self.session: Session | None = None
        self.streamed = False  # answer text went to stdout: start the line afresh

    def __call__(self, doing: str) -> None:
        self.doing = doing


@contextlib.contextmanager
def first_interrupt_only() -> Iterator[None]:
    """Within: the first SIGINT raises ``KeyboardInterrupt``, later ones are ignored
    (clean-up runs to its end). Only on the main thread, where signals arrive."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def interrupted(stage: Stage, err: TextIO) -> int:
    """Stop what ``stage`` started (its copies, its ranks), say so in one line; 130."""
    session = stage.session
    what = "stopped, nothing was started"
    if session is not None:
        if session.job is not None:
            what = "every rank stopped"
        elif session.step is Step.COPY:
            what = "every copy stopped (what arrived is kept; the next run resumes it)"
        session.stop()
    newline = "\n" if stage.streamed else ""
    err.write(f"{newline}macmesh: interrupted while {stage.doing}; {what}\n")
    err.flush()
    return INTERRUPTED
