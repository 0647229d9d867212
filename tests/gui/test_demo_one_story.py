"""One demo, one story (issue 35, item 4): the demo's simulated hardware is described
once (``core.run.demo``), and every view that names its cables or RDMA says the same:
the Cluster pane's map, Presentation's copy of it, Check my Macs and the History record
of an answer on it; the "demo without RDMA" variant turns RDMA off everywhere at once."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from core.run.demo import cabling, demo_facts
from core.run.measure.history import History
from core.run.states import RunState
from core.settings import Settings
from gui.cluster.doctor_view import DoctorDialog
from gui.cluster.topology_scene import layout_scene
from gui.main_window import MainWindow
from gui.model.drop_zone import LOADED
from gui.preferences import Preferences
from tests.gui.fakes import FakeBehaviour, fake_factory

WAIT_MS = 60_000


def _checked(qtbot: QtBot, window: MainWindow) -> tuple[int, int, str]:
    """Check my Macs' report: its cables, those with RDMA, and its cabling sentence."""
    dialog = window.cluster.check_macs()
    try:
        qtbot.waitUntil(lambda: dialog.report is not None, timeout=WAIT_MS)
        report = dialog.report
        assert report is not None and report.ok, dialog.verdict.text()
        cables = [c for c in report.group("linking") if c.name == "cable"]
        [sentence] = [c.message for c in report.group("linking") if c.name == "cabling"]
        return len(cables), sum(c.status == "ok" for c in cables), sentence
    finally:
        dialog.close()
        qtbot.waitUntil(lambda: not window.findChildren(DoctorDialog), timeout=5_000)


def test_every_view_tells_the_demos_cables_and_rdma_alike(qtbot: QtBot, demo_model: Path) -> None:
    factory = fake_factory(FakeBehaviour(token_s=0.005))
    window = MainWindow(Preferences(Settings(demo_nodes=4)), demo=True, job_factory=factory)
    qtbot.addWidget(window)
    window.show()
    window.model.load(demo_model)
    qtbot.waitUntil(lambda: window.model.drop_zone.state == LOADED, timeout=20_000)
    window.model.select_strategy("pipeline")
    described = cabling(demo_facts(4))  # the one description: 6 cables, Studio D's without
    assert (described.shape, described.cables, described.rdma_cables) == ("full mesh", 6, 3)
    said = described.words()
    assert said == "6 cables · RDMA on 3 of 6"

    diagram = window.cluster.diagram()
    assert diagram is not None and diagram.shape == "full mesh"
    assert layout_scene(diagram, 600).summary == said  # the Cluster pane's map
    cables, with_rdma, sentence = _checked(qtbot, window)  # Check my Macs
    assert (cables, with_rdma) == (6, 3)
    assert sentence.startswith("Full mesh") and "(6 cables)" in sentence
    view = window.show_presentation()  # Presentation: the pane's map
    try:
        assert view.map.scene is not None and view.map.scene.summary == said
    finally:
        view.close()
    run = window.run
    run.start()
    qtbot.waitUntil(lambda: run.controller.state == RunState.READY, timeout=20_000)
    run.ask("What is the capital of France?")
    qtbot.waitUntil(lambda: bool(History().runs()), timeout=WAIT_MS)
    [record] = History().runs()
    assert record.figures["simulated"]["summary"] == said  # History
    assert record.figures["simulated"]["shape"] == "full mesh"
    assert record.backend == "ring" and record.figures["simulated"]["ran"] == "ring over loopback"
    run.stop()
    qtbot.waitUntil(lambda: not run.busy, timeout=10_000)

    # The demo without RDMA: every view at once.
    window.demo_rdma_action.setChecked(True)
    assert window.preferences.settings.demo_rdma is False
    diagram = window.cluster.diagram()
    assert diagram is not None
    assert layout_scene(diagram, 600).summary == "6 cables · no RDMA"
    assert _checked(qtbot, window)[:2] == (6, 0)
    assert all(n.rdma is False for n in window.cluster.nodes())  # the badges open the guide
