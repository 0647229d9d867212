"""GUI test fixtures: a configured app, isolated QSettings, and a leak check on every test.

The leak check fails a test that leaves behind, once its widgets are closed:
- a QTimer started by MacMesh code that is still running;
- a QThread started by MacMesh code, or a bridge pool with work still running;
- a job thread (a rank reader or a job monitor) still alive: a job was not stopped;
- a top-level widget of MacMesh's, a dialog or a main window still alive, or any visible one.
Objects that Qt, pyqtgraph or pytest-qt create for themselves are not MacMesh's leaks and
are left alone (timers and threads count only when started from gui/ code).
A test's threads and deletions get up to LEAK_WAIT_S to finish on their own first.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent, QSettings, QThread, QThreadPool, QTimer
from PySide6.QtWidgets import QApplication, QDialog, QMainWindow, QWidget

ROOT = Path(__file__).resolve().parents[2]
PROJECT_CODE = (str(ROOT / "gui"),)
JOB_THREADS = ("rank", "macmesh-job-monitor", "fake-job")
# How long a test's threads, timers and widgets get to finish before they count as leaks
# (tests/gui/test_leak_check.py shortens it: its leaks are on purpose).
LEAK_WAIT_S = float(os.environ.get("MACMESH_LEAK_WAIT_S", "30"))


@pytest.fixture(scope="session", autouse=True)
def _configured_app(qapp: QApplication) -> QApplication:
    from gui.app import configure

    configure(qapp, "light")
    return qapp


@pytest.fixture(autouse=True)
def _isolated_qsettings(tmp_path: Path) -> None:
    """Window geometry of one test never reaches the user's or another test's."""
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(
        QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(tmp_path / "qsettings")
    )


def _from_project() -> bool:
    frame = sys._getframe(2)
    return frame is not None and frame.f_code.co_filename.startswith(PROJECT_CODE)


@pytest.fixture(autouse=True)
def _no_qt_leaks(qapp: QApplication, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    timers: list[QTimer] = []
    qthreads: list[QThread] = []
    bridges: list = []
    timer_start, thread_start = QTimer.start, QThread.start

    def start_timer(self: QTimer, *args: object) -> None:
        if _from_project():
            timers.append(self)
        timer_start(self, *args)

    def start_thread(self: QThread, *args: object) -> None:
        if _from_project():
            qthreads.append(self)
        thread_start(self, *args)

    monkeypatch.setattr(QTimer, "start", start_timer)
    monkeypatch.setattr(QThread, "start", start_thread)
    from gui import bridge as bridge_module

    bridge_init = bridge_module.Bridge.__init__

    def record_bridge(self: object, *args: object, **kwargs: object) -> None:
        bridge_init(self, *args, **kwargs)
        bridges.append(self)

    monkeypatch.setattr(bridge_module.Bridge, "__init__", record_bridge)
    before = set(map(id, QApplication.topLevelWidgets()))
    yield

    def leaks() -> list[str]:
        problems = []
        running = [t for t in timers if shiboken6.isValid(t) and t.isActive()]
        if running:
            problems.append(f"QTimers still running: {[_describe(t) for t in running]}")
        alive = [t for t in qthreads if shiboken6.isValid(t) and t.isRunning()]
        if alive:
            problems.append(f"QThreads still running: {alive}")
        busy = [b for b in bridges if shiboken6.isValid(b) and b.busy()]
        if busy or _any_pool_busy():
            problems.append("background tasks still running in a bridge's or the global pool")
        jobs = _job_threads()
        if jobs:
            problems.append(f"job threads still alive (a job was not stopped): {jobs}")
        widgets = _new_widgets(before)
        if widgets:
            problems.append(f"top-level widgets still alive after close: {widgets}")
        return problems  # no widget references: they would keep the widgets alive

    # Threads end, queued calls arrive and deletions happen in their own time: wait for
    # them (a clean test passes at the first look), and call it a leak only after a
    # deadline no busy machine reaches.
    deadline = time.monotonic() + LEAK_WAIT_S
    _drain(qapp)
    problems = leaks()
    while problems and time.monotonic() < deadline:
        time.sleep(0.05)
        _drain(qapp)
        problems = leaks()
    widgets = _new_widgets(before)
    for widget in widgets:  # do not let one test's leak fail the next one too
        widget.close()
        widget.deleteLater()
    if widgets:
        del widgets
        _drain(qapp)
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)


def _new_widgets(before: set[int]) -> list[QWidget]:
    """Top-level widgets made since ``before`` that count as leaks."""
    return [w for w in QApplication.topLevelWidgets() if id(w) not in before and _is_leak(w)]


def _drain(qapp: QApplication) -> None:
    """Deliver what is queued, delete what was scheduled for deletion, collect garbage."""
    for _ in range(2):
        qapp.processEvents()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()  # Python wrappers of deleted widgets; one pass (a full one is ~0.1 s)
    qapp.processEvents()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def _any_pool_busy() -> bool:
    return bool(QThreadPool.globalInstance().activeThreadCount())


def _job_threads() -> list[str]:
    return [
        t.name for t in threading.enumerate() if t.is_alive() and t.name.startswith(JOB_THREADS)
    ]


def _is_leak(widget: QWidget) -> bool:
    if not shiboken6.isValid(widget):
        return False
    ours = type(widget).__module__.startswith("gui.")
    return ours or widget.isVisible() or isinstance(widget, QDialog | QMainWindow)


def _describe(timer: QTimer) -> str:
    parent = timer.parent()
    return f"QTimer({timer.interval()} ms) of {type(parent).__name__ if parent else None}"
