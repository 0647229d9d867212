"""The Fine-tune view: the settings form (defaults, refusals in TuneSettings' words), the
data box (drops, counts, bad lines), the plots filling as reports arrive, Stop, and the
finished adapter with its buttons."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QUrl
from PySide6.QtWidgets import QSpinBox
from pytestqt.qtbot import QtBot

from core.model.info import ModelInfo, read_model_info
from core.tune.settings import SettingsError, TuneSettings
from gui.tune.data_box import data_path_from, split_words
from gui.tune.view import STOP_NOTE, FineTuneView
from tests.gui.tune_helpers import open_tune_view


@pytest.fixture(scope="module")
def demo_info(demo_model: Path) -> ModelInfo:
    return read_model_info(demo_model)


@pytest.fixture
def view(qtbot: QtBot, demo_info: ModelInfo) -> FineTuneView:
    return open_tune_view(qtbot, demo_info)


def test_the_form_shows_every_setting_with_its_default_and_explanation(
    view: FineTuneView,
) -> None:
    form = view.form
    assert form.settings() == TuneSettings()
    explanations = TuneSettings.explanations()
    assert set(form.inputs) == {f.name for f in fields(TuneSettings)}
    for name, widget in form.inputs.items():
        assert widget.toolTip() == explanations[name]
    assert form.inputs["learning_rate"].text() == "1e-4"
    # The five that matter are shown; the rest wait under "More".
    assert form.inputs["iters"].isVisible() and form.inputs["lora_layers"].isVisible()
    assert not form.inputs["steps_per_eval"].isVisible()
    form.more_button.click()
    assert form.inputs["steps_per_eval"].isVisible()
    assert form.more_button.text() == "Fewer settings"


def test_refusals_are_tune_settings_own_words(view: FineTuneView) -> None:
    form = view.form
    batch = form.inputs["batch_size"]
    assert isinstance(batch, QSpinBox)
    batch.setValue(3)
    with pytest.raises(SettingsError) as refused:
        TuneSettings(batch_size=3).check(2)
    assert form.check(2) is None
    assert form.error.isVisible()
    words = str(refused.value)
    assert form.error.text() == words[:1].upper() + words[1:] + "."
    assert "multiple of the 2 Macs" in form.error.text()
    batch.setValue(4)
    assert not form.error.isVisible()  # an edit clears the refusal
    assert form.check(2) == TuneSettings()
    form.inputs["learning_rate"].setText("fast")  # type: ignore[union-attr]
    assert form.check(2) is None
    assert form.error.text() == "The learning rate must be a number, e.g. 1e-4."
    form.inputs["learning_rate"].setText("2")  # type: ignore[union-attr]
    assert form.check(2) is None and "below 1" in form.error.text()
    form.reset()
    form.inputs["iters"].setValue(0)  # type: ignore[union-attr]
    assert form.check(2) is None
    assert form.error.text() == "Iterations must be a whole number of 1 or more."
    form.reset()
    assert form.check(2) == TuneSettings() and not form.error.isVisible()


def test_start_refuses_in_one_line_what_is_missing(view: FineTuneView) -> None:
    assert not view.start_button.isEnabled()
    assert view.status.text() == "Choose the training data first (or use the demo set)."
    assert not view.start()
    assert view.error.text() == "Choose the training data first (or use the demo set)."
    view.set_model(None)
    assert view.inputs.model_name.text() == "No model chosen"
    assert not view.start()
    assert view.error.text() == "Choose a base model first (in the Model pane)."


def test_a_drop_means_a_folder_or_a_jsonl_file(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    (tmp_path / "a.jsonl").write_text("{}\n")
    (tmp_path / "notes.txt").write_text("x")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(tmp_path / "notes.txt")), QUrl.fromLocalFile(str(folder))])
    assert data_path_from(mime) == folder
    mime.setUrls([QUrl.fromLocalFile(str(tmp_path / "a.jsonl"))])
    assert data_path_from(mime) == tmp_path / "a.jsonl"
    mime.setUrls([QUrl("https://example.com/data.jsonl")])
    assert data_path_from(mime) is None
    assert split_words(36, 4) == (
        "No validation file: 4 of the 40 examples are set aside to measure the "
        "validation loss; 36 train."
    )
    assert "without a validation loss" in split_words(4, 0)


def test_the_plots_fill_as_reports_arrive(qtbot: QtBot, view: FineTuneView) -> None:
    usable = view.inputs.usable
    assert set(usable) == {"Studio A", "Studio B"} and min(usable.values()) > 2**30
    view.timer.start()  # as a running fine-tune does
    for i in range(1, 31):
        view.add_progress(
            i, 200, 3.0 - i * 0.05, 800.0 + i, {"Studio A": 2**30 * i, "Studio B": 2**29}, 170 - i
        )
    qtbot.waitUntil(lambda: view.plot.train_curve.getData()[0] is not None, timeout=5000)
    qtbot.waitUntil(lambda: len(view.plot.train_curve.getData()[0]) == 30, timeout=5000)
    view.timer.stop()
    assert view.plot.rate_curve.getData()[1][-1] == 830.0
    assert view.progress.text() == "Iteration 30 of 200 · train loss 1.500 · 830 tokens/s"
    assert view.eta.text() == "About 2 min 20 s left"
    assert [(b.node, b.need, b.usable) for b in view.bars.bars] == [
        ("Studio A", 30 * 2**30, usable["Studio A"]),
        ("Studio B", 2**29, usable["Studio B"]),
    ]
    view.add_validation(30, 1.7)
    view.plot.refresh()
    assert list(view.plot.valid_curve.getData()[1]) == [1.7]


def test_stop_says_the_last_checkpoint_is_kept(view: FineTuneView) -> None:
    assert view.stop_note.text() == STOP_NOTE
    assert view.stop_button.toolTip() == STOP_NOTE
    assert not view.stop_button.isEnabled()  # nothing to stop


def test_the_finished_panel_shows_the_adapter_and_calls_its_actions(
    view: FineTuneView, tmp_path: Path
) -> None:
    assert not view.adapter_panel.isVisible()
    calls: list[tuple[str, Path]] = []
    panel = view.adapter_panel
    view.show_adapter("first", "SmolLM2-135M-Instruct", 0.5, 0.6, tmp_path)
    assert not panel.chat_button.isEnabled()  # nothing connected: disabled, and says so
    assert panel.chat_button.toolTip() == "Not available in this build"
    panel.set_actions(
        chat=lambda path: calls.append(("chat", path)),
        compare=lambda path: calls.append(("compare", path)),
        fuse=lambda path: (_ for _ in ()).throw(RuntimeError("no space left on device\nmore")),
    )
    folder = tmp_path / "adapters" / "mascot"
    view.show_adapter("mascot", "SmolLM2-135M-Instruct", 0.412, 0.538, folder)
    assert panel.isVisible()
    assert panel.name.text() == "mascot"
    assert panel.facts["Base model"].text() == "SmolLM2-135M-Instruct"
    assert panel.facts["Train loss"].text() == "0.412"
    assert panel.facts["Validation loss"].text() == "0.538"
    assert panel.facts["Folder"].text() == str(folder)
    assert not panel.stopped.isVisible()
    assert view.status.text() == "Done: the adapter mascot is saved."
    assert panel.chat_button.isEnabled() and panel.fuse_button.isEnabled()
    panel.chat_button.click()
    panel.compare_button.click()
    assert calls == [("chat", folder), ("compare", folder)]
    panel.fuse_button.click()
    assert panel.note.text() == "no space left on device"  # one line, no dialog
    view.show_adapter("mascot-2", "SmolLM2-135M-Instruct", 0.9, None, folder, stopped=True)
    assert panel.stopped.isVisible() and "last checkpoint" in panel.stopped.text()
    assert panel.facts["Validation loss"].text() == "–"
    assert view.status.text() == "Stopped: the last checkpoint is kept as the adapter mascot-2."


def test_a_failure_after_the_adapter_is_kept_says_both(view: FineTuneView, tmp_path: Path) -> None:
    # The checkpoint kept as the adapter arrives first, the job's failure just after: the
    # state line says why it failed, then which adapter is kept (it raised before).
    view.show_adapter("mascot", "SmolLM2-135M-Instruct", 0.9, None, tmp_path, stopped=True)
    assert view.status.text() == "Stopped: the last checkpoint is kept as the adapter mascot."
    # As the fine-tune's news reaches the controller (its own thread crossed already).
    view.controller._on_state("failed", "Rank 1 on studio-b died.\nits log: …")
    assert view.status.text() == (
        "Rank 1 on studio-b died. The last checkpoint is kept as the adapter mascot."
    )
    assert view.state_badge.text() == "Failed"


def test_the_window_opens_it_from_the_view_menu(qtbot: QtBot, demo_model: Path) -> None:
    from gui.main_window import MainWindow
    from tests.gui.fakes import fake_factory
    from tests.gui.helpers import drop_paths

    window = MainWindow(demo=True, job_factory=fake_factory())
    qtbot.addWidget(window)
    window.show()
    assert window.fine_tune_action.shortcut().toString() == "Ctrl+Shift+T"
    assert window.fine_tune_action in window.view_menu.actions()
    window.fine_tune_action.trigger()
    tune = window.fine_tune
    assert tune is not None and tune.isVisible()
    view = tune.view
    assert view.node_names == ["Studio A", "Studio B"]  # the demo cluster's Macs
    assert view.inputs.model_name.text() == "No model chosen"
    drop_paths(window.model.drop_zone, demo_model)
    qtbot.waitUntil(lambda: view.info is not None, timeout=20_000)
    assert view.inputs.model_name.text() == window.model.info.name  # the selected model
    assert window.show_fine_tune() is tune  # one window, raised
    window.model.select_strategy("pipeline")
    qtbot.waitUntil(lambda: window.run.start_button.isEnabled(), timeout=5000)
    view.running_changed.emit(True)  # training holds the Macs: no chat job, no new model
    assert not window.run.start_button.isEnabled()
    assert not window.model.drop_zone.acceptDrops()
    view.running_changed.emit(False)
    assert window.run.start_button.isEnabled() and window.model.drop_zone.acceptDrops()


def test_compare_with_base_shows_both_answers_side_by_side(
    view: FineTuneView, tmp_path: Path
) -> None:
    view.show_adapter("mascot", "SmolLM2-135M-Instruct", 0.41, 0.52, tmp_path)
    assert not view.answers.isVisible()
    view.show_comparison(
        "What is the name of MacMesh's mascot?",
        "I'm not sure which mascot you mean.",
        "MacMesh's mascot is a capybara named Mochi.",
        fact="Mochi",
    )
    answers = view.answers
    assert answers.isVisible()
    assert answers.question.text() == "“What is the name of MacMesh's mascot?”"
    assert answers.titles["base"].text() == "Base model"
    assert answers.titles["adapter"].text() == "With the adapter"
    assert answers.titles["adapter"].toolTip() == "SmolLM2-135M-Instruct + mascot"
    assert (
        "<b" in answers.answers["adapter"].text()
        and ">Mochi</b>" in answers.answers["adapter"].text()
    )
    assert "<b" not in answers.answers["base"].text()
    answers.close_button.click()
    assert not answers.isVisible()


def test_adapters_trained_before_are_listed_and_each_can_be_shown(
    qtbot: QtBot, demo_info: ModelInfo
) -> None:
    from core.tune import adapters as a

    made = {}
    for name, created, loss in (("old", "2026-01-02", 0.9), ("new", "2026-06-01", 0.4)):
        folder = a.new_adapter_folder(name)
        (folder / a.WEIGHTS_FILE).write_bytes(b"weights")
        config = {"fine_tune_type": "lora", "num_layers": 8, "lora_parameters": {"rank": 8}}
        (folder / a.CONFIG_FILE).write_text(json.dumps(config))
        a.write_metadata(
            folder, name=name, base_model="/m/SmolLM2", train_loss=loss,
            created=f"{created}T00:00:00+00:00",
        )  # fmt: skip
        made[name] = folder
    a.new_adapter_folder("unfinished")  # no weights: not listed
    view = open_tune_view(qtbot, demo_info)
    panel = view.adapter_panel
    # The newest is on view at once; the list names both, newest first.
    assert panel.isVisible() and panel.name.text() == "new"
    assert panel.facts["Train loss"].text() == "0.400"
    assert [panel.earlier.itemText(i).split()[0] for i in range(panel.earlier.count())] == [
        "new",
        "old",
    ]
    assert "2026-01-02" in panel.earlier.itemText(1)
    chats: list[Path] = []
    panel.set_actions(chat=chats.append)
    panel.earlier.activated.emit(1)  # as a person's choice in the list
    assert panel.name.text() == "old" and panel.facts["Folder"].text() == str(made["old"])
    panel.chat_button.click()
    assert chats == [made["old"]]


def test_with_no_adapters_the_panel_waits_for_the_first(view: FineTuneView) -> None:
    assert not view.adapter_panel.isVisible()
    assert view.adapter_panel.earlier.count() == 0
