"""The Fine-tune view over the real ``core.tune``: dropped data read by
``core.tune.data`` (format, counts, the split offered, bad lines by their numbers) and,
before a Start, each Mac's memory from ``core.tune.fit``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from core.model.info import ModelInfo, read_model_info
from core.tune.settings import TuneSettings
from gui.tune.view import FineTuneView
from tests.gui.helpers import drop_paths
from tests.gui.tune_helpers import good_lines, open_tune_view


@pytest.fixture(scope="module")
def demo_info(demo_model: Path) -> ModelInfo:
    return read_model_info(demo_model)


@pytest.fixture
def view(qtbot: QtBot, demo_info: ModelInfo) -> FineTuneView:
    return open_tune_view(qtbot, demo_info)


def test_a_dropped_folder_shows_its_bad_lines_by_number(
    qtbot: QtBot, view: FineTuneView, tmp_path: Path
) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    lines = good_lines(12)
    lines[2] = "{not json"
    lines[6] = json.dumps({"messages": [{"role": "robot", "content": "beep"}]})
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n")
    assert drop_paths(view.data_box, folder)
    qtbot.waitUntil(lambda: view.data_box.state == "refused", timeout=20_000)
    shown = view.data_box.detail.text() + "\n" + view.data_box.problems.text()
    assert "train.jsonl line 3" in shown and "train.jsonl line 7" in shown
    assert view.data is None and not view.start_button.isEnabled()


def test_a_dropped_jsonl_shows_format_counts_and_the_split(
    qtbot: QtBot, view: FineTuneView, tmp_path: Path
) -> None:
    data = tmp_path / "sums.jsonl"
    data.write_text("\n".join(good_lines(40)) + "\n")
    assert drop_paths(view.data_box, data)
    qtbot.waitUntil(lambda: view.data is not None, timeout=20_000)
    box = view.data_box
    assert box.title.text() == "sums.jsonl"
    assert box.detail.text() == "Chat (messages) · 40 training examples"
    assert box.split.isVisible()
    train, held = view.data.split_sizes(0.1, 4)
    assert box.split.text() == (
        f"No validation file: {held} of the 40 examples are set aside to measure the "
        f"validation loss; {train} train."
    )
    assert view.start_button.isEnabled()


def test_before_start_the_bars_show_what_each_mac_needs(view: FineTuneView) -> None:
    from core.tune.fit import training_fit

    fit = training_fit(view.info, TuneSettings(), view.inputs.facts)
    assert [(b.node, b.need, b.usable) for b in view.bars.bars] == [
        (n.name, n.need_bytes, n.usable_bytes) for n in fit.nodes
    ]
    assert view.fit_line.isVisible() and view.fit_line.text() == fit.message
    assert view.memory.title.text().startswith("MEMORY PER MAC · PLANNED")
    view.form.inputs["max_seq_length"].setValue(65536)
    view.form.inputs["batch_size"].setValue(512)
    assert view.fit_line.text().startswith("Does not fit on Studio B")
    assert view.fit_line.property("role") == "error-text"
