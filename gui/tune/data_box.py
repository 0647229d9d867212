"""Where the training data comes in: drop a folder or a .jsonl file, choose one, or take
the shipped demo set; then what it holds (format, counts) or why it cannot be used (the
bad lines, with their line numbers).

The reading itself (``core.tune.data.read_data``) is the caller's, off the GUI thread;
this box only shows states: empty, busy, read (a summary), refused (the problems).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QMimeData, Signal
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from gui.drop_frame import DropFrame
from gui.folders import choose_file, choose_folder
from gui.widgets import label

FORMAT_WORDS = {
    "chat": "Chat (messages)",
    "completions": "Completions (prompt → completion)",
    "text": "Text",
}


def data_path_from(mime: QMimeData) -> Path | None:
    """The data a drop means: a local folder or a .jsonl file (the first such)."""
    if not mime.hasUrls():
        return None
    for url in mime.urls():
        if not url.isLocalFile():
            continue
        path = Path(url.toLocalFile())
        if path.is_dir() or path.suffix.lower() == ".jsonl":
            return path
    return None


def split_words(train: int, held: int) -> str:
    """The offer made when there is no validation file (``TrainingData.split_sizes``)."""
    if not held:
        return (
            "No validation file, and too few examples to set some aside: training runs "
            "without a validation loss."
        )
    return (
        f"No validation file: {held} of the {train + held} examples are set aside to "
        f"measure the validation loss; {train} train."
    )


class DataBox(DropFrame):
    path_chosen = Signal(Path)
    demo_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = label("Drop a folder or a .jsonl file here", "model-name")
        self.title.setWordWrap(True)
        self.detail = label(
            "A folder with train.jsonl (and valid.jsonl), or one .jsonl file: "
            "chat (messages), completions (prompt, completion) or text, as mlx-lm reads them.",
            "hint",
            wrap=True,
        )
        self.problems = label("", "error-text", wrap=True, selectable=True)
        self.problems.hide()
        self.split = label("", "secondary", wrap=True)
        self.split.hide()
        self.choose_button = QPushButton("File…")
        self.choose_button.setToolTip("One .jsonl file")
        self.choose_button.clicked.connect(self.choose_file)
        self.folder_button = QPushButton("Folder…")
        self.folder_button.setToolTip("A folder with train.jsonl (and valid.jsonl)")
        self.folder_button.clicked.connect(self.choose_folder)
        self.demo_button = QPushButton("Use the demo set")
        self.demo_button.setToolTip(
            "A few dozen chat examples that teach the demo model a fact it cannot know: "
            "the name of MacMesh's mascot"
        )
        self.demo_button.clicked.connect(self.demo_requested)
        row = QHBoxLayout()
        row.setSpacing(8)
        row.addWidget(self.choose_button)
        row.addWidget(self.folder_button)
        row.addWidget(self.demo_button)
        row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 12, 14, 12)
        layout.setSpacing(6)
        layout.addWidget(self.title)
        layout.addWidget(self.detail)
        layout.addWidget(self.problems)
        layout.addWidget(self.split)
        layout.addLayout(row)
        self.state = "empty"

    # -- states -----------------------------------------------------------------------

    def show_busy(self, path: Path) -> None:
        self.state = "busy"
        self.title.setText(f"Reading {path.name or path}…")
        self.detail.setText("Checking every line.")
        self.problems.hide()
        self.split.hide()

    def show_data(
        self, path: Path, format_: str, train: int, valid: int, split: tuple[int, int] | None
    ) -> None:
        """The data read: its format and counts; ``split`` (train, held out) when there
        is no validation file, offered in words."""
        self.state = "read"
        self.title.setText(path.name or str(path))
        counts = f"{train} training examples"
        counts += f" · {valid} for validation" if valid else ""
        self.detail.setText(f"{FORMAT_WORDS.get(format_, format_)} · {counts}")
        self.detail.setToolTip(str(path))
        self.problems.hide()
        self.show_split(split)

    def show_split(self, split: tuple[int, int] | None) -> None:
        if split is not None:
            self.split.setText(split_words(*split))
        self.split.setVisible(split is not None)

    def show_problems(self, path: Path, message: str, problems: tuple[str, ...] = ()) -> None:
        """Why the data cannot be used: the error's line, then each bad line named."""
        self.state = "refused"
        self.title.setText(f"{path.name or path} cannot be used")
        self.detail.setText(message)
        self.detail.setToolTip(str(path))
        extra = [p for p in problems if p not in message]
        self.problems.setText("\n".join(extra))
        self.problems.setVisible(bool(extra))
        self.split.hide()

    def set_locked(self, locked: bool) -> None:
        self.setAcceptDrops(not locked)
        self.choose_button.setEnabled(not locked)
        self.folder_button.setEnabled(not locked)
        self.demo_button.setEnabled(not locked)

    # -- choosing ------------------------------------------------------------------------

    def choose_file(self) -> None:
        path = choose_file(self, "Choose the training data", "JSON lines (*.jsonl)")
        if path is not None:
            self.path_chosen.emit(path)

    def choose_folder(self) -> None:
        path = choose_folder(self, "Choose a folder with train.jsonl")
        if path is not None:
            self.path_chosen.emit(path)

    def drop_action(self, mime: QMimeData) -> Callable[[], None] | None:
        path = data_path_from(mime)
        return None if path is None else lambda: self.path_chosen.emit(path)
