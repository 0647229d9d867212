"""The app looks for Macs once its window is up, on the interfaces asked for."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from core.settings import Settings
from gui import app as gui_app
from gui.main_window import MainWindow
from gui.preferences import Preferences
from tests.gui.fakes import fake_factory


@pytest.fixture(autouse=True)
def private_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MACMESH_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("MACMESH_SSH_DIR", str(tmp_path / "ssh"))


def test_an_interface_that_does_not_exist_is_said_in_the_status_bar(qtbot: QtBot) -> None:
    window = MainWindow(Preferences(Settings()), job_factory=fake_factory())
    qtbot.addWidget(window)
    window.show()
    gui_app._start_scanner(window, "nosuch0")
    assert window.cluster.scanner is not None  # real mode: the pane follows its registry
    assert window.cluster.scanner.registry is window.cluster.registry
    qtbot.waitUntil(
        lambda: "cannot look for Macs" in window.statusBar().currentMessage(), timeout=30_000
    )
    assert "nosuch0" in window.statusBar().currentMessage()
