"""The whole window: panes wired together, remembered choices, geometry, closing."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QByteArray, QSettings, Qt
from pytestqt.qtbot import QtBot

from core.run.states import RunState
from core.settings import MODEL_SOURCES, Settings, load_settings
from gui.main_window import MainWindow
from gui.model.drop_zone import LOADED
from gui.preferences import Preferences
from tests.gui.fakes import fake_factory
from tests.gui.helpers import drop_paths


def _window(
    qtbot: QtBot, demo: bool = True, settings: Settings | None = None, factory=None
) -> MainWindow:
    prefs = Preferences(settings) if settings is not None else None
    window = MainWindow(prefs, demo=demo, job_factory=factory or fake_factory())
    qtbot.addWidget(window)
    window.show()
    return window


def _loaded(window: MainWindow) -> bool:
    return window.model.drop_zone.state == LOADED


def test_without_demo_the_cluster_offers_it(qtbot: QtBot) -> None:
    window = _window(qtbot, demo=False)
    assert window.cluster.nodes() == []
    assert window.cluster.demo_button.isVisible()
    assert window.run.status.text() == "Choose a model to start."
    window.cluster.demo_button.click()
    assert [n.name for n in window.cluster.nodes()] == ["Studio A", "Studio B"]


def test_tensor_on_two_demo_nodes_is_refused_at_start(qtbot: QtBot, demo_model: Path) -> None:
    window = _window(qtbot)
    drop_paths(window.model.drop_zone, demo_model)
    qtbot.waitUntil(lambda: _loaded(window), timeout=20_000)
    window.model.chooser.options["tensor"].radio.setChecked(True)
    assert not window.run.start_button.isEnabled()
    assert "9 attention heads and 3 KV heads do not divide by 2 nodes" in window.run.status.text()
    window.model.select_strategy("pipeline")
    assert window.run.start_button.isEnabled()


def test_choices_are_remembered_in_the_core_settings(
    qtbot: QtBot, tiny_models: dict[str, Path]
) -> None:
    window = _window(qtbot)
    drop_paths(window.model.drop_zone, tiny_models["llama"])
    qtbot.waitUntil(lambda: _loaded(window), timeout=20_000)
    window.model.select_strategy("auto")
    window.run.max_tokens.setValue(17)
    window.cluster.set_demo_size(3)
    saved = load_settings()
    assert saved.last_model == str(tiny_models["llama"])
    assert saved.last_strategy == "auto"
    assert saved.max_tokens == 17 and saved.demo_nodes == 3
    window.close()
    again = _window(qtbot)
    qtbot.waitUntil(lambda: _loaded(again), timeout=20_000)
    assert again.model.info.path == tiny_models["llama"]
    assert again.model.chooser.selected() == "auto"
    assert again.run.max_tokens.value() == 17
    assert len(again.cluster.nodes()) == 3


def test_a_remembered_model_that_is_gone_is_ignored(qtbot: QtBot, tmp_path: Path) -> None:
    window = _window(qtbot, settings=Settings(last_model=str(tmp_path / "gone")))
    assert window.model.drop_zone.state == 0  # the invitation to drop one


def test_window_geometry_is_restored(qtbot: QtBot) -> None:
    window = _window(qtbot)
    assert not window.geometry_restored  # a first start: the default size
    window.close()
    store = QSettings()
    for key in ("window/geometry", "window/run-splitter"):
        value = store.value(key)
        assert isinstance(value, QByteArray) and not value.isEmpty(), key
    again = _window(qtbot)
    assert again.geometry_restored  # (the offscreen screen is small: Qt fits it to it)


@pytest.mark.parametrize("when", ["loading", "ready"])
def test_closing_stops_the_job_first(qtbot: QtBot, demo_model: Path, when: str) -> None:
    from tests.gui.fakes import FakeBehaviour

    factory = fake_factory(FakeBehaviour(load_s=0.3 if when == "loading" else 0.01))
    window = _window(qtbot, factory=factory)
    window.model.load(demo_model)
    qtbot.waitUntil(lambda: _loaded(window), timeout=20_000)
    window.run.start()
    if when == "ready":
        qtbot.waitUntil(lambda: window.run.controller.state == RunState.READY, timeout=10_000)
    else:  # the ranks are started on the controller's queue: close while they load
        qtbot.waitUntil(
            lambda: bool(factory.jobs) and factory.jobs[0].state.value == "loading", timeout=10_000
        )
    assert window.cluster.size_box.isEnabled() is False  # locked while running
    window.close()
    assert window.isVisible()  # not yet: the ranks stop first
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=10_000)
    assert factory.jobs[0].state.finished


def test_the_model_source_chosen_is_what_the_next_run_uses(qtbot: QtBot, demo_model: Path) -> None:
    window = _window(qtbot)
    source = window.model.source
    assert source.selected() == "auto" and source.isVisible()
    assert [source.combo.itemData(i) for i in range(source.combo.count())] == list(MODEL_SOURCES)
    source.combo.setFocus()
    qtbot.keyClick(source.combo, Qt.Key.Key_End)  # the last choice, as a person picks it
    assert source.selected() == "this-mac"
    assert load_settings().model_source == "this-mac"
    assert "never asked" in source.combo.toolTip()
    window.model.load(demo_model)
    qtbot.waitUntil(lambda: _loaded(window), timeout=20_000)
    window.run.start()
    qtbot.waitUntil(lambda: window.run.controller.state == RunState.READY, timeout=10_000)
    session = window.run.controller.session
    assert session is not None and session.model_source == "this-mac"
    assert not source.combo.isEnabled()  # not while it runs
    window.run.stop()
    qtbot.waitUntil(lambda: not window.run.busy, timeout=10_000)
    assert source.combo.isEnabled()
    qtbot.keyClick(source.combo, Qt.Key.Key_Home)
    window.run.start()
    qtbot.waitUntil(lambda: window.run.controller.session is not session, timeout=10_000)
    assert window.run.controller.session.model_source == "auto"
    window.close()
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=10_000)
    again = _window(qtbot, settings=Settings(model_source="hub"))
    assert again.model.source.selected() == "hub"


def test_the_batch_chosen_is_what_the_next_run_uses(qtbot: QtBot, demo_model: Path) -> None:
    """Requests at once and the prompt cache, as a person types them: saved in the
    settings (``macmesh run`` reads the same), planned, and run by the next Start."""
    window = _window(qtbot)
    serving = window.model.serving
    assert (serving.batch.value(), serving.cache.value()) == (8, 256)
    window.model.load(demo_model)
    qtbot.waitUntil(lambda: _loaded(window), timeout=20_000)
    serving.batch.setFocus()
    serving.batch.selectAll()
    qtbot.keyClicks(serving.batch, "4")
    qtbot.keyClick(serving.batch, Qt.Key.Key_Return)
    serving.cache.setValue(128)
    assert (load_settings().batch, load_settings().prompt_cache_mb) == (4, 128)
    assert window.model.plan().options.batch == 4
    window.run.start()
    qtbot.waitUntil(lambda: window.run.controller.state == RunState.READY, timeout=10_000)
    session = window.run.controller.session
    assert session is not None and session.spec is not None
    assert (session.spec.batch, session.spec.prompt_cache_mb) == (4, 128)
    assert not serving.batch.isEnabled()  # not while it runs
    window.run.stop()
    qtbot.waitUntil(lambda: not window.run.busy, timeout=10_000)
    window.close()
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=10_000)
    again = _window(qtbot, settings=Settings(batch=2, prompt_cache_mb=0))
    assert (again.model.serving.batch.value(), again.model.serving.cache.text()) == (2, "Off")


def test_the_kv_cache_bits_chosen_are_saved_planned_and_run(qtbot: QtBot, demo_model: Path) -> None:
    """The Model pane's "KV cache" choice (issue 37): saved in the settings, the plan
    counts the smaller cache, and the next Start's ranks run it (``--kv-bits``)."""
    window = _window(qtbot)
    serving = window.model.serving
    assert serving.kv.currentText() == "16-bit"
    window.model.load(demo_model)
    qtbot.waitUntil(lambda: _loaded(window), timeout=20_000)
    plain = window.model.plan().ranks[0].kv_cache_bytes
    with qtbot.waitSignal(serving.serving_changed) as changed:
        serving.kv.setCurrentIndex(serving.kv.findText("8-bit"))
    assert changed.args[0].kv_bits == 8
    assert load_settings().kv_bits == 8
    plan = window.model.plan()
    assert plan.options.kv_bits == 8 and plan.ranks[0].kv_cache_bytes < 0.6 * plain
    window.run.start()
    qtbot.waitUntil(lambda: window.run.controller.state == RunState.READY, timeout=60_000)
    session = window.run.controller.session
    assert session is not None and session.spec is not None
    assert "--kv-bits" in session.spec.worker_args(0)
    assert not serving.kv.isEnabled()  # not while it runs
    window.run.stop()
    qtbot.waitUntil(lambda: not window.run.busy, timeout=10_000)
    window.close()
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=10_000)
    again = _window(qtbot, settings=Settings(kv_bits=4))
    assert again.model.serving.kv.currentText() == "4-bit"


