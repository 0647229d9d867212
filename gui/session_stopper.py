"""Stop for work that runs whole sessions off the GUI thread (Compare, Compare with
base): the session it is on now, and a Stop that cancels it from any thread."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from gui.bridge import Bridge

if TYPE_CHECKING:
    from core.run.session import Session


class SessionStopper:
    """Holds the running work's session; ``stop`` cancels it (its step ends at its next
    boundary) and stops its ranks on a background thread."""

    def __init__(self, bridge: Bridge, stopped: type[Exception]) -> None:
        self._bridge = bridge
        self._stopped = stopped  # what ``hold`` raises once Stop was pressed
        self.cancel = threading.Event()
        self._session: Session | None = None
        self._lock = threading.Lock()

    def reset(self) -> None:
        """A new piece of work: not stopped, no session (a fresh event: work still
        ending may hold the old one)."""
        self.cancel = threading.Event()
        self.release()

    @property
    def stopped(self) -> bool:
        return self.cancel.is_set()

    def hold(self, session: Session) -> None:
        """On the work's thread: ``session`` runs next (the ``stopped`` error when Stop
        came first)."""
        if self.cancel.is_set():
            raise self._stopped
        with self._lock:
            self._session = session

    def release(self) -> None:
        with self._lock:
            self._session = None

    def stop(self) -> None:
        self.cancel.set()
        with self._lock:
            session = self._session
        if session is not None:
            session.cancel()
            self._bridge.run_in_background(session.stop)
