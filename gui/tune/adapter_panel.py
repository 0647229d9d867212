"""The fine-tune's result: the adapter (name, base model, final losses, where it is) and
what to do with it: chat with it, compare it with the base model, fuse it. The adapters
trained before are a list above it: choosing one shows it, and the buttons act on it.

The three buttons call plain callable attributes (``on_chat``, ``on_compare``,
``on_fuse``), each taking the adapter's folder; the window connects them to the core's
pieces. A button whose callable is None stays visible, disabled, and says so.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from core.tune.adapters import Adapter
from gui.style import set_role
from gui.widgets import label, section

AdapterAction = Callable[[Path], object]


def loss_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


class AdapterPanel(QFrame):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        set_role(self, "subcard")
        self.path: Path | None = None
        self._busy = False
        self.on_chat: AdapterAction | None = None
        self.on_compare: AdapterAction | None = None
        self.on_fuse: AdapterAction | None = None
        self.heading = section("Adapter")
        self.adapters: list[Adapter] = []
        self.earlier = QComboBox()
        self.earlier.setToolTip("The adapters trained before, newest first")
        self.earlier.activated.connect(self._chosen)
        self.name = label("", "model-name", wrap=True, selectable=True)
        self.stopped = label("", "hint", wrap=True)
        self.facts: dict[str, QLabel] = {}
        grid = QGridLayout()
        grid.setHorizontalSpacing(14)
        grid.setVerticalSpacing(2)
        for row, key in enumerate(("Base model", "Train loss", "Validation loss", "Folder")):
            grid.addWidget(label(key, "fact-name"), row, 0)
            value = label("", "fact-value", wrap=key == "Folder", selectable=True)
            grid.addWidget(value, row, 1)
            self.facts[key] = value
        grid.setColumnStretch(1, 1)
        self.chat_button = QPushButton("Chat with the adapter")
        set_role(self.chat_button, "primary")
        self.chat_button.setToolTip("The base model plus this adapter, on the cluster")
        self.chat_button.clicked.connect(lambda: self._call(self.on_chat))
        self.compare_button = QPushButton("Compare with base")
        self.compare_button.setToolTip(
            "The same question to the base model and to the base plus adapter, side by side"
        )
        self.compare_button.clicked.connect(lambda: self._call(self.on_compare))
        self.fuse_button = QPushButton("Fuse")
        self.fuse_button.setToolTip(
            "Write a model folder with the adapter built in; the model library lists it"
        )
        self.fuse_button.clicked.connect(lambda: self._call(self.on_fuse))
        self.question = QLineEdit()
        self.question.setPlaceholderText("A question your data teaches, for Compare with base")
        self.question.setToolTip("Compare with base asks this of both models")
        self.note = label("", "secondary", wrap=True)
        self.note.hide()
        buttons = QHBoxLayout()
        buttons.setSpacing(8)
        buttons.addWidget(self.chat_button)
        buttons.addWidget(self.compare_button)
        buttons.addWidget(self.fuse_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 10, 12, 10)
        layout.setSpacing(6)
        heading = QHBoxLayout()
        heading.addWidget(self.heading)
        heading.addStretch(1)
        heading.addWidget(label("Your adapters", "fact-name"))
        heading.addWidget(self.earlier)
        layout.addLayout(heading)
        layout.addWidget(self.name)
        layout.addWidget(self.stopped)
        layout.addLayout(grid)
        layout.addWidget(self.question)
        layout.addLayout(buttons)
        layout.addWidget(self.note)

    def show_adapter(
        self,
        name: str,
        base_model: str,
        train_loss: float | None,
        val_loss: float | None,
        path: Path,
        stopped: bool = False,
    ) -> None:
        self.path = Path(path)
        self.name.setText(name)
        self.stopped.setText(
            "Stopped early: this is the last checkpoint saved before Stop." if stopped else ""
        )
        self.stopped.setVisible(stopped)
        self.facts["Base model"].setText(base_model)
        self.facts["Train loss"].setText(loss_text(train_loss))
        self.facts["Validation loss"].setText(loss_text(val_loss))
        self.facts["Folder"].setText(str(path))
        self.note.hide()
        self._show_buttons()
        self.show()

    def set_adapters(self, adapters: list[Adapter], shown: Path | None = None) -> None:
        """The adapters to choose from (``core.tune.adapters.list_adapters``), with
        ``shown`` (default: the one on view) selected."""
        self.adapters = list(adapters)
        self.earlier.clear()
        for adapter in self.adapters:
            made = adapter.created[:10] if adapter.created else "?"
            base = Path(adapter.base_model).name if adapter.base_model else "unknown base"
            self.earlier.addItem(f"{adapter.name}  ·  {base}  ·  {made}")
        self.earlier.setVisible(bool(self.adapters))
        wanted = Path(shown) if shown is not None else self.path
        paths = [a.path for a in self.adapters]
        if wanted in paths:
            self.earlier.setCurrentIndex(paths.index(wanted))

    def show_listed(self, index: int) -> None:
        """Show the ``index``-th adapter of the list."""
        adapter = self.adapters[index]
        self.earlier.setCurrentIndex(index)
        self.show_adapter(
            adapter.name,
            adapter.base_model or "unknown",
            adapter.train_loss,
            adapter.val_loss,
            adapter.path,
            adapter.stopped,
        )

    def _chosen(self, index: int) -> None:
        if 0 <= index < len(self.adapters):
            self.show_listed(index)

    def show_note(self, text: str) -> None:
        """One line under the buttons: what a button did, or why it could not."""
        self.note.setText(text)
        self.note.setVisible(bool(text))

    def _show_buttons(self) -> None:
        for button, action in (
            (self.chat_button, self.on_chat),
            (self.compare_button, self.on_compare),
            (self.fuse_button, self.on_fuse),
        ):
            button.setEnabled(action is not None and not self._busy)
            if action is None:
                button.setToolTip("Not available in this build")

    def set_actions(
        self,
        chat: AdapterAction | None = None,
        compare: AdapterAction | None = None,
        fuse: AdapterAction | None = None,
    ) -> None:
        self.on_chat, self.on_compare, self.on_fuse = chat, compare, fuse
        self._show_buttons()

    def set_busy(self, busy: bool) -> None:
        """While a job holds the Macs, nothing else can start on them."""
        self._busy = busy
        self._show_buttons()

    def _call(self, action: AdapterAction | None) -> None:
        if action is None or self.path is None:
            return
        try:
            action(self.path)
        except Exception as error:  # one clear line, never a traceback dialog
            self.show_note(str(error).splitlines()[0] if str(error) else type(error).__name__)
