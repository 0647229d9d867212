"""The Model pane: drop a folder, see what it is or why it cannot be used, compare
strategies, see memory per node."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from core.model.info import ModelInfo, read_model_info
from core.run.demo import demo_nodes
from gui.bridge import Bridge
from gui.model import pane as model_pane
from gui.model.drop_zone import BUSY, ERROR, LOADED
from gui.model.pane import ModelPane
from tests.gui.helpers import broken_model, drop_paths


@pytest.fixture
def pane(qtbot: QtBot) -> ModelPane:
    bridge = Bridge()
    pane = ModelPane(bridge)
    qtbot.addWidget(pane, before_close_func=lambda _w: bridge.close())
    pane.resize(440, 760)
    pane.show()
    return pane


def _loaded(pane: ModelPane) -> bool:
    return pane.drop_zone.state == LOADED


def test_dropping_a_model_folder_shows_its_facts(
    qtbot: QtBot, pane: ModelPane, tiny_models: dict[str, Path]
) -> None:
    folder = tiny_models["llama"]
    with qtbot.waitSignal(pane.model_changed, timeout=20_000) as changed:
        assert drop_paths(pane.drop_zone, folder)
    assert changed.args == [str(folder)]
    assert _loaded(pane)
    facts = pane.drop_zone.facts.text()
    assert folder.name in facts
    assert "Architecture: llama" in facts
    assert "Layers: 4" in facts
    assert "Attention heads: 4 (2 KV)" in facts
    assert pane.info is not None and pane.info.layers == 4


def test_a_dropped_file_inside_a_model_folder_means_the_folder(
    qtbot: QtBot, pane: ModelPane, tiny_models: dict[str, Path]
) -> None:
    folder = tiny_models["qwen3"]
    with qtbot.waitSignal(pane.model_changed, timeout=20_000) as changed:
        drop_paths(pane, folder / "config.json")  # anywhere on the pane, a file in it
    assert changed.args == [str(folder)]


@pytest.mark.parametrize(
    "config, expected",
    [
        ("{ not json", "is not valid JSON"),
        ('{"model_type": "llama"}', "no weight files"),
        (None, "no config.json"),
        ('{"model_type": ["llama"]}', "config.json: model_type must be"),
        ("[" * 100_000 + "]" * 100_000, "config.json is nested too deep"),
    ],
    ids=["not-json", "no-weights", "no-config", "model-type-list", "deep"],
)
def test_a_broken_folder_says_why_and_the_pane_stays_usable(
    qtbot: QtBot,
    pane: ModelPane,
    tmp_path: Path,
    tiny_models: dict[str, Path],
    config: str | None,
    expected: str,
) -> None:
    folder = broken_model(tmp_path / "broken", config) if config else tmp_path
    drop_paths(pane.drop_zone, folder)
    qtbot.waitUntil(lambda: pane.drop_zone.state == ERROR, timeout=20_000)
    assert expected in pane.drop_zone.error_text.text()
    assert "\n" not in pane.drop_zone.error_text.text()  # one line, whatever the file holds
    assert pane.drop_zone.error_title.text() == "Not a usable model"
    assert pane.info is None and pane.plan() is None
    with qtbot.waitSignal(pane.model_changed, timeout=20_000):
        drop_paths(pane.drop_zone, tiny_models["llama"])
    assert _loaded(pane)


def test_non_local_drops_other_than_hugging_face_links_are_refused(pane: ModelPane) -> None:
    from PySide6.QtCore import QMimeData, QPoint, Qt, QUrl
    from PySide6.QtGui import QDragEnterEvent
    from PySide6.QtWidgets import QApplication

    mime = QMimeData()
    mime.setUrls([QUrl("https://example.com/mlx-community/model")])
    enter = QDragEnterEvent(
        QPoint(5, 5),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(pane.drop_zone, enter)
    assert not enter.isAccepted()


def test_a_stale_result_is_dropped(
    qtbot: QtBot,
    pane: ModelPane,
    tmp_path: Path,
    tiny_models: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken, llama = broken_model(tmp_path / "broken"), tiny_models["llama"]
    newer_shown = threading.Event()

    def read_broken_last(folder: Path) -> ModelInfo:
        if folder == broken:  # the first folder's answer comes after the second's
            assert newer_shown.wait(30), "the newer model was never shown"
        return read_model_info(folder)

    monkeypatch.setattr(model_pane, "read_model_info", read_broken_last)
    failures: list[Path | None] = []
    show_failure = pane._failed
    monkeypatch.setattr(
        pane, "_failed", lambda g, folder, e: (failures.append(folder), show_failure(g, folder, e))
    )
    try:
        pane.load(broken)
        pane.load(llama)  # the person changed their mind at once
        qtbot.waitUntil(lambda: _loaded(pane), timeout=20_000)
    finally:
        newer_shown.set()
    qtbot.waitUntil(lambda: failures == [broken], timeout=20_000)  # the stale one, last
    assert _loaded(pane)
    assert pane.info is not None and pane.info.path == llama


def test_tensor_on_two_demo_nodes_is_refused_with_the_reason(
    qtbot: QtBot, pane: ModelPane, demo_model: Path
) -> None:
    pane.set_nodes(demo_nodes(2))
    with qtbot.waitSignal(pane.model_changed, timeout=20_000):
        pane.load(demo_model)
    tensor = pane.chooser.options["tensor"]
    assert not tensor.works and not tensor.radio.isEnabled()
    assert tensor.badge.text() == "Not possible"
    assert "9 attention heads" in tensor.reason.text()
    assert "do not divide by 2 nodes" in tensor.reason.text()
    pipeline = pane.chooser.options["pipeline"]
    assert pipeline.works and pipeline.badge.text() == "Fits"
    with qtbot.waitSignal(pane.plan_changed) as changed:
        pane.select_strategy("tensor")  # e.g. remembered from a 3-Mac session
    _info, plan = changed.args
    assert plan.verdict == "invalid" and "divide by 2 nodes" in plan.reason
    assert pane.bars.bars == []
    pane.set_nodes(demo_nodes(3))  # 9 heads divide by 3
    assert pane.chooser.options["tensor"].works
    assert pane.plan().verdict == "fits"


def test_memory_bars_show_planned_use_against_usable(
    qtbot: QtBot, pane: ModelPane, demo_model: Path
) -> None:
    pane.set_nodes(demo_nodes(2))
    pane.select_strategy("pipeline")
    with qtbot.waitSignal(pane.model_changed, timeout=20_000):
        pane.load(demo_model)
    plan = pane.plan()
    bars = {bar.node: bar for bar in pane.bars.bars}
    assert set(bars) == {"Studio A", "Studio B"}
    for rank in plan.ranks:
        assert bars[rank.node].need == rank.need_bytes
        assert bars[rank.node].usable == rank.usable_bytes
    assert "of 68.4 GB" in bars["Studio A"].text
    pane.select_strategy("auto")  # one Mac: the other is not used
    bars = {bar.node: bar for bar in pane.bars.bars}
    assert bars["Studio B"].need is None and "not used" in bars["Studio B"].text


def test_the_demo_model_button(
    qtbot: QtBot, pane: ModelPane, demo_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(demo_model.parents[1]))
    with qtbot.waitSignal(pane.model_changed, timeout=60_000) as changed:
        pane.drop_zone.demo_requested.emit()
        assert pane.drop_zone.state == BUSY
    assert changed.args == [str(demo_model)]


def test_locking_while_a_job_runs(pane: ModelPane) -> None:
    pane.set_locked(True)
    assert not pane.acceptDrops() and not pane.drop_zone.acceptDrops()
    assert not pane.chooser.options["auto"].isEnabled()
    pane.set_locked(False)
    assert pane.acceptDrops()


def test_the_batch_and_prompt_cache_are_planned_as_chosen(
    qtbot: QtBot, pane: ModelPane, demo_model: Path
) -> None:
    """Requests at once and the prompt cache take memory on every Mac: a change re-plans
    at once, and a prompt cache that overfills the Macs is named as what does not fit."""
    from core.settings import MAX_PROMPT_CACHE_MB
    from core.units import MIB

    pane.set_nodes(demo_nodes(2))
    pane.select_strategy("pipeline")
    with qtbot.waitSignal(pane.model_changed, timeout=20_000):
        pane.load(demo_model)
    assert pane.serving.isVisible()
    assert (pane.plan().options.batch, pane.plan().options.prompt_cache_bytes) == (8, 256 * MIB)
    with qtbot.waitSignal(pane.serving.serving_changed) as changed:
        pane.serving.batch.setValue(3)
    assert changed.args[0].batch == 3
    assert pane.plan().options.batch == 3 and pane.plan().fits
    pane.serving.cache.setValue(MAX_PROMPT_CACHE_MB)  # a terabyte on each Mac
    plan = pane.plan()
    assert not plan.fits and "The prompt cache is what does not fit" in plan.reason
    assert pane.chooser.options["pipeline"].badge.text() == "Doesn't fit"
    pane.serving.cache.setValue(0)
    assert pane.serving.cache.text() == "Off"
    assert pane.plan().fits and pane.plan().options.prompt_cache_bytes == 0
    pane.set_locked(True)
    assert not pane.serving.batch.isEnabled() and not pane.serving.cache.isEnabled()
    pane.set_locked(False)
    assert pane.serving.batch.isEnabled()


def test_each_strategy_shows_its_estimate_before_start(
    qtbot: QtBot, pane: ModelPane, demo_model: Path
) -> None:
    """The demo Macs name real chips: every choice shows its speed estimate (with its
    band) on them, the same figure `macmesh plan` gives, and auto's reason says why."""
    from core.plan.choose import plan_by_speed
    from core.run.planning import chat_options, estimate_on, planner_node, rdma_mesh

    nodes = demo_nodes(3)
    pane.set_nodes(nodes)
    with qtbot.waitSignal(pane.model_changed, timeout=20_000):
        pane.load(demo_model)
    facts = [n.facts for n in nodes if n.facts is not None]
    plans = pane.plans()
    assert plans is not None
    for choice in ("auto", "pipeline", "tensor"):
        option = pane.chooser.options[choice]
        estimate = estimate_on(pane.info, plans[choice], facts)
        assert option.estimate.isVisible()
        # Batch 1 and the aggregate at the planned batch, as `macmesh plan` words them.
        assert option.estimate.text() == f"Estimate on the real Macs: {estimate.figures_text()}"
        assert estimate.batch == pane.serving.selected().batch
        assert estimate.batch == 1 or " at once: " in option.estimate.text()
        assert option.estimate.toolTip() == estimate.basis()
    planner_nodes = [planner_node(f) for f in facts]
    options = chat_options("auto", serving=pane.serving.selected())
    chosen = plan_by_speed(pane.info, planner_nodes, rdma_mesh(planner_nodes), options).plan
    assert plans["auto"].strategy == chosen.strategy
    assert plans["auto"].reason == chosen.reason
    assert plans["auto"].reason.startswith(f"{chosen.strategy.value}: ")
