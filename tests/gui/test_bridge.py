"""gui.bridge: results and callbacks reach the GUI thread, in order, and never after close."""

from __future__ import annotations

import threading
import time

import pytest
from psygnal import Signal
from PySide6.QtCore import QThread
from pytestqt.qtbot import QtBot

from core.run.measure.telemetry import Telemetry
from gui.bridge import Bridge, JobRelay


def _on_gui_thread() -> bool:
    return QThread.currentThread() is QThread.currentThread().thread() and (
        threading.current_thread() is threading.main_thread()
    )


@pytest.fixture
def bridge() -> Bridge:
    bridge = Bridge()
    yield bridge
    bridge.close()
    bridge.deleteLater()


def test_result_arrives_on_the_gui_thread(qtbot: QtBot, bridge: Bridge) -> None:
    seen: dict = {}

    def work() -> int:
        seen["worker"] = threading.current_thread() is threading.main_thread()
        return 42

    bridge.run_in_background(work, lambda result: seen.update(result=result, main=_on_gui_thread()))
    qtbot.waitUntil(lambda: "result" in seen, timeout=5000)
    assert seen == {"worker": False, "result": 42, "main": True}


def test_an_error_reaches_on_error(qtbot: QtBot, bridge: Bridge) -> None:
    errors: list[BaseException] = []

    def fail() -> None:
        raise ValueError("no such model")

    bridge.run_in_background(fail, None, errors.append)
    qtbot.waitUntil(lambda: bool(errors), timeout=5000)
    assert isinstance(errors[0], ValueError)


def test_an_unhandled_error_is_reported(qtbot: QtBot, bridge: Bridge) -> None:
    def fail() -> None:
        raise OSError("disk gone")

    with qtbot.waitSignal(bridge.failed, timeout=5000) as blocker:
        bridge.run_in_background(fail)
    assert "disk gone" in blocker.args[0]


def test_a_serial_queue_keeps_order(qtbot: QtBot, bridge: Bridge) -> None:
    queue = bridge.serial_queue()
    order: list[int] = []
    active = []

    def task(n: int) -> int:
        active.append(n)
        assert len(active) == 1, "two tasks of one serial queue ran at once"
        time.sleep(0.01)
        active.remove(n)
        return n

    for n in range(6):
        bridge.run_in_background(lambda n=n: task(n), order.append, queue=queue)
    qtbot.waitUntil(lambda: len(order) == 6, timeout=5000)
    assert order == list(range(6))


def test_run_on_main_from_a_thread(qtbot: QtBot, bridge: Bridge) -> None:
    calls: list[bool] = []
    thread = threading.Thread(
        target=lambda: bridge.run_on_main(lambda: calls.append(_on_gui_thread()))
    )
    thread.start()
    thread.join()
    qtbot.waitUntil(lambda: bool(calls), timeout=5000)
    assert calls == [True]


def test_nothing_arrives_after_close(qtbot: QtBot) -> None:
    bridge = Bridge()
    calls: list[int] = []
    bridge.run_in_background(lambda: 1, calls.append)
    bridge.close()
    qtbot.wait(50)
    assert calls == []
    with pytest.raises(RuntimeError):
        bridge.run_in_background(lambda: 1)
    bridge.deleteLater()


class _Job:
    event = Signal(dict)
    state_changed = Signal(str, str)


def test_job_relay_feeds_telemetry_and_filters(qtbot: QtBot) -> None:
    job, telemetry = _Job(), Telemetry(clock=None)
    relay = JobRelay(job, telemetry)
    received: list[dict] = []
    relay.event.connect(received.append)
    events = [
        {"event": "heartbeat", "rank": 0, "t": 1.0},
        {"event": "token", "rank": 0, "t": 1.1, "request": "r1", "index": 0, "text": "Hi"},
        {
            "event": "traffic",
            "rank": 0,
            "t": 1.2,
            "interval_s": 0.5,
            "sent": {"1": 100},
            "received": {},
        },
    ]
    thread = threading.Thread(target=lambda: [job.event.emit(e) for e in events])
    thread.start()
    thread.join()
    qtbot.waitUntil(lambda: bool(received), timeout=5000)
    qtbot.wait(20)
    assert [e["event"] for e in received] == ["token"]  # heartbeats and traffic stay out
    assert relay.version == 3
    assert telemetry.current().total_tokens == 1
    assert telemetry.link_series()  # traffic reached telemetry
    with qtbot.waitSignal(relay.state_changed, timeout=5000) as blocker:
        threading.Thread(target=lambda: job.state_changed.emit("ready", "ready")).start()
    assert blocker.args == ["ready", "ready"]
    relay.detach()
    job.event.emit(events[1])
    assert relay.version == 3
    relay.deleteLater()
