"""The Model pane's library: the models on this Mac (a real Hugging Face cache layout and
an LM Studio folder), Hugging Face search with fit badges, download with progress and
Cancel, a gated repo's message, a dropped huggingface.co link, offline mode; the real
huggingface_hub against the fake Hub on 127.0.0.1."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from core.library.hub import OFFLINE_MESSAGE
from core.run.demo import demo_nodes
from gui.bridge import Bridge
from gui.model.library_view import ARCH, FIT, HUB, LOCAL, NAME, LibraryView
from gui.model.pane import ModelPane
from tests.helpers.fake_hub import FakeHub
from tests.helpers.header_models import llama_config, llama_tensors
from tests.helpers.hf_cache import put_in_hf_cache
from tests.helpers.hub_env import hub

__all__ = ["hub"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_models: dict[str, Path]) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def pane(qtbot: QtBot, home: Path) -> ModelPane:
    bridge = Bridge()
    pane = ModelPane(bridge)
    qtbot.addWidget(pane, before_close_func=lambda _w: _close(pane, bridge))
    pane.resize(520, 900)
    pane.show()
    return pane


def _close(pane: ModelPane, bridge: Bridge) -> None:
    pane.library.cancel_download()
    bridge.close(60)


def rows(view: LibraryView) -> dict[str, list[str]]:
    table = view.table
    return {
        table.topLevelItem(i).text(NAME): [table.topLevelItem(i).text(c) for c in range(4)]
        for i in range(table.topLevelItemCount())
        if not table.topLevelItem(i).isHidden()
    }


def select(view: LibraryView, name: str) -> None:
    for i in range(view.table.topLevelItemCount()):
        item = view.table.topLevelItem(i)
        if item.text(NAME).startswith(name):
            view.table.setCurrentItem(item)
            return
    raise AssertionError(f"{name} not listed: {list(rows(view))}")


def test_the_models_on_this_mac_with_badges_and_use(
    qtbot: QtBot, home: Path, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    cache = home / ".cache" / "huggingface" / "hub"
    put_in_hf_cache(cache, "mlx-community/tiny-llama", tiny_models["llama"])
    put_in_hf_cache(
        cache, "org/half", tiny_models["qwen3"], interrupted=["model-00001-of-00002.safetensors"]
    )
    shutil.copytree(tiny_models["qwen3"], home / ".lmstudio" / "models" / "lms" / "tiny-qwen3")
    bridge = Bridge()
    pane = ModelPane(bridge)
    qtbot.addWidget(pane, before_close_func=lambda _w: bridge.close())
    view = pane.library
    qtbot.waitUntil(
        lambda: len(rows(view)) == 3 and "…" not in {r[FIT] for r in rows(view).values()},
        timeout=20_000,
    )  # listed at once, then checked
    listed = rows(view)
    assert listed["mlx-community/tiny-llama"][ARCH] == "llama"
    assert listed["mlx-community/tiny-llama"][FIT] == "–"  # no cluster yet
    assert listed["org/half"][FIT] == "broken"
    pane.set_nodes(demo_nodes(2))
    assert rows(view)["mlx-community/tiny-llama"][FIT] == "fits"
    select(view, "org/half")
    assert not view.use_button.isEnabled()
    view.search.setText("lms")
    assert list(rows(view)) == ["lms/tiny-qwen3"]
    view.search.setText("")
    select(view, "mlx-community/tiny-llama")
    assert view.use_button.isEnabled()
    with qtbot.waitSignal(pane.model_changed, timeout=20_000) as changed:
        view.use_button.click()
    assert changed.args[0].endswith("snapshots/" + Path(changed.args[0]).name)
    assert pane.info is not None and pane.info.name == "mlx-community/tiny-llama"
    added = tmp_path / "mine" / "tiny"
    shutil.copytree(tiny_models["llama"], added)
    view.add_folder(added)
    qtbot.waitUntil(lambda: "tiny" in rows(view), timeout=20_000)


def _search(qtbot: QtBot, view: LibraryView, text: str, expected: int) -> None:
    view.tabs.setCurrentIndex(HUB)
    view.search.setText(text)
    view.search.returnPressed.emit()
    qtbot.waitUntil(
        lambda: len(rows(view)) == expected and "…" not in [r[FIT] for r in rows(view).values()],
        timeout=30_000,
    )


def test_search_download_with_progress_then_use(
    qtbot: QtBot, hub: FakeHub, pane: ModelPane, tiny_models: dict[str, Path]
) -> None:
    hub.add_folder("mlx-community/tiny-qwen3", tiny_models["qwen3"], downloads=500)
    hub.add_folder("mlx-community/tiny-llama", tiny_models["llama"], downloads=50)
    config = llama_config(
        layers=80, hidden=8192, heads=64, kv_heads=8, intermediate=28672, vocab=128256, bits=8
    )
    hub.add_virtual_model(
        "mlx-community/Big-70B-8bit", config, llama_tensors(config), files=8, downloads=900
    )
    pane.set_nodes(demo_nodes(2))
    view = pane.library
    _search(qtbot, view, "", 3)
    listed = rows(view)
    assert list(listed) == [
        "mlx-community/Big-70B-8bit",
        "mlx-community/tiny-qwen3",
        "mlx-community/tiny-llama",
    ]
    assert listed["mlx-community/Big-70B-8bit"][FIT] == "pipeline"  # 96 + 64 GB Studios
    assert listed["mlx-community/tiny-qwen3"][FIT] == "fits"
    assert listed["mlx-community/tiny-qwen3"][ARCH] == "qwen3"
    assert hub.weight_bytes_served() == 0
    select(view, "mlx-community/tiny-qwen3")
    assert view.download_button.isEnabled() and not view.use_button.isEnabled()
    seen: list[int] = []
    view.progress.valueChanged.connect(seen.append)
    view.download_button.click()
    assert view.progress.isVisible() and view.cancel_button.isVisible()
    qtbot.waitUntil(lambda: view.downloading is None, timeout=60_000)
    assert seen and seen[-1] == 1000
    assert "is on this Mac" in view.status.text()
    select(view, "mlx-community/tiny-qwen3")
    with qtbot.waitSignal(pane.model_changed, timeout=20_000):
        view.use_button.click()
    assert pane.info is not None and pane.info.architecture == "qwen3"
    view.tabs.setCurrentIndex(LOCAL)
    qtbot.waitUntil(lambda: "mlx-community/tiny-qwen3" in rows(view), timeout=20_000)


def test_cancel_and_a_gated_repo_are_said_in_the_window(
    qtbot: QtBot, hub: FakeHub, pane: ModelPane, tiny_models: dict[str, Path]
) -> None:
    config = llama_config(layers=2, hidden=1024, heads=8, kv_heads=4, intermediate=2816, vocab=4096)
    hub.add_virtual_model("mlx-community/Medium", config, llama_tensors(config), files=2)
    hub.add_folder("mlx-community/tiny-gated", tiny_models["llama"], gated=True)
    view = pane.library
    _search(qtbot, view, "", 2)
    select(view, "mlx-community/Medium")
    # A link of 10 MB/s: unthrottled, loopback brings its ~70 MB in a tenth of a second
    # on a fast machine, before the cancel is clicked.
    hub.bandwidth = 10e6
    view.download_button.click()
    qtbot.waitUntil(lambda: view.progress.value() > 0, timeout=30_000)
    view.cancel_button.click()
    qtbot.waitUntil(lambda: view.downloading is None, timeout=30_000)
    assert "stopped" in view.status.text() and "run the download again" in view.status.text()
    select(view, "mlx-community/tiny-gated")
    view.download_button.click()
    qtbot.waitUntil(lambda: view.downloading is None, timeout=30_000)
    assert "accept its licence on" in view.status.text()
    assert "sign in" in view.status.text()


def test_a_dropped_hugging_face_link_looks_the_model_up(
    qtbot: QtBot, hub: FakeHub, pane: ModelPane, tiny_models: dict[str, Path]
) -> None:
    hub.add_folder("mlx-community/tiny-llama", tiny_models["llama"], downloads=5)
    hub.add_folder("mlx-community/tiny-qwen3", tiny_models["qwen3"], downloads=500)
    mime = QMimeData()
    mime.setUrls([QUrl("https://huggingface.co/mlx-community/tiny-llama")])
    centre = pane.drop_zone.rect().center()
    action, button = Qt.DropAction.CopyAction, Qt.MouseButton.LeftButton
    enter = QDragEnterEvent(QPoint(centre), action, mime, button, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(pane.drop_zone, enter)
    assert enter.isAccepted()
    drop = QDropEvent(QPointF(centre), action, mime, button, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(pane.drop_zone, drop)
    view = pane.library
    assert view.tabs.currentIndex() == HUB
    assert view.search.text() == "mlx-community/tiny-llama"
    qtbot.waitUntil(lambda: list(rows(view)) == ["mlx-community/tiny-llama"], timeout=30_000)


def test_typing_org_name_on_this_mac_looks_it_up_on_hugging_face(
    qtbot: QtBot, hub: FakeHub, pane: ModelPane, tiny_models: dict[str, Path]
) -> None:
    hub.add_folder("someone/tiny-qwen3", tiny_models["qwen3"], downloads=5)
    hub.add_folder("mlx-community/tiny-qwen3", tiny_models["qwen3"], downloads=500)
    view = pane.library
    assert view.tabs.currentIndex() == LOCAL
    view.search.setText("someone/tiny-qwen3")
    view.search.returnPressed.emit()
    assert view.tabs.currentIndex() == HUB
    qtbot.waitUntil(lambda: list(rows(view)) == ["someone/tiny-qwen3"], timeout=30_000)
    qtbot.waitUntil(lambda: rows(view)["someone/tiny-qwen3"][ARCH] == "qwen3", timeout=30_000)


def test_offline_mode_is_said_plainly(
    qtbot: QtBot, hub: FakeHub, pane: ModelPane, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    view = pane.library
    view.tabs.setCurrentIndex(HUB)
    view.search.setText("qwen")
    view.search.returnPressed.emit()
    assert view.status.text() == OFFLINE_MESSAGE
    assert hub.served() == []


def test_a_folder_added_by_hand_can_be_removed_even_when_not_a_model(
    qtbot: QtBot, pane: ModelPane, home: Path, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    """Issue 25 item 15: a non-model folder stayed in the library as "broken" after a
    restart, with no way to remove it. Remove takes it out; its files stay."""
    from core.settings import load_settings

    put_in_hf_cache(
        home / ".cache" / "huggingface" / "hub", "mlx-community/tiny-llama", tiny_models["llama"]
    )
    junk = tmp_path / "holiday-photos"
    junk.mkdir()
    (junk / "beach.jpg").write_bytes(b"not a model")
    view = pane.library
    view.add_folder(junk)
    qtbot.waitUntil(lambda: "holiday-photos" in rows(view), timeout=20_000)
    assert rows(view)["holiday-photos"][FIT] in ("broken", "not MLX")
    assert view.remove_button.isVisible()
    select(view, "mlx-community/tiny-llama")  # found in a cache, not added: not removable
    assert not view.remove_button.isEnabled()
    select(view, "holiday-photos")
    assert view.remove_button.isEnabled()
    view.remove_button.click()
    qtbot.waitUntil(lambda: "holiday-photos" not in rows(view), timeout=20_000)
    assert load_settings().library_folders == ()
    assert (junk / "beach.jpg").is_file()  # nothing deleted
    assert "mlx-community/tiny-llama" in rows(view)


def test_a_hugging_face_error_stays_on_its_tab_above_the_list(
    qtbot: QtBot, pane: ModelPane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25 item 15: the offline error sat below the fold and stayed on the "On this
    Mac" tab."""
    from core.library.hub import HubError

    message = "Cannot reach Hugging Face at https://huggingface.co (its name could not be …)"

    def unreachable(*_args: object, **_kwargs: object) -> list:
        raise HubError(message)

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    # huggingface_hub read HF_HUB_OFFLINE at its import (make test exports 1): online here.
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr("gui.model.library_view.search_models", unreachable)
    view = pane.library
    view.search_hub("qwen")
    assert view.tabs.currentIndex() == HUB
    qtbot.waitUntil(lambda: view.status.text() == message, timeout=10_000)
    assert view.status.isVisible()
    assert view.status.geometry().bottom() < view.table.geometry().top()  # above the list
    view.tabs.setCurrentIndex(LOCAL)
    assert message not in view.status.text()
    view.tabs.setCurrentIndex(HUB)
    assert view.status.text() == message
    # A search that fails once the person is back on "On this Mac" is kept for its tab.
    view.search_hub("llama")
    view.tabs.setCurrentIndex(LOCAL)
    qtbot.wait(300)
    assert message not in view.status.text()
    view.tabs.setCurrentIndex(HUB)
    qtbot.waitUntil(lambda: view.status.text() == message, timeout=10_000)


