"""The Run pane shows every model the window's API serves (issue 37), driven as a person
on the real demo cluster: Start the demo model with the API on, drop a second (tiny)
model folder on the models panel, see it listed with its Macs and answering, unload it
with one click (its ranks end), and the first model still answers. The Run pane's own
job has no Unload: its Stop ends it."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import httpx
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton
from pytestqt.qtbot import QtBot

from core.run.states import RunState
from gui.main_window import MainWindow
from gui.model.drop_zone import LOADED
from tests.gui.helpers import drop_paths
from tests.helpers.serving import free_port
from tests.helpers.tiny_models import make_tiny_model

pytestmark = pytest.mark.slow
LOAD_TIMEOUT_MS = 180_000
DEMO = "SmolLM2-135M-Instruct-mlx-q4"


def _window(qtbot: QtBot, demo_model: Path) -> MainWindow:
    window = MainWindow(demo=True)

    def stop_first(_w: MainWindow) -> None:
        if window.run.busy:
            window.run.stop()
            qtbot.waitUntil(lambda: not window.run.busy, timeout=60_000)

    qtbot.addWidget(window, before_close_func=stop_first)
    window.show()
    window.run.max_tokens.setValue(8)
    assert drop_paths(window.model.drop_zone, demo_model)
    qtbot.waitUntil(lambda: window.model.drop_zone.state == LOADED, timeout=30_000)
    window.model.select_strategy("pipeline")
    return window


def _post(url: str, model: str, out: list) -> None:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 8,
        "temperature": 0,
    }
    try:
        out.append(httpx.post(f"{url}/chat/completions", json=body, timeout=120))
    except httpx.HTTPError as error:
        out.append(error)


def _ask(qtbot: QtBot, url: str, model: str) -> httpx.Response:
    """An HTTP client on its own thread while the GUI's event loop runs."""
    out: list = []
    threading.Thread(target=_post, args=(url, model, out), daemon=True).start()
    qtbot.waitUntil(lambda: bool(out), timeout=150_000)
    assert isinstance(out[0], httpx.Response), out[0]
    return out[0]


def _row(panel, name: str) -> int:
    return [m["name"] for m in panel.shown].index(name)


def test_a_dropped_model_is_served_beside_the_job_and_unloads_in_one_click(
    qtbot: QtBot, demo_model: Path, tmp_path: Path
) -> None:
    window = _window(qtbot, demo_model)
    run = window.run
    qtbot.mouseClick(run.api_button, Qt.MouseButton.LeftButton)
    api = run.api_panel
    api.port.setValue(free_port())
    api.port.editingFinished.emit()
    api.require_key.setChecked(False)  # this Mac only, no key: the test's client
    api.enabled.setChecked(True)
    qtbot.waitUntil(lambda: run.api.settings.enabled, timeout=10_000)
    panel = run.models_panel
    assert panel.isHidden()  # nothing served yet
    qtbot.mouseClick(run.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: run.api.running, timeout=LOAD_TIMEOUT_MS)
    qtbot.waitUntil(lambda: panel.isVisible() and len(panel.shown) == 1, timeout=30_000)
    first = panel.shown[0]
    assert first["name"] == DEMO and first["state"] == "loaded" and first["pinned"]
    assert panel.table.item(0, 2).text() == "Studio A, Studio B"
    assert panel.table.cellWidget(0, 6) is None  # the job's: its Stop ends it
    url = run.api.address

    tiny = make_tiny_model(tmp_path / "tiny-extra", seed=3)
    assert drop_paths(panel.drop, tiny)
    qtbot.waitUntil(lambda: "tiny-extra loaded" in panel.status.text(), timeout=LOAD_TIMEOUT_MS)
    qtbot.waitUntil(  # the next list (each second) after it loaded
        lambda: [m["state"] for m in panel.shown] == ["loaded", "loaded"], timeout=30_000
    )
    row = _row(panel, "tiny-extra")
    assert panel.table.item(row, 2).text() == "Studio A, Studio B"  # the same cluster's Macs
    assert panel.table.item(row, 3).text() != "—"
    extra = run.api.models.server.registry.entries["tiny-extra"]
    job = extra.session.job
    assert job is not None and job.wait(0) is False
    shots = os.environ.get("MACMESH_LAYOUT_SHOTS")  # the screenshot of two models served
    if shots:
        window.resize(1264, 735)
        qtbot.wait(1500)
        window.grab().save(str(Path(shots) / "run-models-light.png"))
    answered = _ask(qtbot, url, "tiny-extra")
    assert answered.status_code == 200, answered.text
    assert answered.json()["model"] == "tiny-extra"

    button = panel.table.cellWidget(_row(panel, "tiny-extra"), 6)
    assert isinstance(button, QPushButton) and button.text() == "Unload"
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(
        lambda: panel.shown[_row(panel, "tiny-extra")]["state"] == "unloaded", timeout=60_000
    )
    assert job.wait(10)  # its ranks ended
    assert "tiny-extra unloaded" in panel.status.text()
    assert run.controller.state in (RunState.READY, RunState.GENERATING)
    answer = _ask(qtbot, url, DEMO)  # the first model still answers
    assert answer.status_code == 200, answer.text
    assert "Paris" in answer.json()["choices"][0]["message"]["content"]

    qtbot.mouseClick(run.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: run.controller.state == RunState.STOPPED, timeout=60_000)
    qtbot.waitUntil(lambda: panel.isHidden(), timeout=30_000)


def test_a_folder_that_is_no_model_is_one_line_and_loads_nothing(
    qtbot: QtBot, demo_model: Path, tmp_path: Path
) -> None:
    window = _window(qtbot, demo_model)
    run = window.run
    qtbot.mouseClick(run.api_button, Qt.MouseButton.LeftButton)
    api = run.api_panel
    api.port.setValue(free_port())
    api.port.editingFinished.emit()
    api.require_key.setChecked(False)
    api.enabled.setChecked(True)
    qtbot.mouseClick(run.start_button, Qt.MouseButton.LeftButton)
    panel = run.models_panel
    qtbot.waitUntil(lambda: panel.isVisible() and len(panel.shown) == 1, timeout=LOAD_TIMEOUT_MS)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "config.json").write_text("{not json")
    panel.add_folder(tmp_path / "notes")
    qtbot.waitUntil(lambda: panel.status.text().startswith("notes:"), timeout=30_000)
    assert "\n" not in panel.status.text()
    assert len(run.api.models.server.registry.entries) == 1
