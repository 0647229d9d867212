"""One background task as the window runs it, generic in its result (Anki's
``aqt.operations.QueryOp``): ``TaskRunner[T].run(work, words)`` runs ``work(watch)`` on a
serial queue of the bridge and says, on the GUI thread, ``finished(T)`` or ``failed``
(one line), with ``busy_changed`` around it and ``stop`` between.

``work`` gets the window's ``core.run.tasks.watch.Watch``: each session the task begins
is held (Stop cancels it and ends its ranks) and its news crosses to the GUI thread:
its state (``session_state``), its checks with their fixes (``checked``) and each copy's
progress (``copy_progress``). When the task fails because a check failed,
``checks_failed(report)`` comes first, so every view shows the checks view with the
fixes, as Start does. A stale guard drops the news and the end of a task the runner
no longer runs (Stop, then a new task); once a task has ended, its sessions (a job Start
left running) are let go. ``stop_behind`` queues the stop of what a task left running.

Compare (``gui.run.compare_view``), the adapter actions (``gui.tune.actions``), the
fine-tune's start (``gui.tune.controller``) and Start in the Run pane
(``gui.run.controller``) sit on it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from PySide6.QtCore import QObject, QThreadPool, Signal

from gui.bridge import Bridge
from gui.session_stopper import SessionStopper

if TYPE_CHECKING:
    from core.remote.modelcopy import CopyProgress
    from core.run.checks.report import PreflightReport
    from core.run.session import Session
    from core.run.tasks.watch import Phase, Watch

log = logging.getLogger(__name__)

T = TypeVar("T")


class TaskStopped(Exception):
    """Stop was pressed: the task ended where it was."""


def one_line(error: BaseException) -> str:
    """An error as one line for people: its own message (the core's errors are written
    for people), the type's name only when the message is empty."""
    text = str(error).strip()
    if not text:
        return type(error).__name__
    return text.splitlines()[0]