def test_the_window_library_lists_the_demo_model_as_macmesh_models_does(
    qtbot: QtBot, home: Path, demo_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35: the demo model is found by name in the window too: once converted, the
    library lists it (the same entry as ``macmesh models``) and Use loads it."""
    from core.library.resolve import library_with_demo
    from core.model.demo_model import FOLDER_NAME

    cache = tmp_path / "cache"
    shutil.copytree(demo_model, cache / "models" / FOLDER_NAME)
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(cache))
    assert [e.name for e in library_with_demo(())] == [FOLDER_NAME]  # the CLI's list
    bridge = Bridge()
    pane = ModelPane(bridge)
    qtbot.addWidget(pane, before_close_func=lambda _w: bridge.close())
    view = pane.library
    qtbot.waitUntil(
        lambda: FOLDER_NAME in rows(view) and rows(view)[FOLDER_NAME][FIT] != "…",
        timeout=20_000,
    )
    assert rows(view)[FOLDER_NAME][ARCH] == "llama"
    pane.set_nodes(demo_nodes(2))
    assert rows(view)[FOLDER_NAME][FIT] == "fits"
    select(view, FOLDER_NAME)
    with qtbot.waitSignal(pane.model_changed, timeout=20_000) as changed:
        view.use_button.click()
    assert Path(changed.args[0]) == cache / "models" / FOLDER_NAME


def test_the_library_lists_the_demo_model_once_the_demo_button_converts_it(
    qtbot: QtBot, home: Path, demo_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not converted yet: not listed; "Use the demo model" converts it, and the library
    lists it from then on."""
    from core.model.demo_model import FOLDER_NAME

    cache = tmp_path / "cache"
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(cache))
    bridge = Bridge()
    pane = ModelPane(bridge)
    qtbot.addWidget(pane, before_close_func=lambda _w: bridge.close())
    view = pane.library
    qtbot.waitUntil(lambda: "No models found" in view.status.text(), timeout=20_000)
    assert FOLDER_NAME not in rows(view)
    # The conversion stands in for a copy of the session's converted folder (seconds saved).
    monkeypatch.setattr(
        "core.run.demo.demo_model",
        lambda: Path(shutil.copytree(demo_model, cache / "models" / FOLDER_NAME)),
    )
    with qtbot.waitSignal(pane.model_changed, timeout=60_000):
        pane.use_demo_model()
    qtbot.waitUntil(lambda: FOLDER_NAME in rows(view), timeout=20_000)
