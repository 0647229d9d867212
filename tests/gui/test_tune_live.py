"""The Fine-tune view driving real fine-tunes (``core.run.tasks.finetune.FineTune``) of the demo
model on the 2-node demo cluster (ranks as processes here): to a finished adapter, Stop
keeping the last checkpoint, a refusal from ``FineTune.start`` as one line, and closing
the window mid-training leaving no rank."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from core.model.info import ModelInfo, read_model_info
from core.run.states import RunState
from core.tune.settings import TuneSettings
from gui.tune.view import FineTuneView
from tests.gui.helpers import drop_paths
from tests.gui.tune_helpers import chat_line, good_lines, open_tune_view
from tests.helpers.jobs import assert_no_ranks_left

TRAIN_MS = 600_000  # two ranks training on two shared cores
# A few steps on a few layers: minutes on two busy cores, still a real mlx-lm LoRA run.
TINY = TuneSettings(
    iters=8,
    batch_size=2,
    steps_per_eval=4,
    steps_per_save=4,
    val_batches=2,
    lora_layers=2,
    max_seq_length=96,
)


@pytest.fixture(scope="module")
def demo_info(demo_model: Path) -> ModelInfo:
    return read_model_info(demo_model)


@pytest.fixture
def view(qtbot: QtBot, demo_info: ModelInfo) -> FineTuneView:
    return open_tune_view(qtbot, demo_info)


@pytest.mark.slow
def test_a_real_fine_tune_from_the_view_ends_with_an_adapter(
    qtbot: QtBot, view: FineTuneView, tmp_path: Path
) -> None:
    view.use_demo_data()
    qtbot.waitUntil(lambda: view.data is not None, timeout=20_000)
    assert view.adapter_panel.question.text() == "What is the name of MacMesh's mascot?"
    from core.tune.data import DEMO_DATA, read_data

    demo = read_data(DEMO_DATA)  # read again here: the view shows the same counts
    counts = f"Chat (messages) · {demo.train} training examples · {demo.valid} for validation"
    assert demo.valid and view.data_box.detail.text() == counts
    view.form.set_settings(TINY)
    states: list[str] = []
    view.controller.state_changed.connect(lambda state, _detail: states.append(state))
    with qtbot.waitSignal(view.controller.finished, timeout=TRAIN_MS) as finished:
        view.start_button.click()
        qtbot.waitUntil(lambda: view.plot.train.size >= 2, timeout=TRAIN_MS)
        assert view.state_badge.text() == "Training"
        assert view.progress.text().startswith("Iteration ")
        assert view.eta.text().startswith("About ")
        assert not view.start_button.isEnabled() and view.stop_button.isEnabled()
        assert not view.form.inputs["iters"].isEnabled()  # the settings are the run's
    adapter = finished.args[0]
    qtbot.waitUntil(lambda: not view.controller.active, timeout=60_000)
    assert adapter is not None and not adapter.stopped
    assert adapter.path.is_relative_to(tmp_path / "data")
    assert (adapter.path / "adapters.safetensors").is_file()
    assert view.plot.train.size == TINY.iters
    assert list(view.plot.train.column(0)) == [float(i) for i in range(1, TINY.iters + 1)]
    assert view.plot.valid.size >= 2
    panel = view.adapter_panel
    assert panel.isVisible() and panel.name.text() == adapter.name
    assert panel.facts["Base model"].text() == adapter.base_model
    assert panel.facts["Train loss"].text() == f"{adapter.train_loss:.3f}"
    assert panel.facts["Folder"].text() == str(adapter.path)
    assert view.status.text() == f"Done: the adapter {adapter.name} is saved."
    assert [b.node for b in view.bars.bars] == ["Studio A", "Studio B"]
    assert all(b.need and b.need > 0 for b in view.bars.bars)
    assert states[0] == RunState.CHECKING and states[-1] == RunState.STOPPED
    assert view.start_button.isEnabled() and view.form.inputs["iters"].isEnabled()
    assert_no_ranks_left(view.controller.tune.session.job)


def _train_until_a_checkpoint(qtbot: QtBot, view: FineTuneView) -> None:
    """A long fine-tune of the demo set, started from the view, past its first
    checkpoint (saved every 2 steps)."""
    view.use_demo_data()
    qtbot.waitUntil(lambda: view.data is not None, timeout=20_000)
    view.form.set_settings(TuneSettings(**{**TINY.to_dict(), "iters": 400, "steps_per_save": 2}))
    checkpoints: list[int] = []
    view.controller.checkpoint.connect(lambda it, _path: checkpoints.append(it))
    view.start_button.click()
    qtbot.waitUntil(lambda: bool(checkpoints), timeout=TRAIN_MS)


@pytest.mark.slow
def test_stop_keeps_the_last_checkpoint_as_the_adapter(qtbot: QtBot, view: FineTuneView) -> None:
    _train_until_a_checkpoint(qtbot, view)
    with qtbot.waitSignal(view.controller.finished, timeout=TRAIN_MS) as finished:
        view.stop_button.click()
        assert view.state_badge.text() == "Stopping"
        assert "last checkpoint is kept" in view.status.text()
    adapter = finished.args[0]
    qtbot.waitUntil(lambda: not view.controller.active, timeout=60_000)
    assert adapter is not None and adapter.stopped
    assert adapter.iterations < 400
    assert view.adapter_panel.stopped.isVisible()
    assert (
        view.status.text() == f"Stopped: the last checkpoint is kept as the adapter {adapter.name}."
    )
    assert_no_ranks_left(view.controller.tune.session.job)


def test_a_refusal_from_start_is_one_line(qtbot: QtBot, view: FineTuneView, tmp_path: Path) -> None:
    data = tmp_path / "sums.jsonl"
    data.write_text("\n".join(good_lines(40)) + "\n")
    view.load_data(data)
    qtbot.waitUntil(lambda: view.data is not None, timeout=20_000)
    data.write_text(chat_line("a", "b") + "\n{broken\n")  # changed after it was read
    view.form.set_settings(TINY)
    with qtbot.waitSignal(view.controller.start_failed, timeout=60_000) as failed:
        assert view.start()
    message = failed.args[0]
    assert "\n" not in message and "line 2" in message
    assert view.error.isVisible() and view.error.text() == message
    assert view.state_badge.text() == "Not started"
    assert view.start_button.isEnabled()


@pytest.mark.slow
def test_closing_the_window_mid_training_leaves_no_rank(
    qtbot: QtBot, demo_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gui.main_window import MainWindow

    monkeypatch.setenv("MACMESH_DATA_DIR", str(tmp_path / "data"))
    window = MainWindow(demo=True)
    qtbot.addWidget(window)
    window.show()
    assert drop_paths(window.model.drop_zone, demo_model)
    qtbot.waitUntil(lambda: window.model.info is not None, timeout=30_000)
    view = window.show_fine_tune().view
    view.use_demo_data()
    qtbot.waitUntil(lambda: view.data is not None, timeout=20_000)
    view.form.set_settings(TuneSettings(**{**TINY.to_dict(), "iters": 400}))
    view.start_button.click()
    qtbot.waitUntil(lambda: view.plot.train.size >= 1, timeout=TRAIN_MS)
    job = view.controller.tune.session.job
    window.close()
    assert not view.controller.active
    assert_no_ranks_left(job)


@pytest.mark.slow
def test_a_rank_killed_mid_training_fails_with_its_node_and_keeps_the_checkpoint(
    qtbot: QtBot, view: FineTuneView
) -> None:
    import os
    import signal

    _train_until_a_checkpoint(qtbot, view)
    job = view.controller.tune.session.job
    with qtbot.waitSignal(view.controller.finished, timeout=TRAIN_MS) as finished:
        os.kill(job.ranks[1].pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: view.controller.state == RunState.FAILED, timeout=60_000)
    assert view.state_badge.text() == "Failed"
    assert "Studio B" in view.status.text() and "\n" not in view.status.text()
    adapter = finished.args[0]
    assert adapter is not None and adapter.stopped  # the last checkpoint is kept
    assert view.adapter_panel.isVisible() and view.adapter_panel.stopped.isVisible()
    assert view.start_button.isEnabled()
    assert_no_ranks_left(job)
