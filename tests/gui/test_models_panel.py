"""The served models in the window (issue 37), offscreen over a real server with two tiny
models on the demo: every model listed with its Macs, memory, idle time and requests;
Unload is one click and ends that model's ranks only; a model folder dropped on the panel
loads beside the others when the plan shows it fits; a model that does not fit, and a
folder that is no model, are one line each and load nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, Qt, QUrl
from PySide6.QtWidgets import QPushButton
from pytestqt.qtbot import QtBot

from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.session import Session, simulated_hosts
from core.serve.keys import Gate
from core.serve.models import FOREVER, ModelRegistry, ModelSpec, ServeSettings
from core.serve.models_control import ServedModels
from core.serve.serve_many import ManyServer
from gui.bridge import Bridge
from gui.run.models_panel import ModelsPanel
from tests.helpers.header_models import (
    as_sparse_weights,
    llama_config,
    llama_tensors,
    write_header_only_model,
)
from tests.helpers.serving import free_port
from tests.helpers.tiny_models import make_tiny_model

pytestmark = pytest.mark.slow


def _maker(folder: Path) -> Callable[[], Session]:
    info = read_model_info(folder)
    return lambda: Session(info, simulated_hosts(demo_facts(2)), strategy="pipeline")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ServedModels, dict[str, Path]]]:
    folders = {
        name: make_tiny_model(tmp_path / name, seed=seed)
        for seed, name in enumerate(("tiny-a", "tiny-b", "tiny-c"))
    }
    specs = [ModelSpec(n, _maker(folders[n]), True, FOREVER) for n in ("tiny-a", "tiny-b")]
    registry = ModelRegistry(specs, ServeSettings(Gate(open_=True), lambda line: None, 16))
    server = ManyServer(registry, "127.0.0.1", free_port())
    try:
        assert server.start() == []
        yield ServedModels(server, _maker), folders
    finally:
        server.stop()


def _panel(qtbot: QtBot, models: ServedModels) -> ModelsPanel:
    bridge = Bridge()
    panel = ModelsPanel(models, bridge)
    qtbot.addWidget(panel, before_close_func=lambda _w: (panel.timer.stop(), bridge.close()))
    return panel


def _row(panel: ModelsPanel, name: str) -> int:
    return [m["name"] for m in panel.shown].index(name)


def _drop(panel: ModelsPanel, folder: Path) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(folder))])
    action = panel.drop.drop_action(mime)
    assert action is not None
    action()


def test_the_panel_lists_each_model_with_its_macs_memory_idle_time_and_requests(
    qtbot: QtBot, served
) -> None:
    models, _folders = served
    panel = _panel(qtbot, models)
    qtbot.waitUntil(lambda: len(panel.shown) == 2, timeout=30_000)
    for name in ("tiny-a", "tiny-b"):
        row = _row(panel, name)
        cells = [panel.table.item(row, c).text() for c in range(6)]
        assert cells[0] == name and cells[1] == "loaded"
        assert cells[2] == "Studio A, Studio B" and cells[3] != "—"
        assert cells[4].endswith(" s") and cells[5] == "0"
        assert isinstance(panel.table.cellWidget(row, 6), QPushButton)


def test_unload_is_one_click_and_ends_that_models_ranks_only(qtbot: QtBot, served) -> None:
    models, _folders = served
    registry = models.server.registry
    panel = _panel(qtbot, models)
    qtbot.waitUntil(lambda: len(panel.shown) == 2, timeout=30_000)
    job = registry.entries["tiny-a"].session.job
    button = panel.table.cellWidget(_row(panel, "tiny-a"), 6)
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(
        lambda: panel.shown[_row(panel, "tiny-a")]["state"] == "unloaded", timeout=60_000
    )
    assert job is not None and job.wait(10)  # its ranks ended
    assert registry.entries["tiny-b"].session is not None
    assert registry.entries["tiny-b"].session.job.wait(0) is False  # still running
    assert panel.table.cellWidget(_row(panel, "tiny-a"), 6) is None
    assert "tiny-a unloaded" in panel.status.text()


def test_a_dropped_model_folder_loads_beside_the_others_where_the_plan_shows_it_fits(
    qtbot: QtBot, served, tmp_path: Path
) -> None:
    models, folders = served
    panel = _panel(qtbot, models)
    _drop(panel, folders["tiny-c"])
    qtbot.waitUntil(lambda: "tiny-c loaded" in panel.status.text(), timeout=120_000)
    qtbot.waitUntil(  # a list asked before the load ended may come in first
        lambda: len(panel.shown) == 3 and panel.shown[_row(panel, "tiny-c")]["state"] == "loaded",
        timeout=30_000,
    )
    (tmp_path / "not-a-model").mkdir()
    (tmp_path / "not-a-model" / "notes.txt").write_text("hello")
    _drop(panel, tmp_path / "not-a-model")
    qtbot.waitUntil(lambda: panel.status.text().startswith("not-a-model:"), timeout=30_000)
    assert "\n" not in panel.status.text() and len(models.server.registry.entries) == 3


def test_a_dropped_model_that_does_not_fit_is_one_line_and_loads_nothing(
    qtbot: QtBot, served, tmp_path: Path
) -> None:
    """A Llama of 405B parameters in bfloat16 (810 GB, as sparse files): the demo's two
    Macs cannot hold it beside the loaded models, nor alone."""
    models, _folders = served
    panel = _panel(qtbot, models)
    qtbot.waitUntil(lambda: len(panel.shown) == 2, timeout=30_000)
    config = llama_config(
        layers=126, hidden=16384, heads=128, kv_heads=8, intermediate=53248, vocab=128256
    )
    big = as_sparse_weights(
        write_header_only_model(tmp_path / "too-big", config, llama_tensors(config))
    )
    _drop(panel, big)
    qtbot.waitUntil(lambda: "does not fit" in panel.status.text(), timeout=60_000)
    said = panel.status.text()
    assert said.startswith("too-big does not fit beside the loaded models: ") and "GB" in said
    assert "\n" not in said and "Traceback" not in said
    assert sorted(models.server.registry.entries) == ["tiny-a", "tiny-b"]
    qtbot.waitUntil(lambda: len(panel.shown) == 2, timeout=30_000)
