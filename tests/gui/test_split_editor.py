"""The split editor in the Model pane: layers per Mac by hand, checked by the planner,
refused with the Mac and the gigabytes missing, Reset, and Start runs the edited split."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from core.model.info import ModelInfo
from core.run.demo import demo_nodes
from core.run.states import RunState
from core.worker.vocab import Strategy
from gui.bridge import Bridge
from gui.main_window import MainWindow
from gui.model.drop_zone import LOADED
from gui.model.pane import ModelPane
from gui.model.split_editor import moved
from tests.gui.fakes import fake_factory
from tests.gui.helpers import drop_paths
from tests.helpers.header_models import synthetic_model_info

GIB = 1 << 30


@pytest.fixture
def pane(qtbot: QtBot) -> ModelPane:
    bridge = Bridge()
    pane = ModelPane(bridge)
    qtbot.addWidget(pane, before_close_func=lambda _w: bridge.close())
    pane.resize(440, 900)
    pane.show()
    return pane


def _with_model(pane: ModelPane, info: ModelInfo) -> None:
    pane._loaded(pane._generation, info)  # as a folder read in the background ends


def _counts(pane: ModelPane) -> list[int]:
    return [box.value() for box in pane.split_editor.boxes]


def test_moving_a_boundary_keeps_the_total() -> None:
    assert moved((18, 12), 0, 20) == (20, 10)
    assert moved((18, 12), 1, 15) == (15, 15)  # the last Mac takes from the one before
    assert moved((10, 10, 10), 1, 4) == (10, 4, 16)


def test_an_edit_that_fits_is_the_plan_and_reset_undoes_it(
    qtbot: QtBot, pane: ModelPane, demo_model: Path
) -> None:
    pane.set_nodes(demo_nodes(2))
    with qtbot.waitSignal(pane.model_changed, timeout=20_000):
        drop_paths(pane.drop_zone, demo_model)
    pane.select_strategy("pipeline")
    editor = pane.split_editor
    assert editor.isVisible() and _counts(pane) == [18, 12]
    assert not editor.reset_button.isEnabled()
    with qtbot.waitSignal(pane.plan_changed) as changed:
        editor.boxes[0].setValue(20)
    plan = changed.args[1]
    assert plan.fits and plan.split == (20, 10) and [r.layers for r in plan.ranks] == [20, 10]
    assert "as set by hand (20 on Studio A, 10 on Studio B)" in plan.reason
    assert _counts(pane) == [20, 10] and editor.reset_button.isEnabled()
    assert "as set by hand" in pane.chooser.options[Strategy.PIPELINE].reason.text()
    assert pane.bars.isVisible()
    with qtbot.waitSignal(pane.plan_changed) as changed:
        editor.reset_button.click()
    assert changed.args[1].split == (18, 12) and _counts(pane) == [18, 12]
    pane.select_strategy("tensor")
    assert not editor.isVisible()  # only a pipeline has a split


def test_an_edit_that_overfills_a_mac_is_refused_with_the_gigabytes(
    qtbot: QtBot, pane: ModelPane
) -> None:
    nodes = demo_nodes(2)
    small = dataclasses.replace(nodes[1].facts, memory_bytes=24 * GIB)
    pane.set_nodes([nodes[0], dataclasses.replace(nodes[1], facts=small)])
    _with_model(pane, synthetic_model_info(layers=30, layer_bytes=GIB, shared_bytes=GIB))
    pane.select_strategy("pipeline")
    before = pane.plan()
    assert before is not None and before.fits
    planned = _counts(pane)
    emitted: list = []
    pane.plan_changed.connect(lambda *args: emitted.append(args))
    pane.split_editor.boxes[1].setValue(29)  # 29 GB of layers on a 24 GB Mac
    refusal = pane.split_editor.refusal
    assert refusal.isVisible()
    assert refusal.text().startswith("Not applied. That split does not fit: Studio B lacks ")
    assert " GB for 29 layers" in refusal.text()
    assert _counts(pane) == planned and pane.plan() is before and emitted == []
    pane.split_editor.boxes[0].setValue(0)  # a Mac with no layer: the planner's word
    assert "at least one layer" in refusal.text()
    assert _counts(pane) == planned


def test_start_runs_the_edited_split(qtbot: QtBot, demo_model: Path) -> None:
    factory = fake_factory()
    window = MainWindow(demo=True, job_factory=factory)
    qtbot.addWidget(window)
    window.show()
    drop_paths(window.model.drop_zone, demo_model)
    qtbot.waitUntil(lambda: window.model.drop_zone.state == LOADED, timeout=20_000)
    window.model.select_strategy(Strategy.PIPELINE)
    window.model.split_editor.boxes[1].setValue(10)
    assert "Studio A (20 layers) and Studio B (10 layers)" in window.run.status.text()
    window.run.start()
    assert not window.model.split_editor.boxes[0].isEnabled()  # locked while it runs
    qtbot.waitUntil(lambda: window.run.controller.state == RunState.READY, timeout=10_000)
    assert factory.jobs[0].spec.split == [20, 10]
    window.run.stop()
    qtbot.waitUntil(lambda: not window.run.busy, timeout=10_000)
    assert window.model.split_editor.boxes[0].isEnabled()