def test_the_left_column_fits_its_width_without_scrolling_sideways(
    qtbot: QtBot, demo_model: Path
) -> None:
    """Cluster and Model share a fixed-width column: a widget wider than it (the model
    source's longest choice once did) made it scroll sideways and hid the Cluster
    pane's RDMA column and Cables toggle."""
    from PySide6.QtWidgets import QScrollArea

    window = _window(qtbot)
    window.resize(1440, 900)
    drop_paths(window.model.drop_zone, demo_model)
    qtbot.waitUntil(lambda: _loaded(window), timeout=20_000)
    scroll = window.findChild(QScrollArea)
    assert scroll is not None
    qtbot.waitUntil(lambda: scroll.widget().width() <= scroll.viewport().width(), timeout=5_000)
    assert scroll.widget().minimumSizeHint().width() <= scroll.viewport().width()
    assert not scroll.horizontalScrollBar().isVisible()


def test_the_demo_cluster_and_its_size_are_remembered_across_launches(
    qtbot: QtBot, demo_model: Path
) -> None:
    """Issue 25 item 14: the second launch showed no demo ("Can't start: A pipeline is not
    possible…") and, once asked, 2 Macs rather than the 4 chosen."""
    first = _window(qtbot, demo=False)
    assert not first.cluster.is_demo
    first.cluster.demo_button.click()
    first.cluster.set_demo_size(4)
    first.model.load(demo_model)
    qtbot.waitUntil(lambda: _loaded(first), timeout=20_000)
    first.close()
    assert load_settings().demo_on and load_settings().demo_nodes == 4
    second = MainWindow(demo=False, job_factory=fake_factory())  # the settings file's
    qtbot.addWidget(second)
    second.show()
    assert second.cluster.is_demo
    qtbot.waitUntil(lambda: len(second.cluster.nodes()) == 4, timeout=10_000)
    qtbot.waitUntil(lambda: _loaded(second), timeout=20_000)
    qtbot.waitUntil(lambda: second.run.start_button.isEnabled(), timeout=10_000)
    assert not second.run.status.text().startswith("Can't start"), second.run.status.text()
    second.cluster.leave_demo()
    second.close()
    assert not load_settings().demo_on and load_settings().demo_nodes == 4
    third = MainWindow(demo=False, job_factory=fake_factory())
    qtbot.addWidget(third)
    third.show()
    assert not third.cluster.is_demo
    third.cluster.demo_button.click()  # "Try the demo cluster": the size chosen last
    qtbot.waitUntil(lambda: len(third.cluster.nodes()) == 4, timeout=10_000)
    third.close()
