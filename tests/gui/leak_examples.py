"""Tests that leak on purpose, run by test_leak_check.py to prove the leak check fails them.

Not collected by a normal run (the name does not start with test_). The timers are made in
gui/ code (the Run pane's redraw timer), since only MacMesh's own count.
"""

from __future__ import annotations

import threading

import pytest
from PySide6.QtWidgets import QDialog, QWidget

from core.run.states import RunState
from gui.bridge import Bridge
from gui.run.chat import ChatView
from gui.run.pane import RunPane

_kept: list = []
_leaked: list[threading.Event] = []  # lets a leaked thread or task end


@pytest.fixture(autouse=True)
def _end_earlier_leaks() -> None:
    """A leaked thread or task runs until the next test starts, so the leak check sees it
    however slow the machine is, and it fails only its own test."""
    for leak in _leaked:
        leak.set()
    for thread in threading.enumerate():
        if thread.name == "rank0-events":
            thread.join(10)
    for bridge in _kept:
        if isinstance(bridge, Bridge):
            bridge.wait()


def test_leaks_a_running_timer(qtbot) -> None:
    pane = RunPane(Bridge())
    pane._show_state(RunState.LOADING, "")  # starts the redraw timer, as a job would
    _kept.append(pane)


def test_leaks_a_visible_widget(qtbot) -> None:
    widget = QWidget()
    widget.show()
    _kept.append(widget)


def test_leaks_a_dialog(qtbot) -> None:
    _kept.append(QDialog())


def test_leaks_a_job_thread(qtbot) -> None:
    _leaked.append(stop := threading.Event())
    thread = threading.Thread(target=stop.wait, args=(300,), name="rank0-events", daemon=True)
    thread.start()


def test_leaks_background_work(qtbot) -> None:
    _leaked.append(stop := threading.Event())
    bridge = Bridge()
    bridge.run_in_background(lambda: stop.wait(300))
    _kept.append(bridge)


def test_clean(qtbot) -> None:
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.add_token("r1", "hello")
