"""The one crossing from other threads to the GUI thread (docs/design.md, rule 2).

Core objects call back on their own threads (the launcher's reader threads, zeroconf's,
a pool's). Widgets must only be touched on the GUI thread. Everything that crosses goes
through here, as queued Qt signals:

- ``Bridge.run_in_background(fn, on_done, on_error)`` runs blocking work on a thread pool
  and delivers the result (or the exception) on the GUI thread, like Anki's taskman.
- ``Bridge.serial_queue()`` is a one-thread pool: work for one job or host runs in order,
  never two at once (docs/design.md, rule 3), so a Stop queued after a Start always sees it.
- ``JobRelay`` turns a ``core.run.job.launcher.Job``'s psygnal signals into Qt signals. It feeds
  ``Telemetry`` directly on the reader thread (Telemetry is thread-safe) and forwards only
  the events the GUI shows, so the GUI thread never sees heartbeats and traffic.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from psygnal import SignalInstance as PsygnalSignal
from PySide6.QtCore import QObject, QRunnable, Qt, QThreadPool, Signal, SignalInstance

from core.worker import protocol as p

log = logging.getLogger(__name__)

Closure = Callable[[], None]
R = TypeVar("R")
# The events a window shows; the rest (heartbeats, traffic) only feed Telemetry.
GUI_EVENTS = frozenset(
    {p.HELLO, p.LOADING, p.LOADED, p.READY, p.TOKEN, p.DONE, p.ERROR, p.LINK_PROGRESS}
)


class Bridge(QObject):
    """Runs work off the GUI thread and brings results and callbacks back onto it."""

    _invoke = Signal(object)
    failed = Signal(str)  # a background task failed and nobody handled it

    def __init__(self, parent: QObject | None = None, max_threads: int = 4) -> None:
        super().__init__(parent)
        self._invoke.connect(self._run_closure, Qt.ConnectionType.QueuedConnection)
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(max_threads)
        self._queues: list[QThreadPool] = [self._pool]
        self._closed = False
        # Held while a thread posts a call and while closing: once close() returns, no
        # thread is in the middle of posting to a bridge about to be deleted.
        self._posting = threading.Lock()

    # -- crossing onto the GUI thread ------------------------------------------

    def run_on_main(self, closure: Closure) -> None:
        """Call ``closure`` on the GUI thread soon. Safe from any thread; a no-op once
        the bridge is closed (the window is gone, there is nothing left to update)."""
        with self._posting:
            if self._closed:
                return
            with contextlib.suppress(RuntimeError):  # the C++ object is gone: shutting down
                self._invoke.emit(closure)

    def _run_closure(self, closure: Closure) -> None:
        if self._closed:
            return
        try:
            closure()
        except Exception as error:
            log.exception("a GUI callback failed")
            self.failed.emit(f"{type(error).__name__}: {error}")

    # -- running off the GUI thread -----------------------------------------------

    def run_in_background(
        self,
        task: Callable[[], R],
        on_done: Callable[[R], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        *,
        queue: QThreadPool | None = None,
    ) -> None:
        """Run ``task`` on a pool thread, then ``on_done(result)`` or ``on_error(exc)`` on
        the GUI thread. Without ``on_error`` a failure is logged and ``failed`` emitted."""
        if self._closed:
            raise RuntimeError("the bridge is closed")

        def report(error: BaseException) -> None:
            if on_error is not None:
                on_error(error)
            else:
                self.failed.emit(f"{type(error).__name__}: {error}")

        def work() -> None:
            try:
                result = task()
            except Exception as error:
                log.debug("background task failed", exc_info=True)
                self.run_on_main(functools.partial(report, error))
                return
            if on_done is not None:
                self.run_on_main(lambda: on_done(result))

        (queue or self._pool).start(_Runnable(work))

    def serial_queue(self) -> QThreadPool:
        """A pool that runs one task at a time, in the order they were queued."""
        queue = QThreadPool(self)
        queue.setMaxThreadCount(1)
        self._queues.append(queue)
        return queue

    def busy(self) -> bool:
        return any(queue.activeThreadCount() for queue in self._queues)

    def wait(self, timeout_s: float = 10.0) -> bool:
        """Block until every queued task has run; True if they all finished in time."""
        deadline = time.monotonic() + timeout_s
        for queue in self._queues:
            remaining = max(0, int((deadline - time.monotonic()) * 1000))
            if not queue.waitForDone(remaining):
                return False
        return True

    def close(self, timeout_s: float = 10.0) -> None:
        """Finish queued work, then drop anything that would still reach the GUI."""
        self.wait(timeout_s)
        with self._posting:
            self._closed = True
        for queue in self._queues:
            queue.clear()
            queue.waitForDone(int(timeout_s * 1000))


class _Runnable(QRunnable):
    def __init__(self, work: Closure) -> None:
        super().__init__()
        self._work = work
        self.setAutoDelete(True)

    def run(self) -> None:
        self._work()


class JobLike(Protocol):
    """What ``JobRelay`` needs of a job: ``core.run.job.launcher.Job`` and test doubles."""

    event: PsygnalSignal  # (dict): a protocol.Event
    state_changed: PsygnalSignal  # (str, str)


class TelemetryLike(Protocol):
    def feed(self, event: p.Event, received_at: float | None = None) -> None: ...


class JobRelay(QObject):
    """A job's events and state changes as Qt signals on the GUI thread.

    ``version`` counts the events fed to telemetry, so a redraw timer can skip a tick when
    nothing arrived (reading an int is atomic; an occasional missed increment only delays
    a redraw by one tick).
    """

    # A protocol.Event of GUI_EVENTS, named like the job's own signal. It hides QObject.event(),
    # which PySide never mistakes for an override (a Signal is not a function): Qt's events
    # still reach the C++ handler.
    event = Signal(object)  # type: ignore[assignment]  # hides QObject.event on purpose
    state_changed = Signal(str, str)  # JobState value, message

    def __init__(
        self, job: JobLike, telemetry: TelemetryLike, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.version = 0
        self._job = job
        self._telemetry = telemetry
        self._attached = threading.Event()
        self._attached.set()
        job.event.connect(self._on_event)
        job.state_changed.connect(self._on_state)

    def _on_event(self, event: p.Event) -> None:
        """On a reader thread: feed telemetry, pass on what the window shows."""
        if not self._attached.is_set():
            return
        self._telemetry.feed(event)
        self.version += 1
        if event["event"] in GUI_EVENTS:
            self._emit(self.event, event)

    def _on_state(self, state: str, message: str) -> None:
        if self._attached.is_set():
            self._emit(self.state_changed, state, message)

    def _emit(self, signal: SignalInstance, *args: object) -> None:
        try:
            signal.emit(*args)
        except RuntimeError:  # the relay was deleted while a reader thread was emitting
            self._attached.clear()

    def detach(self) -> None:
        """Stop relaying (the job may live on a little while its ranks end)."""
        self._attached.clear()
        for signal, slot in (
            (self._job.event, self._on_event),
            (self._job.state_changed, self._on_state),
        ):
            with contextlib.suppress(ValueError, RuntimeError):
                signal.disconnect(slot)
