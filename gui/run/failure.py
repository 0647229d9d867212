"""When the cluster fails: the launcher's message (which rank, what happened, its last log
lines) in a banner, and a button per rank that opens that rank's whole log."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFrame,
    QHBoxLayout,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from core.run.job.rank_status import LOG_LINES
from gui import style
from gui.style import set_role
from gui.widgets import label

LOG_LIMIT = 512 * 1024  # the tail of a long log is the part that explains a failure


class FailureBanner(QFrame):
    dismissed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        set_role(self, "banner-error")
        self.title = label("", "banner-title", wrap=True, selectable=True)
        # What to try (the launcher's line after the title, e.g. when memory ran out), in
        # the text's own font; the log lines below it in the log's.
        self.advice = label("", "", wrap=True, selectable=True)
        self.detail = label("", "banner-detail", wrap=True, selectable=True)
        self.detail.setTextFormat(Qt.TextFormat.PlainText)
        self.hint = label(
            "MacMesh ended every rank. Open a rank's log to see what it did "
            "last, then press Start to try again.",
            "secondary",
            wrap=True,
        )
        self.buttons = QHBoxLayout()
        self.buttons.setSpacing(8)
        close = QPushButton("Dismiss")
        set_role(close, "link")
        close.clicked.connect(self.hide)
        close.clicked.connect(self.dismissed)
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 10, 14, 12)
        layout.setSpacing(6)
        layout.addLayout(top)
        layout.addWidget(self.advice)
        layout.addWidget(self.detail)
        layout.addWidget(self.hint)
        layout.addLayout(self.buttons)
        self.log_buttons: list[QPushButton] = []
        self.hide()

    def show_failure(self, message: str, logs: list[tuple[int, Path]]) -> None:
        first, _, rest = message.strip().partition("\n")
        self.title.setText(first or "The cluster failed.")
        advice, logs_at, log_lines = rest.partition(LOG_LINES)
        self.advice.setText(advice.strip())
        self.advice.setVisible(bool(advice.strip()))
        self.detail.setText((logs_at + log_lines).strip())
        self.detail.setVisible(bool(log_lines.strip()))
        for button in self.log_buttons:
            self.buttons.removeWidget(button)
            button.deleteLater()
        self.log_buttons = []
        while self.buttons.count():
            self.buttons.takeAt(0)
        for rank, path in logs:
            button = QPushButton(f"Rank {rank} log")
            button.setToolTip(str(path))
            button.clicked.connect(lambda _=False, r=rank, p=path: self.open_log(r, p))
            self.buttons.addWidget(button)
            self.log_buttons.append(button)
        self.buttons.addStretch(1)
        self.show()

    def open_log(self, rank: int, path: Path) -> LogDialog:
        dialog = LogDialog(rank, path, self.window())
        dialog.show()
        return dialog


class LogDialog(QDialog):
    """A rank's log as plain text, scrolled to the end where the failure is."""

    def __init__(self, rank: int, path: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setWindowTitle(f"Rank {rank} log")
        self.resize(860, 560)
        self.text = QPlainTextEdit()
        set_role(self.text, "log")
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setFont(style.mono_font(12))
        self.text.setPlainText(read_log(path))
        self.text.moveCursor(self.text.textCursor().MoveOperation.End)
        where = label(str(path), "hint", selectable=True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        layout = QVBoxLayout(self)
        layout.addWidget(where)
        layout.addWidget(self.text, 1)
        layout.addWidget(buttons)


def read_log(path: Path) -> str:
    try:
        with open(path, "rb") as file:
            size = file.seek(0, 2)
            file.seek(max(0, size - LOG_LIMIT))
            data = file.read()
    except OSError as error:
        return f"The log cannot be read: {error}"
    text = data.decode("utf-8", errors="replace")
    if size > LOG_LIMIT:
        text = f"[… the first {size - LOG_LIMIT:,} bytes are not shown]\n" + text
    return text or "(the log is empty)"
