"""The Run pane on real Macs, without a cluster: a failing check rendered with its fix
(a real preflight against addresses where nothing listens), copy progress as it is
shown, and the mlx.launch dialog for the demo and for real Macs.

The whole path over a real sshd (checks, copy, job, Stop) is test_run_cluster_live.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import shiboken6
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from core.cluster.probe.facts import NodeFacts
from core.model.info import ModelInfo, read_model_info
from core.plan.memory import GIB, Node, PlanOptions
from core.plan.planner import Plan, make_plan
from core.remote.modelcopy import CopyProgress
from core.remote.targets import Target
from core.run.demo import demo_facts
from core.run.session import Host
from core.run.states import RunState
from core.units import MIB
from gui.bridge import Bridge
from gui.model.planning import plan_all
from gui.run.launch_dialog import LaunchDialog
from gui.run.pane import RunPane
from gui.run.preflight_view import BAR_STEPS, copy_line
from tests.helpers.tiny_models import make_tiny_model

WAIT_MS = 60_000


class Targets:
    """A ClusterSource over fixed targets (the app's is the Cluster pane's scanner), each
    with facts just probed that say nothing (so the checks probe them again)."""

    def __init__(self, targets: Sequence[Target]) -> None:
        self._targets = {t.name: t for t in targets}

    def hosts(self, names: Sequence[str]) -> list[Host]:
        return [Host(name, self._targets[name], NodeFacts(name)) for name in names]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
    return read_model_info(make_tiny_model(tmp_path_factory.mktemp("m") / "tiny", layers=4))


def real_plan(info: ModelInfo) -> Plan:
    nodes = [Node("mac-a", 32 * GIB), Node("mac-b", 32 * GIB)]
    return make_plan(info, nodes, options=PlanOptions(strategy="pipeline"))


def make_pane(qtbot: QtBot) -> RunPane:
    bridge = Bridge()
    pane = RunPane(bridge)

    def before_close(_widget: RunPane) -> None:
        if pane.busy:
            pane.stop()
            qtbot.waitUntil(lambda: not pane.busy, timeout=WAIT_MS)
        if pane.launch_dialog is not None and shiboken6.isValid(pane.launch_dialog):
            pane.launch_dialog.close()
        pane.shutdown()
        bridge.close()

    qtbot.addWidget(pane, before_close_func=before_close)
    pane.resize(1000, 820)
    pane.show()
    return pane


def pane_on_unreachable_macs(qtbot: QtBot, tiny: ModelInfo, tmp_path: Path) -> RunPane:
    """A Run pane planned on two Macs at addresses where nothing listens."""
    pane = make_pane(qtbot)
    pane.set_cluster(Targets(unreachable(tmp_path)))
    pane.set_plan(tiny, real_plan(tiny))
    return pane


def one_line(command: str) -> str:
    return " ".join(command.replace("\\\n", " ").split())


def unreachable(tmp_path: Path) -> list[Target]:
    known = tmp_path / "known_hosts"
    known.write_text("")
    return [
        Target(
            name,
            address,
            22,
            known_hosts=known,
            ssh_dir=tmp_path,
            timeout=5.0,
            cache_root=str(tmp_path / name),
        )
        for name, address in (("mac-a", "127.0.0.9"), ("mac-b", "127.0.0.10"))
    ]


def test_failed_checks_are_shown_with_their_fix_and_start_stays_available(
    qtbot: QtBot, tiny: ModelInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "hash-cache"))
    pane = pane_on_unreachable_macs(qtbot, tiny, tmp_path)
    qtbot.mouseClick(pane.start_button, Qt.MouseButton.LeftButton)
    assert pane.controller.state in (RunState.CHECKING, RunState.NOT_READY)
    assert pane.checks.isVisible() and "Checking" in pane.checks.badge.text()
    assert pane.stop_button.isEnabled() or pane.controller.state == RunState.NOT_READY
    qtbot.waitUntil(lambda: pane.controller.state == RunState.NOT_READY, timeout=WAIT_MS)
    text = pane.checks.text()
    assert "2 failed" in text and "Not ready" in pane.state_badge.text()
    assert "mac-a (127.0.0.9) cannot be reached" in text
    assert "mac-b (127.0.0.10) cannot be reached" in text
    assert "→ Turn on Remote Login there" in text  # the fix, under its check
    icons = [c.status for c in pane.checks.checks]
    assert icons.count("fail") == 2
    assert "2 checks failed" in pane.status.text()
    assert pane.start_button.isEnabled() and not pane.stop_button.isEnabled()
    assert pane.controller.job is None  # nothing was started
    assert not pane.banner.isVisible()  # a rank failure's banner is for jobs


def test_the_checks_verify_button_starts_again_hashing_every_file(
    qtbot: QtBot, tiny: ModelInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "hash-cache"))
    pane = pane_on_unreachable_macs(qtbot, tiny, tmp_path)
    verify = pane.checks.verify_button
    qtbot.mouseClick(pane.start_button, Qt.MouseButton.LeftButton)
    assert not verify.isEnabled()  # not while checking
    qtbot.waitUntil(lambda: pane.controller.state == RunState.NOT_READY, timeout=WAIT_MS)
    first = pane.controller.session
    assert first is not None and not first.verify and verify.isEnabled()
    qtbot.mouseClick(verify, Qt.MouseButton.LeftButton)
    again = pane.controller.session
    assert again is not None and again is not first and again.verify
    qtbot.waitUntil(lambda: pane.controller.state == RunState.NOT_READY, timeout=WAIT_MS)
    assert verify.isEnabled()


def test_copy_progress_per_mac_with_speed_and_time_left(qtbot: QtBot) -> None:
    pane = make_pane(qtbot)
    view = pane.checks
    view.show_checking(["mac-a", "mac-b"])
    mb = MIB
    view.show_copy(CopyProgress("mac-a", "copying", 12 * mb, 48 * mb, 80 * mb, 0.45))
    view.show_copy(CopyProgress("mac-b", "copying", 3 * mb, 48 * mb))
    view.show_copy(CopyProgress("mac-b", "copying", 30 * mb, 48 * mb, 95.5 * mb, 95.0))
    lines = view.copy_text()
    assert lines["mac-a"] == "12 MB of 48 MB · 80 MB/s · about 0 s left"
    assert lines["mac-b"] == "30 MB of 48 MB · 95.5 MB/s · about 1 min 35 s left"
    bar_a, _ = view.copy_rows["mac-a"]
    assert bar_a.value() == BAR_STEPS // 4 and view.badge.text() == "Copying"
    view.show_copy(CopyProgress("mac-a", "verified", 48 * mb, 48 * mb, 80 * mb, 0.0))
    assert view.copy_text()["mac-a"] == "48 MB · verified"
    assert bar_a.value() == BAR_STEPS and bar_a.property("done") == "true"
    view.show_copy(CopyProgress("mac-b", "verified", 48 * mb, 48 * mb, 80 * mb, 0.0))
    assert view.badge.text() == "Copied"
    view.show_error("The model could not be copied: disk full on mac-b.")
    assert "disk full" in view.text() and view.badge.text() == "Not ready"
    early = CopyProgress("mac-a", "copying", 0, 48 * mb)
    assert copy_line(early) == "0 B of 48 MB · measuring speed…"


def test_the_mlx_launch_dialog_for_the_demo(qtbot: QtBot, tiny: ModelInfo) -> None:
    pane = make_pane(qtbot)
    assert not pane.launch_button.isEnabled()  # no plan yet
    pane.set_plan(tiny, plan_all(tiny, demo_facts(2))["pipeline"])
    assert pane.launch_button.isEnabled()
    qtbot.mouseClick(pane.launch_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: pane.launch_dialog is not None, timeout=WAIT_MS)
    dialog = pane.launch_dialog
    assert isinstance(dialog, LaunchDialog) and dialog.hostfile is None
    command = dialog.command.toPlainText()
    line = one_line(command)  # shown an option per line, as one shell command
    assert line.startswith("mlx.launch -n 2 --backend ring --python ")
    assert "-- -m core.worker --model " in line
    assert "--strategy pipeline" in line and "--split" in line
    qtbot.mouseClick(dialog.copy_button("command"), Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == command
    assert dialog.copy_button("command").text() == "Copied"
    dialog.close()


def test_the_mlx_launch_dialog_shows_the_batch_the_start_runs(
    qtbot: QtBot, tiny: ModelInfo
) -> None:
    """The dialog's command is the job a Start runs, every field included: the batch and
    prompt cache the plan was made for (the Model pane's Requests at once), not defaults."""
    from core.run.planning import Serving
    from core.run.session import Session, simulated_hosts

    pane = make_pane(qtbot)
    plan = plan_all(tiny, demo_facts(2), Serving(batch=4, prompt_cache_mb=0))["pipeline"]
    pane.set_plan(tiny, plan)
    qtbot.mouseClick(pane.launch_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: pane.launch_dialog is not None, timeout=WAIT_MS)
    dialog = pane.launch_dialog
    assert dialog is not None
    line = one_line(dialog.command.toPlainText())
    assert "--batch 4" in line and "--prompt-cache-mb 0" in line
    runs = Session(tiny, simulated_hosts(demo_facts(2)), plan=plan).job_spec().worker_args(0)
    assert line.endswith(" ".join(runs))
    dialog.close()


def test_the_mlx_launch_dialog_for_real_macs_shows_the_hostfile(
    qtbot: QtBot, tiny: ModelInfo, tmp_path: Path
) -> None:
    pane = pane_on_unreachable_macs(qtbot, tiny, tmp_path)
    qtbot.mouseClick(pane.launch_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: pane.launch_dialog is not None, timeout=WAIT_MS)
    dialog = pane.launch_dialog
    assert dialog is not None and dialog.hostfile is not None
    assert one_line(dialog.command.toPlainText()).startswith("mlx.launch --hostfile hostfile.json")
    hostfile = dialog.hostfile.toPlainText()
    assert '"backend": "ring"' in hostfile
    assert '"ssh": "127.0.0.9"' in hostfile and '"ssh": "127.0.0.10"' in hostfile
    qtbot.mouseClick(dialog.copy_button("hostfile"), Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == hostfile
    dialog.close()


def test_stop_during_the_checks_starts_nothing(
    qtbot: QtBot, tiny: ModelInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "hash-cache"))
    pane = pane_on_unreachable_macs(qtbot, tiny, tmp_path)
    qtbot.mouseClick(pane.start_button, Qt.MouseButton.LeftButton)
    assert pane.controller.state == RunState.CHECKING  # its result needs the event loop
    assert pane.stop_button.isEnabled() and not pane.start_button.isEnabled()
    qtbot.mouseClick(pane.stop_button, Qt.MouseButton.LeftButton)
    assert pane.controller.state == RunState.STOPPING
    qtbot.waitUntil(lambda: pane.controller.state == RunState.STOPPED, timeout=WAIT_MS)
    assert pane.status.text() == "Stopped before anything was started."
    assert pane.controller.job is None and pane.start_button.isEnabled()
