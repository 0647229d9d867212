"""History per answer (issue 35, item 6): a chat record's plots cover that answer's span
(from its question to its end), in seconds or ms, with its own series, and its export is
one PNG for a slide (≥ 1600×900) with a title, the figures and the keys."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtGui import QImage
from pytestqt.qtbot import QtBot

from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.measure.history import History, RunKind
from core.run.states import RunState
from core.run.tasks.chat import SETTLE_S
from gui.bridge import Bridge
from gui.history.run_plots import EXPORT_SIZE, ExportCard, RunPlots
from gui.model.planning import plan_all
from gui.run.pane import RunPane
from tests.gui.fakes import FakeBehaviour, fake_factory


def test_a_chat_record_plots_its_own_answer_and_exports_one_slide(
    qtbot: QtBot, demo_model: Path, tmp_path: Path
) -> None:
    info = read_model_info(demo_model)
    bridge = Bridge()
    pane = RunPane(bridge, fake_factory(FakeBehaviour(token_s=0.02)))

    def before_close(_widget: RunPane) -> None:
        if pane.busy:
            pane.stop()
            qtbot.waitUntil(lambda: not pane.busy, timeout=10_000)
        pane.shutdown()
        bridge.close()

    qtbot.addWidget(pane, before_close_func=before_close)
    pane.show()
    pane.set_plan(info, plan_all(info, demo_facts(2))["pipeline"])
    pane.start()
    qtbot.waitUntil(lambda: pane.controller.state == RunState.READY, timeout=20_000)
    pane.ask("What is the capital of France?")
    qtbot.waitUntil(lambda: len(History().runs()) == 1, timeout=20_000)
    time.sleep(1.5)  # idle between the answers: never part of the second one's plot
    pane.ask("And Italy?")
    qtbot.waitUntil(lambda: len(History().runs()) == 2, timeout=20_000)
    newest = History().runs()[0]
    assert newest.id is not None and newest.kind == RunKind.CHAT
    record = History().get(newest.id)
    assert record is not None
    span = record.figures["span_s"]
    assert 0 < span < 2.0  # the answer (about 0.2 s), not the job since Start
    own = record.series["tokens_per_s"]
    assert own[0][0] >= 0 and own[-1] == (span, 0.0)  # from its question to its end
    assert all(0 <= t <= span for t, _v in own)
    # its links' last reports come a moment after its end (each covers its interval)
    assert all(0 <= t <= span + SETTLE_S for s in record.series.values() for t, _v in s)
    assert len(own) - 1 == record.figures["generation_tokens"] - 1  # its own tokens only

    plots = RunPlots()
    qtbot.addWidget(plots)
    plots.resize(900, 600)
    plots.show()
    plots.show_record(record)
    low, high = plots.top.getPlotItem().getViewBox().viewRange()[0]
    width = span * 1000  # a short answer: in milliseconds
    assert abs(low) <= 0.05 * width and abs(high - width) <= 0.05 * width
    assert "(ms)" in plots.top.getPlotItem().getAxis("bottom").labelText

    card = ExportCard(record)
    try:
        assert card.title.text().startswith(f"{record.model} on Studio A, Studio B · pipeline ·")
        assert "tokens/s" in card.figures.text() and "first token" in card.figures.text()
        assert "this answer" in card.plots.top_key.text()  # the keys: the legend
    finally:
        card.deleteLater()
    [png] = plots.export_png(tmp_path, "answer")
    image = QImage(str(png))
    assert (image.width(), image.height()) == EXPORT_SIZE
