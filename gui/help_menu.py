"""The Help menu: Show Logs (the log folder in Finder, one click) and About MacMesh.

Logs live in the user's Library (``core.paths.log_dir``), never in the app bundle, so
someone helping over the phone can say "Help > Show Logs" instead of a Terminal command.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
from collections.abc import Callable

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QAction, QDesktopServices
from PySide6.QtWidgets import QMainWindow, QMenu, QMessageBox

from core import __version__
from core.paths import log_dir

UrlOpener = Callable[[QUrl], object]
APP_LOG = "MacMesh.log"  # the app's own log, beside the runs' folders

ABOUT = (
    "<b>MacMesh {version}</b><p>Turn the Apple silicon Macs on a desk into one MLX "
    "cluster.</p><p>Logs: {logs}</p>"
)


class HelpMenu(QMenu):
    """Help > Show Logs, About MacMesh. ``open_url`` is injectable for tests."""

    def __init__(self, parent: QMainWindow, open_url: UrlOpener | None = None) -> None:
        super().__init__("&Help", parent)
        self._open_url = open_url or QDesktopServices.openUrl
        self.show_logs = QAction("Show &Logs", self)
        self.show_logs.setStatusTip("Open the folder with every run's logs")
        self.show_logs.triggered.connect(self.open_logs)
        self.about = QAction("&About MacMesh", self)
        self.about.setMenuRole(QAction.MenuRole.AboutRole)  # macOS: the app menu's About
        self.about.triggered.connect(self.show_about)
        self.addAction(self.show_logs)
        self.addAction(self.about)

    def open_logs(self) -> QUrl:
        """Opens the log folder in the file browser (created if this is the first run)."""
        url = QUrl.fromLocalFile(str(log_dir()))
        if not self._open_url(url):
            parent = self.parentWidget()
            if isinstance(parent, QMainWindow):
                parent.statusBar().showMessage(f"Logs are in {url.toLocalFile()}", 10_000)
        return url

    def show_about(self) -> QMessageBox:
        """A window-modal box (it does not block the event loop)."""
        box = QMessageBox(self.parentWidget())
        box.setWindowTitle("About MacMesh")
        box.setTextFormat(Qt.TextFormat.RichText)
        box.setText(ABOUT.format(version=__version__, logs=log_dir()))
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        return box


def install_help_menu(window: QMainWindow, open_url: UrlOpener | None = None) -> HelpMenu:
    menu = HelpMenu(window, open_url)
    window.menuBar().addMenu(menu)
    return menu


def log_to_file(level: int = logging.INFO) -> logging.Handler:
    """The app's log also goes to ``APP_LOG`` in the log folder: a double-clicked app has
    no terminal, and Show Logs should show what happened. Rotates at 1 MB (3 kept)."""
    path = log_dir() / APP_LOG
    root = logging.getLogger()
    for existing in root.handlers:  # main() run twice in one process: one handler
        if getattr(existing, "baseFilename", None) == os.path.abspath(path):
            return existing
    handler = logging.handlers.RotatingFileHandler(
        path, maxBytes=1 << 20, backupCount=3, encoding="utf-8"
    )
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    return handler
