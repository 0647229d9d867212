"""Help > Show Logs opens the log folder; About names the version."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QMainWindow
from pytestqt.qtbot import QtBot

import core
from gui.help_menu import APP_LOG, install_help_menu, log_to_file
from gui.main_window import MainWindow
from tests.gui.fakes import fake_factory


def _window(qtbot: QtBot, opened: list[QUrl], result: bool = True) -> QMainWindow:
    window = QMainWindow()
    qtbot.addWidget(window)
    window.help = install_help_menu(window, lambda url: opened.append(url) or result)
    return window


def test_show_logs_opens_the_log_folder(qtbot: QtBot, tmp_path: Path) -> None:
    opened: list[QUrl] = []
    window = _window(qtbot, opened)
    window.help.show_logs.trigger()
    assert [url.toLocalFile() for url in opened] == [str(tmp_path / "logs")]
    assert (tmp_path / "logs").is_dir()  # created on first use, so the browser finds it


def test_when_no_browser_opens_the_status_bar_says_where(qtbot: QtBot, tmp_path: Path) -> None:
    window = _window(qtbot, [], result=False)
    window.help.show_logs.trigger()
    assert window.statusBar().currentMessage() == f"Logs are in {tmp_path / 'logs'}"


def test_the_main_window_has_the_help_menu(qtbot: QtBot) -> None:
    window = MainWindow(job_factory=fake_factory())
    qtbot.addWidget(window)
    titles = [action.text() for action in window.menuBar().actions()]
    assert "&Help" in titles
    assert [a.text() for a in window.help_menu.actions()] == ["Show &Logs", "&About MacMesh"]


def test_about_names_the_version(qtbot: QtBot) -> None:
    window = _window(qtbot, [])
    window.show()
    box = window.help.show_about()
    assert box.isVisible()
    assert f"MacMesh {core.__version__}" in box.text()
    box.close()


def test_the_app_log_goes_to_the_folder_show_logs_opens(tmp_path: Path) -> None:
    handler = log_to_file()
    try:
        logging.getLogger("macmesh.test").warning("hello from the app")
        handler.flush()
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    assert "WARNING macmesh.test: hello from the app" in (tmp_path / "logs" / APP_LOG).read_text()
