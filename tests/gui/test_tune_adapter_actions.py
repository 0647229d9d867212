"""The finished adapter's buttons over the real core (on main since adapterchat): Compare
with base (both answers, as mlx-lm's own gives them), Fuse (a model folder the library
lists), and Chat with the adapter (the Run pane starts the model with it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from core.model.info import read_model_info
from core.run.states import RunState
from gui.main_window import MainWindow
from gui.tune.view import FineTuneView
from tests.gui.tune_helpers import open_tune_view
from tests.helpers.adapters import QUESTION, mlx_lm_answer
from tests.helpers.ctrlc import _ranks, gone

pytestmark = pytest.mark.slow
WAIT_MS = 300_000


@pytest.fixture
def view(qtbot: QtBot, tiny_models) -> FineTuneView:
    return open_tune_view(qtbot, read_model_info(tiny_models["llama"]))


def test_compare_with_base_shows_both_real_answers(
    qtbot: QtBot, view: FineTuneView, tiny_models, tiny_adapter: Path
) -> None:
    model = tiny_models["llama"]
    view.show_adapter("Mochi", model.name, 0.1, None, tiny_adapter)
    panel = view.adapter_panel
    panel.compare_button.click()
    assert panel.note.text() == "Type a question first: both models answer it."
    panel.question.setText(QUESTION)
    view.compare_tokens = 12
    busy: list[bool] = []
    view.running_changed.connect(busy.append)
    panel.compare_button.click()
    assert view.state_badge.text() == "Comparing or fusing" and view.stop_button.isEnabled()
    assert not view.start_button.isEnabled() and not panel.fuse_button.isEnabled()
    qtbot.waitUntil(view.answers.isVisible, timeout=WAIT_MS)
    assert view.answers.texts["base"] == mlx_lm_answer(model, None, QUESTION)[1]
    assert view.answers.texts["adapter"] == mlx_lm_answer(model, tiny_adapter, QUESTION)[1]
    assert view.status.text() == "The answers differ: Mochi changes what the model says."
    assert busy == [True, False]  # the Macs were the comparison's, then free again
    assert panel.fuse_button.isEnabled()


def test_fuse_writes_a_model_folder(
    qtbot: QtBot, view: FineTuneView, tiny_models, tiny_adapter: Path, tmp_path: Path
) -> None:
    view.show_adapter("Mochi", tiny_models["llama"].name, 0.1, None, tiny_adapter)
    view.adapter_panel.fuse_button.click()
    qtbot.waitUntil(lambda: not view.actions.busy, timeout=WAIT_MS)
    note = view.adapter_panel.note.text()
    assert note.startswith("Fused into ") and note.endswith(": the model library lists it.")
    folder = Path(note.removeprefix("Fused into ").removesuffix(": the model library lists it."))
    assert folder.parent == tmp_path / "data" / "models"
    assert read_model_info(folder).layers == read_model_info(tiny_models["llama"]).layers


def test_a_bad_adapter_folder_is_one_line(
    qtbot: QtBot, view: FineTuneView, tiny_models, tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    view.show_adapter("gone", tiny_models["llama"].name, 0.1, None, tmp_path / "empty")
    view.adapter_panel.fuse_button.click()
    qtbot.waitUntil(lambda: not view.actions.busy, timeout=WAIT_MS)
    note = view.adapter_panel.note.text()
    assert "not an adapter folder" in note and "\n" not in note


def test_stop_during_compare_with_base_says_so_and_ends_its_ranks(
    qtbot: QtBot, view: FineTuneView, tiny_models, tiny_adapter: Path
) -> None:
    view.show_adapter("Mochi", tiny_models["llama"].name, 0.1, None, tiny_adapter)
    panel = view.adapter_panel
    panel.question.setText(QUESTION)
    view.compare_tokens = 1500  # long answers: Stop lands while the first still runs
    panel.compare_button.click()
    here = os.getpid()
    qtbot.waitUntil(lambda: bool(_ranks(here)), timeout=WAIT_MS)  # a session's ranks run
    ranks = _ranks(here)
    view.stop_button.click()
    qtbot.waitUntil(lambda: view.status.text() == "Stopped.", timeout=WAIT_MS)
    qtbot.waitUntil(lambda: gone(ranks), timeout=60_000)
    assert not view.answers.isVisible()


def test_chat_with_the_adapter_starts_the_run_pane_with_it(
    qtbot: QtBot, tiny_models, tiny_adapter: Path
) -> None:
    from tests.gui.helpers import drop_paths

    window = MainWindow(demo=True)

    def stop_first(_w: MainWindow) -> None:
        if window.run.busy:
            window.run.stop()
            qtbot.waitUntil(lambda: not window.run.busy, timeout=60_000)

    qtbot.addWidget(window, before_close_func=stop_first)
    window.show()
    window.run.max_tokens.setValue(8)
    assert drop_paths(window.model.drop_zone, tiny_models["llama"])
    qtbot.waitUntil(lambda: window.model.info is not None, timeout=30_000)
    window.model.select_strategy("pipeline")
    tune = window.show_fine_tune()
    view = tune.view
    view.show_adapter("Mochi", tiny_models["llama"].name, 0.1, None, tiny_adapter)
    assert view.adapter_panel.chat_button.isEnabled()
    view.adapter_panel.chat_button.click()
    run = window.run
    assert run.controller.adapter == tiny_adapter
    qtbot.waitUntil(lambda: run.controller.state == RunState.READY, timeout=WAIT_MS)
    applied = run.controller.adapter_applied()  # the session's AdapterPayload
    assert applied is not None and applied.path == tiny_adapter and applied.name == "Mochi"
    run.chat.prompt.setText(QUESTION)
    run.chat.prompt.returnPressed.emit()
    expected = mlx_lm_answer(tiny_models["llama"], tiny_adapter, QUESTION, max_tokens=8)[1]
    qtbot.waitUntil(lambda: expected in run.chat.text(), timeout=WAIT_MS)
    # The adapter applies to the run it started: once stopped, Start runs the plain model.
    run.stop()
    qtbot.waitUntil(lambda: not run.busy, timeout=60_000)
    assert run.controller.adapter is None
