"""Where a file dialog starts: the last folder the person used in it, else their
Documents (their home without one), never the folder MacMesh was started from."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, QStandardPaths
from PySide6.QtWidgets import QFileDialog, QWidget

KEY = "dialogs/last-folder"


def start_folder() -> str:
    """The last folder chosen in a file dialog, if it still exists; else Documents."""
    last = QSettings().value(KEY)
    if isinstance(last, str) and last and Path(last).is_dir():
        return last
    documents = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    if documents and Path(documents).is_dir():
        return documents
    return str(Path.home())


def remember(chosen: str | Path) -> None:
    """The folder of what was chosen (itself when a folder) starts the next dialog."""
    path = Path(chosen)
    folder = path if path.is_dir() else path.parent
    if folder.is_dir():
        QSettings().setValue(KEY, str(folder))


def choose_folder(parent: QWidget | None, caption: str) -> Path | None:
    folder = QFileDialog.getExistingDirectory(parent, caption, start_folder())
    if not folder:
        return None
    remember(folder)
    return Path(folder)


def choose_file(parent: QWidget | None, caption: str, kinds: str) -> Path | None:
    path, _ = QFileDialog.getOpenFileName(parent, caption, start_folder(), kinds)
    if not path:
        return None
    remember(path)
    return Path(path)


def choose_save(parent: QWidget | None, caption: str, name: str, kinds: str) -> Path | None:
    path, _ = QFileDialog.getSaveFileName(parent, caption, str(Path(start_folder()) / name), kinds)
    if not path:
        return None
    remember(path)
    return Path(path)
