"""The checks' offered network change, in the window (issue 18): a Change… button beside
each offer, a dialog that shows what will run and the undo, asks the admin password once
and forgets it, then the checks run again with every Mac asked anew."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLineEdit
from pytestqt.qtbot import QtBot

from core.plan.memory import GIB, Node, PlanOptions
from core.plan.planner import make_plan
from core.remote.modelcheck import CheckResult
from core.remote.targets import Target
from core.run.checks import netapply
from core.run.checks.netapply import NetworkChangeFailed
from core.run.checks.preflight import Gathered, evaluate
from core.run.checks.report import PreflightReport
from gui.bridge import Bridge
from gui.run.network_dialog import NetworkChangeDialog
from gui.run.pane import RunPane
from gui.run.preflight_view import PreflightView
from tests.fixtures.macos.hosts import load_facts
from tests.helpers.header_models import synthetic_model_info


def tb_off_report() -> tuple[PreflightReport, list[Target]]:
    """The checks on tb-off's pair: the cable carries only IPv6, so a change is offered."""
    facts = load_facts("tb-off")
    targets = [Target(f.name, f"10.0.0.{i + 2}", cache_root="/c") for i, f in enumerate(facts)]
    info = synthetic_model_info(layers=8, layer_bytes=GIB, shared_bytes=GIB // 2, name="m")
    nodes = [Node(f.name, f.memory_bytes or 0) for f in facts]
    plan = make_plan(info, nodes, options=PlanOptions(strategy="pipeline"))
    gathered = [
        Gathered(t, f, model=CheckResult(f.name, "present", "/c/models/m"))
        for t, f in zip(targets, facts, strict=True)
    ]
    return evaluate(plan, gathered), targets


def synchronous(work: Callable[[], Any], on_done: Callable, on_error: Callable, **_: Any) -> None:
    try:
        result = work()
    except Exception as error:  # the bridge hands any failure to on_error
        on_error(error)
    else:
        on_done(result)


def test_each_offered_change_has_a_change_button_naming_its_mac(qtbot: QtBot) -> None:
    report, _ = tb_off_report()
    view = PreflightView()
    qtbot.addWidget(view)
    view.show_report(report)
    assert set(view.change_buttons) == {"studio-p", "studio-q"}
    with qtbot.waitSignal(view.change_requested) as asked:
        qtbot.mouseClick(view.change_buttons["studio-q"], Qt.MouseButton.LeftButton)
    assert asked.args == ["studio-q"]
    view.show_checking(["studio-p"])
    assert view.change_buttons == {}


def test_the_dialog_shows_the_change_and_uses_the_password_once(qtbot: QtBot) -> None:
    report, _ = tb_off_report()
    changes = [o for o in report.backend.offers if o.node == "studio-p"]
    used: list[str] = []
    refused = "Could not change the network on studio-p: the admin password was not accepted."
    failures = [NetworkChangeFailed(refused)]

    def apply(password: str) -> None:
        used.append(password)
        if failures:
            raise failures.pop()

    dialog = NetworkChangeDialog("studio-p", changes, apply=apply, run_in_background=synchronous)
    qtbot.addWidget(dialog)
    texts = " ".join(w.text() for w in dialog.findChildren(type(dialog.error)))
    assert "sudo ifconfig en2 inet 192.168.200.1 netmask 255.255.255.252 alias" in texts
    assert "Undo: sudo ifconfig en2 inet 192.168.200.1 -alias" in texts
    assert "never stored" in texts
    dialog.submit()  # nothing typed: said, nothing run
    assert used == [] and "Type the password" in dialog.error.text()
    field: QLineEdit = dialog.password
    field.setText("wrong")
    dialog.submit()
    assert used == ["wrong"] and field.text() == ""  # handed over once, forgotten at once
    assert "was not accepted" in dialog.error.text() and dialog.submit_button.isEnabled()
    field.setText("right")
    with qtbot.waitSignal(dialog.accepted):
        dialog.submit()
    assert used == ["wrong", "right"]


def test_the_pane_applies_then_checks_again_asking_every_mac(
    qtbot: QtBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    report, targets = tb_off_report()
    bridge = Bridge()
    pane = RunPane(bridge)
    qtbot.addWidget(pane, before_close_func=lambda _w: (pane.shutdown(), bridge.close()))
    pane.controller.report = report
    pane.controller.session = SimpleNamespace(targets=targets)  # type: ignore[assignment]
    applied: list[tuple[str, int, str]] = []
    monkeypatch.setattr(
        netapply,
        "apply_changes",
        lambda target, changes, password: applied.append((target.name, len(changes), password)),
    )
    starts: list[dict] = []
    monkeypatch.setattr(pane, "_start", lambda **kw: starts.append(kw))
    assert pane.change_network("nobody") is None
    dialog = pane.change_network("studio-p")
    assert dialog is not None
    dialog.password.setText("admin pw")
    with qtbot.waitSignal(dialog.accepted, timeout=10_000):
        dialog.submit()
    assert applied == [("studio-p", 1, "admin pw")]
    assert starts == [{"verify": False, "reprobe": True}]
    pane.controller.session = None  # the stand-in session cannot be stopped at close
