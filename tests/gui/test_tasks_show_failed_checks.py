"""Every task in the window shows a failed check the way Start does (``gui.task_runner``):
Compare (the Run pane) and a fine-tune (the Fine-tune view) on two Macs whose facts the
scanner holds but which no SSH server answers (loopback addresses where nothing
listens) end at the checks, and the checks view shows each failed check with its fix.
Nothing is started."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from core.model.info import ModelInfo, read_model_info
from core.remote.targets import Target
from core.run.demo import demo_facts
from core.run.session import Host
from core.run.states import RunState
from gui.bridge import Bridge
from gui.model.planning import plan_all
from gui.run.pane import RunPane
from tests.gui.tune_helpers import open_tune_view

WAIT_MS = 60_000
ADDRESSES = ("127.0.0.9", "127.0.0.10")  # nothing listens there


class Unreachable:
    """A ClusterSource: the demo Macs' facts, just probed (so the plan is made without a
    probe), each at an address where no SSH server answers (so its checks fail)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        (tmp_path / "known_hosts").write_text("")

    def hosts(self, names: list[str]) -> list[Host]:
        facts = {f.name: f for f in demo_facts(2)}
        hosts = []
        for name, address in zip(names, ADDRESSES, strict=False):
            target = Target(
                name,
                address,
                22,
                known_hosts=self.tmp_path / "known_hosts",
                ssh_dir=self.tmp_path,
                timeout=5.0,
                cache_root=str(self.tmp_path / "nodes" / address),
            )
            hosts.append(Host(name, target, replace(facts[name], probed_at=time.monotonic())))
        return hosts


@pytest.fixture(scope="module")
def demo_info(demo_model: Path) -> ModelInfo:
    return read_model_info(demo_model)


def _shows_the_failed_checks(text: str, count: int) -> None:
    """The checks view's text: ``count`` Macs unreachable, each check with its fix."""
    reached = [a for a in ADDRESSES if f"({a}) cannot be reached" in text]
    assert len(reached) == count, text
    assert "→ Turn on Remote Login there" in text  # the fix, under its check
    assert "failed" in text


def test_compare_stops_at_a_failed_check_and_shows_it_with_its_fix(
    qtbot: QtBot, demo_info: ModelInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "cache"))
    bridge = Bridge()
    pane = RunPane(bridge)

    def before_close(_widget: RunPane) -> None:
        pane.shutdown()
        bridge.close()

    qtbot.addWidget(pane, before_close_func=before_close)
    pane.resize(1000, 820)
    pane.show()
    pane.set_plan(demo_info, plan_all(demo_info, demo_facts(2))["pipeline"])
    pane.set_cluster(Unreachable(tmp_path))
    assert not pane.checks.isVisible()
    with qtbot.waitSignal(pane.comparer.failed, timeout=WAIT_MS) as failed:
        assert pane.compare()
    assert failed.args[0].startswith("Compare failed: ")
    assert pane.checks.isVisible()  # the checks view, as after Start
    _shows_the_failed_checks(pane.checks.text(), 1)  # the one-Mac run's, checked first
    assert [c.status for c in pane.checks.checks].count("fail") >= 1
    assert pane.status.text().startswith("Compare failed: ")
    assert pane.controller.job is None and not pane.comparer.busy
    assert pane.compare_button.isEnabled() and pane.start_button.isEnabled()


def test_a_fine_tune_stops_at_a_failed_check_and_shows_it_with_its_fix(
    qtbot: QtBot, demo_info: ModelInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MACMESH_DATA_DIR", str(tmp_path / "home"))
    view = open_tune_view(qtbot, demo_info)
    view.set_cluster(Unreachable(tmp_path))  # type: ignore[arg-type]
    view.use_demo_data()
    qtbot.waitUntil(lambda: view.data is not None, timeout=20_000)
    assert not view.checks.isVisible()
    with qtbot.waitSignal(view.controller.checks_failed, timeout=WAIT_MS):
        assert view.start()
    qtbot.waitUntil(lambda: view.controller.state == RunState.NOT_READY, timeout=WAIT_MS)
    assert view.checks.isVisible()  # the checks view, as after the Run pane's Start
    _shows_the_failed_checks(view.checks.text(), 2)
    tune = view.controller.tune
    assert tune is not None and tune.session.job is None  # nothing was started
    assert "cannot be reached" in tune.session.error  # the session's NOT_READY detail
    assert view.start_button.isEnabled()


def test_start_stops_at_a_failed_check_through_its_task_runner_and_starts_again(
    qtbot: QtBot, demo_info: ModelInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start (``RunController`` on ``TaskRunner``): the checks' report crosses to the
    checks view with each fix, the runner is free again, and a second Start runs its own
    checks (nothing is started either time)."""
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "cache"))
    bridge = Bridge()
    pane = RunPane(bridge)

    def before_close(_widget: RunPane) -> None:
        pane.shutdown()
        bridge.close()

    qtbot.addWidget(pane, before_close_func=before_close)
    pane.resize(1000, 820)
    pane.show()
    pane.set_plan(demo_info, plan_all(demo_info, demo_facts(2))["pipeline"])
    pane.set_cluster(Unreachable(tmp_path))
    controller = pane.controller
    reports: list[object] = []
    controller.preflight_done.connect(reports.append)
    for attempt in (1, 2):
        pane.start()
        assert controller.state == RunState.CHECKING
        qtbot.waitUntil(lambda: controller.state == RunState.NOT_READY, timeout=WAIT_MS)
        qtbot.waitUntil(lambda: not controller._starter.busy, timeout=WAIT_MS)
        assert len(reports) == attempt  # each Start's own report, once
        assert pane.checks.isVisible()
        _shows_the_failed_checks(pane.checks.text(), 2)
        assert "check" in pane.status.text() and "failed" in pane.status.text()
        assert controller.job is None and pane.start_button.isEnabled()
