"""The live-demo kit on the real demo cluster: MLX ranks as processes on this machine.
Test links through the window really moves the bytes it reports, the answer and the
link test are kept in the history, and no rank is left behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from core.run.measure.history import History
from core.run.measure.links import SIZES
from core.run.states import RunState
from gui.cluster.pane import CABLES
from gui.main_window import MainWindow
from gui.model.drop_zone import LOADED
from tests.gui.helpers import drop_paths
from tests.helpers.jobs import assert_no_ranks_left

pytestmark = pytest.mark.slow
LOAD_TIMEOUT_MS = 180_000


def test_test_links_and_history_on_real_ranks(qtbot: QtBot, demo_model: Path) -> None:
    window = MainWindow(demo=True)

    def stop_first(_w: MainWindow) -> None:
        if window.run.busy:
            window.run.stop()
            qtbot.waitUntil(lambda: not window.run.busy, timeout=30_000)

    qtbot.addWidget(window, before_close_func=stop_first)
    window.show()
    run = window.run
    run.max_tokens.setValue(4)
    run.controller.link_scale = 0.05  # 1.6 MiB a size: the bytes are real, the test short
    drop_paths(window.model.drop_zone, demo_model)
    qtbot.waitUntil(lambda: window.model.drop_zone.state == LOADED, timeout=30_000)
    window.model.select_strategy("pipeline")
    window.cluster.show_view(CABLES)
    run.start()
    qtbot.waitUntil(lambda: run.controller.state == RunState.READY, timeout=LOAD_TIMEOUT_MS)
    run.ask("What is the capital of France?")
    qtbot.waitUntil(lambda: run.controller.state == RunState.GENERATING, timeout=10_000)
    qtbot.waitUntil(lambda: run.controller.state == RunState.READY, timeout=LOAD_TIMEOUT_MS)
    with qtbot.waitSignal(run.controller.links_tested, timeout=LOAD_TIMEOUT_MS) as tested:
        window.cluster.link_bar.button.click()
    result = tested.args[0]
    assert result.nodes == ["Studio A", "Studio B"]
    assert len(result.results) == 1  # two ranks: one link
    link = result.results[0]
    assert [p["bytes"] for p in link.points] == [float(s) for s in SIZES]  # 4 KiB to 64 MiB
    assert all(p["seconds"] > 0 and p["bytes_per_s"] > 0 for p in link.points)
    assert link.nominal.label == "loopback TCP" and link.share is not None and link.share > 0
    line = next(line for line in window.cluster.topology.scene.cables() if line.measured)
    assert {line.a, line.b} == {"Studio A", "Studio B"}
    assert line.caption.endswith("of loopback TCP")
    job = run.controller.job
    run.stop()
    qtbot.waitUntil(lambda: not run.busy, timeout=30_000)
    assert_no_ranks_left(job)
    kinds = [record.kind for record in History().runs()]
    assert kinds == ["linktest", "chat"]
