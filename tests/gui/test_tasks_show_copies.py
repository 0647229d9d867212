"""Every task in the window shows its sessions' copies and checks through its
``TaskRunner`` (``gui.task_runner``), as Start does: Compare (the Run pane) and a
fine-tune (the Fine-tune view) each hand their sessions to the runner's watch, which
crosses each copy's progress and the checks' report to the GUI thread. The session is a
fake at the task/session boundary (``tests.helpers.watched``: a copy to one Mac at 0, 40
and 100 %, then a failed check on the other, with its fix); only the runner's watch
turns its signals into what the view shows, so a task that stopped handing its
sessions to it shows no copy."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from core.model.info import ModelInfo, read_model_info
from core.remote.modelcopy import CopyProgress
from core.remote.targets import Target
from core.run.demo import demo_facts
from core.run.session import Host, Session
from core.run.states import RunState
from gui.model.planning import plan_all
from gui.run.preflight_view import copy_line
from tests.gui.helpers import shown_run_pane
from tests.gui.tune_helpers import open_tune_view
from tests.helpers import watched

WAIT_MS = 30_000


class NeverReached:
    """A ClusterSource: the demo Macs' facts, as real Macs (each with a target) that the
    fake session never reaches."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path

    def hosts(self, names: list[str]) -> list[Host]:
        facts = {f.name: f for f in demo_facts(2)}
        return [
            Host(name, Target(name, f"127.0.0.{9 + i}", 22, ssh_dir=self.tmp_path), facts[name])
            for i, name in enumerate(names)
        ]


@pytest.fixture(scope="module")
def demo_info(demo_model: Path) -> ModelInfo:
    return read_model_info(demo_model)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Session]:
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MACMESH_DATA_DIR", str(tmp_path / "home"))
    return watched.failing_start(monkeypatch)


def _shows_the_copy_and_the_failed_check(
    text: str, copies: dict[str, str], session: Session
) -> None:
    """The checks view: the copy's last progress on its Mac's row, the failed check and
    its fix."""
    done = CopyProgress(
        watched.copying(session),
        "copying",
        100 * watched.MB,
        100 * watched.MB,
        20.0 * watched.MB,
        3.0,
    )
    assert copies == {watched.copying(session): copy_line(done)}, copies
    assert copy_line(done) == "100 MB of 100 MB · 20 MB/s · about 3 s left"
    assert watched.problem(session) in text and f"→ {watched.fix(session)}" in text, text


def test_compare_shows_each_copy_and_the_failed_check_through_its_runner(
    qtbot: QtBot, demo_info: ModelInfo, tmp_path: Path, started: list[Session]
) -> None:
    pane = shown_run_pane(
        qtbot, demo_info, plan_all(demo_info, demo_facts(2))["pipeline"], NeverReached(tmp_path)
    )
    copies: list[CopyProgress] = []
    pane.comparer.copy_progress.connect(copies.append)
    with qtbot.waitSignal(pane.comparer.failed, timeout=WAIT_MS):
        assert pane.compare()
    [session] = started  # the comparison's first session: the cluster, probed and planned
    assert [c.bytes_done for c in copies] == list(watched.COPIED)  # each crossed, in order
    assert pane.checks.isVisible()
    _shows_the_copy_and_the_failed_check(pane.checks.text(), pane.checks.copy_text(), session)
    assert pane.controller.job is None and not pane.comparer.busy


def test_a_fine_tune_shows_each_copy_and_the_failed_check_through_its_runner(
    qtbot: QtBot, demo_info: ModelInfo, tmp_path: Path, started: list[Session]
) -> None:
    view = open_tune_view(qtbot, demo_info)
    view.set_cluster(NeverReached(tmp_path))  # type: ignore[arg-type]
    view.use_demo_data()
    qtbot.waitUntil(lambda: view.data is not None, timeout=20_000)
    copies: list[CopyProgress] = []
    view.controller.copy_progress.connect(copies.append)
    with qtbot.waitSignal(view.controller.checks_failed, timeout=WAIT_MS):
        assert view.start()
    qtbot.waitUntil(lambda: view.controller.state == RunState.NOT_READY, timeout=WAIT_MS)
    [session] = started
    assert [c.bytes_done for c in copies] == list(watched.COPIED)
    assert view.checks.isVisible()
    _shows_the_copy_and_the_failed_check(view.checks.text(), view.checks.copy_text(), session)
    tune = view.controller.tune
    assert tune is not None and tune.session is session and session.job is None