class TaskRunner(QObject, Generic[T]):
    """One task at a time, off the GUI thread; its result and its sessions' news on it."""

    progress = Signal(str)  # what the task is doing, for people
    finished = Signal(object)  # T: the task's result
    failed = Signal(str)  # why it did not finish, in one line ("Stopped." after a Stop)
    busy_changed = Signal(bool)
    session_state = Signal(str, str)  # a watched session's RunState value, its detail
    checked = Signal(object)  # a watched session's PreflightReport
    copy_progress = Signal(object)  # a watched session's CopyProgress
    checks_failed = Signal(object)  # the PreflightReport whose failed check ended the task

    def __init__(
        self,
        bridge: Bridge,
        stopped_words: str = "Stopped.",
        failed_words: str = "{error}",
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._bridge = bridge
        self._queue = bridge.serial_queue()
        self._stopped_words = stopped_words
        self._failed_words = failed_words  # "{error}" is the error's one line
        self._stopper = SessionStopper(bridge, TaskStopped)
        self._run: object | None = None  # the task running now (the stale guard)
        self._session: Session | None = None  # the last session watched
        self._unfollow: list[Callable[[], None]] = []  # the connections to its sessions
        self.busy = False

    @property
    def cancel(self) -> threading.Event:
        """The running task's cancel event (``threading.Event``): for work without a
        session (a fuse's subprocess)."""
        return self._stopper.cancel

    @property
    def queue(self) -> QThreadPool:
        """The serial queue the tasks run on: work queued after a task runs after it."""
        return self._queue

    @property
    def stopped(self) -> bool:
        return self._stopper.stopped

    def run(
        self,
        work: Callable[[Watch], T],
        words: str,
        phase_words: Callable[[Session, Phase], str] | None = None,
    ) -> bool:
        """Run ``work(watch)`` off the GUI thread (``words``: what it says at once;
        ``phase_words``: what it says as each session begins). False when busy."""
        if self.busy:
            return False
        run = object()
        self._run, self._session = run, None
        self._stopper.reset()
        self._set_busy(True)
        self.progress.emit(words)

        def watch(session: Session, phase: Phase) -> None:
            self._stopper.hold(session)
            if phase_words is not None:
                said = phase_words(session, phase)
                self._cross(run, lambda: self.progress.emit(said))
            self._follow(run, session)

        def task() -> T:
            result = work(watch)
            if self._stopper.stopped:
                raise TaskStopped
            return result

        self._bridge.run_in_background(
            task,
            lambda result: self._done(run, result),
            lambda error: self._failed(run, error),
            queue=self._queue,
        )
        return True

    def stop(self, words: str = "Stopping…") -> None:
        """Cancel: the session running stops (off the GUI thread), the rest is skipped."""
        if not self.busy:
            return
        self.progress.emit(words)
        self._stopper.stop()

    def stop_behind(self, stop: Callable[[], object], failed: Callable[[str], None]) -> None:
        """Stop what a finished task left running (a job's ranks): ``stop`` runs on the
        serial queue, behind a task still ending, off the GUI thread; ``failed(line)`` on
        the GUI thread when it raises."""
        self._bridge.run_in_background(
            stop, None, lambda error: failed(one_line(error)), queue=self._queue
        )

    def forget(self) -> None:
        """No longer wait for the running task (its session was stopped another way):
        its news and its end are dropped by the stale guard and the runner is free; work
        run next still queues behind it."""
        if not self.busy:
            return
        self._let_go()
        self._session = None
        self._set_busy(False)

    def wait(self, timeout_s: float = 30.0) -> None:
        """Block until the queued work has ended (closing the window)."""
        self._queue.waitForDone(int(timeout_s * 1000))

    # -- the task's news, on the GUI thread --------------------------------------------------

    def _follow(self, run: object, session: Session) -> None:
        """On the task's thread, once per session: its news crosses to the GUI thread."""
        if session is self._session:
            return
        self._session = session

        def state(value: str, detail: str) -> None:
            self._cross(run, lambda: self.session_state.emit(value, detail))

        def checked(report: PreflightReport) -> None:
            self._cross(run, lambda: self._checked(report))

        def copied(progress: CopyProgress) -> None:
            self._cross(run, lambda: self._copied(progress))

        session.state_changed.connect(state)
        session.checked.connect(checked)
        session.copy_progress.connect(copied)
        self._unfollow += [
            lambda: session.state_changed.disconnect(state),
            lambda: session.checked.disconnect(checked),
            lambda: session.copy_progress.disconnect(copied),
        ]

    def _let_go(self) -> None:
        """The task ended (or was forgotten): its sessions, which may live on (a job
        Start left running), no longer reach this runner, and what they said before
        and has not arrived yet is dropped by the stale guard."""
        self._run = None
        unfollow, self._unfollow = self._unfollow, []
        for disconnect in unfollow:
            disconnect()

    def _checked(self, report: PreflightReport) -> None:
        self.checked.emit(report)

    def _copied(self, progress: CopyProgress) -> None:
        self.copy_progress.emit(progress)

    def _cross(self, run: object, closure: Callable[[], None]) -> None:
        self._bridge.run_on_main(lambda: closure() if run is self._run else None)

    def _done(self, run: object, result: T) -> None:
        if run is not self._run:
            return
        self._let_go()
        self._set_busy(False)
        self.finished.emit(result)

    def _failed(self, run: object, error: BaseException) -> None:
        if run is not self._run:
            return
        self._let_go()
        self._set_busy(False)
        if isinstance(error, TaskStopped) or self._stopper.stopped:
            self.failed.emit(self._stopped_words)
            return
        session = self._session
        report = session.report if session is not None else None
        if report is not None and not report.ok:
            self.checks_failed.emit(report)
        log.info("a task failed: %s", one_line(error))
        self.failed.emit(self._failed_words.format(error=one_line(error)))

    def _set_busy(self, busy: bool) -> None:
        self.busy = busy
        if not busy:
            self._stopper.release()
        self.busy_changed.emit(busy)
