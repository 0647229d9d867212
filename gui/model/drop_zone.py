"""Where a model comes in: drop a folder from Finder, choose one, or take the demo model.

The zone shows one of four states: empty (an invitation), busy (reading or preparing),
the model's facts, or why the folder is not a usable model. It accepts drops in every
state, so changing the model is always one drag away.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QMimeData, Qt, QUrl, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QProgressBar,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from core.library.hub import repo_id_of
from core.model.info import ModelInfo
from gui.drop_frame import DropFrame
from gui.folders import choose_folder
from gui.model.facts import ModelFacts
from gui.style import set_role
from gui.widgets import label

EMPTY, BUSY, LOADED, ERROR = range(4)
MODEL_FILES = ("config.json", ".safetensors", ".json")


def folder_from_urls(urls: list[QUrl]) -> Path | None:
    """The model folder a drop means: the first local path; a dropped file inside a model
    folder (config.json, a .safetensors) stands for its folder."""
    for url in urls:
        if not url.isLocalFile():
            continue
        path = Path(url.toLocalFile())
        if path.is_file() and path.name.endswith(MODEL_FILES):
            return path.parent
        return path
    return None


def repo_from_mime(mime: QMimeData) -> str | None:
    """A dropped huggingface.co/<org>/<name> link (from a browser) as ``org/name``."""
    links = [url.toString() for url in mime.urls() if not url.isLocalFile()]
    if mime.hasText():
        links.append(mime.text())
    for link in links:
        if "huggingface.co/" in link or "hf.co/" in link:
            repo_id = repo_id_of(link.strip())
            if repo_id:
                return repo_id
    return None


def _folder_in(mime: QMimeData) -> Path | None:
    return folder_from_urls(mime.urls()) if mime.hasUrls() else None


class DropZone(DropFrame):
    folder_chosen = Signal(Path)
    demo_requested = Signal()
    hub_link_dropped = Signal(str)  # org/name

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumHeight(150)
        self.pages = QStackedWidget()
        self.pages.addWidget(self._empty_page())
        self.pages.addWidget(self._busy_page())
        self.facts = ModelFacts()
        self.pages.addWidget(self._loaded_page())
        self.pages.addWidget(self._error_page())
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 12, 14, 12)
        layout.addWidget(self.pages)

    # -- states -----------------------------------------------------------------------

    def show_empty(self) -> None:
        self.pages.setCurrentIndex(EMPTY)

    def show_busy(self, text: str) -> None:
        self.busy_text.setText(text)
        self.pages.setCurrentIndex(BUSY)

    def show_model(self, info: ModelInfo) -> None:
        self.facts.show_model(info)
        self.pages.setCurrentIndex(LOADED)

    def show_error(self, title: str, message: str) -> None:
        self.error_title.setText(title)
        self.error_text.setText(message)
        self.pages.setCurrentIndex(ERROR)

    @property
    def state(self) -> int:
        return self.pages.currentIndex()

    def set_locked(self, locked: bool) -> None:
        """While a job runs its model cannot change."""
        self.setAcceptDrops(not locked)
        for button in self.findChildren(QPushButton):
            button.setEnabled(not locked)

    # -- pages --------------------------------------------------------------------------

    def _buttons(self, choose_text: str) -> QHBoxLayout:
        row = QHBoxLayout()
        row.setSpacing(8)
        choose = QPushButton(choose_text)
        choose.clicked.connect(self.choose_folder)
        demo = QPushButton("Use the demo model")
        demo.setToolTip("SmolLM2-135M-Instruct, 4-bit, bundled with MacMesh (prepared once)")
        demo.clicked.connect(self.demo_requested)
        row.addWidget(choose)
        row.addWidget(demo)
        row.addStretch(1)
        return row

    def _empty_page(self) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        layout.addStretch(1)
        title = label("Drop a model folder here", "model-name")
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        hint = label(
            "An MLX model: the folder with config.json and its .safetensors files",
            "hint",
            wrap=True,
        )
        hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(title)
        layout.addWidget(hint)
        row = self._buttons("Choose a folder…")
        row.insertStretch(0, 1)
        layout.addSpacing(6)
        layout.addLayout(row)
        layout.addStretch(1)
        return page

    def _busy_page(self) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addStretch(1)
        self.busy_text = label("", "secondary", wrap=True)
        self.busy_text.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(self.busy_text)
        bar = QProgressBar()
        bar.setRange(0, 0)  # indeterminate
        bar.setMaximumWidth(220)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(bar)
        row.addStretch(1)
        layout.addLayout(row)
        layout.addStretch(1)
        return page

    def _loaded_page(self) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(10)
        layout.addWidget(self.facts)
        layout.addLayout(self._buttons("Choose another…"))
        return page

    def _error_page(self) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        self.error_title = label("", "model-name")
        set_role(self.error_title, "model-name")
        self.error_text = label("", "error-text", wrap=True, selectable=True)
        layout.addWidget(self.error_title)
        layout.addWidget(self.error_text)
        layout.addStretch(1)
        layout.addLayout(self._buttons("Choose another…"))
        return page

    # -- choosing -------------------------------------------------------------------------

    def choose_folder(self) -> None:
        folder = choose_folder(self, "Choose a model folder")
        if folder is not None:
            self.folder_chosen.emit(folder)

    def drop_action(self, mime: QMimeData) -> Callable[[], None] | None:
        """A dropped folder (or a file in one) is chosen; else a dropped Hub link."""
        folder = _folder_in(mime)
        if folder is not None:
            return lambda: self.folder_chosen.emit(folder)
        repo_id = repo_from_mime(mime)
        if repo_id is not None:
            return lambda: self.hub_link_dropped.emit(repo_id)
        return None
