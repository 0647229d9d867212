"""The conversation: a prompt box and the answer streaming in as tokens arrive.

Tokens can arrive faster than a text layout is worth redoing, so pieces are buffered and
written at most every ``FLUSH_MS`` (about as often as the plots redraw): smooth to the eye,
and the cost stays flat however fast a cluster generates.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QColor, QFont, QTextBlockFormat, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from core import units
from core.worker import protocol as p
from gui import style
from gui.style import set_role
from gui.widgets import OpaqueBackground

FLUSH_MS = 120


class ChatView(QWidget):
    submitted = Signal(str)
    stop_requested = Signal()  # "Stop this answer": the job stays up for the next question

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.answer = QTextBrowser()
        set_role(self.answer, "answer")
        self.answer.setOpenLinks(False)
        OpaqueBackground(self.answer.viewport(), "card_alt")  # streaming repaints it alone
        self.answer.setPlaceholderText("Answers stream in here.")
        self.prompt = QLineEdit()
        set_role(self.prompt, "prompt")
        self.prompt.setPlaceholderText("Ask the cluster something…")
        self.prompt.setClearButtonEnabled(True)
        self.prompt.returnPressed.connect(self._submit)
        self.send = QPushButton("Send")
        set_role(self.send, "primary")
        self.send.clicked.connect(self._submit)
        self.stop_answer = QPushButton("Stop this answer")
        self.stop_answer.setToolTip("End this answer here; the cluster stays ready")
        self.stop_answer.clicked.connect(self.stop_requested)
        self.stop_answer.hide()
        row = QHBoxLayout()
        row.setSpacing(8)
        row.addWidget(self.prompt, 1)
        row.addWidget(self.send)
        row.addWidget(self.stop_answer)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(8)
        layout.addWidget(self.answer, 1)
        layout.addLayout(row)
        self._buffer: list[str] = []
        self._segments: list[list[str]] = []  # [kind, text]: heading, text or meta
        self._open: str | None = None  # the request whose answer is being written
        self._flush = QTimer(self)
        self._flush.setSingleShot(True)
        self._flush.setInterval(FLUSH_MS)
        self._flush.timeout.connect(self.flush)
        self.set_accepting(False)
        style.notifier().changed.connect(self._rerender)

    # -- input --------------------------------------------------------------------------

    def set_accepting(self, accepting: bool, hint: str | None = None) -> None:
        self.prompt.setEnabled(accepting)
        self.send.setEnabled(accepting)
        if hint:
            self.prompt.setPlaceholderText(hint)

    def set_answering(self, answering: bool) -> None:
        """While an answer streams, "Stop this answer" takes the place of Send."""
        self.stop_answer.setVisible(answering)
        self.stop_answer.setEnabled(answering)
        self.send.setVisible(not answering)

    def _submit(self) -> None:
        text = self.prompt.text().strip()
        if text and self.send.isEnabled():
            self.prompt.clear()
            self.submitted.emit(text)

    # -- the transcript ---------------------------------------------------------------------

    def clear(self) -> None:
        self._flush.stop()
        self._buffer.clear()
        self._open = None
        self._segments.clear()
        self.answer.clear()

    def add_question(self, text: str) -> None:
        self.flush()
        self._open = None
        self._heading("You")
        self._write(text, "text", new_block=False)

    def add_asked(self, who: str, question: str) -> None:
        """What an API client asked, under who asked, scrolled to (the answer follows)."""
        self.flush()
        self._open = None
        self._heading(f"Asked through the API ({who})")
        self._write(question, "text", new_block=False)
        bar = self.answer.verticalScrollBar()
        bar.setValue(bar.maximum())

    def add_token(self, request: str, piece: str) -> None:
        if request != self._open:
            self.flush()
            self._open = request
            self._heading("MacMesh cluster")
        self._buffer.append(piece)
        if not self._flush.isActive():
            self._flush.start()

    def finish_answer(self, request: str, done: dict[str, Any]) -> None:
        """The answer's line: ``done`` is its figures as every surface shows them
        (``core.run.measure.telemetry.answer_figures``), never the worker's raw event."""
        self.flush()
        if request != self._open:  # no token events (telemetry off): show the whole text
            self._heading("MacMesh cluster")
            self._write(done["text"], "text", new_block=False)
        self._open = None
        tps, ttft = done["generation_tps"], done["ttft_s"]
        parts = [
            f"{done['generation_tokens']} tokens",
            f"{units.rate(tps)} tokens/s" if tps else None,
            f"first token after {units.seconds(ttft)}" if ttft is not None else None,
            "stopped" if done["finish_reason"] == p.CANCELLED else None,
        ]
        self._write(" · ".join(p for p in parts if p), "meta", new_block=True)

    def add_note(self, text: str) -> None:
        self.flush()
        self._open = None
        self._write(text, "meta", new_block=True)

    def flush(self) -> None:
        self._flush.stop()
        if self._buffer:
            text, self._buffer = "".join(self._buffer), []
            self._write(text, "text", new_block=False)

    def text(self) -> str:
        self.flush()
        return self.answer.toPlainText()

    def _heading(self, who: str) -> None:
        self._write(who, "heading", new_block=True)
        self._write("", "text", new_block=True)

    def _write(self, text: str, kind: str, *, new_block: bool) -> None:
        """Append to the transcript and to the record a theme change re-renders from."""
        if new_block or not self._segments:
            self._segments.append([kind, text])
        else:
            self._segments[-1][1] += text
        self._render(text, kind, new_block)

    def _render(self, text: str, kind: str, new_block: bool) -> None:
        theme = style.current()
        bar = self.answer.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        cursor = QTextCursor(self.answer.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        char = QTextCharFormat()
        char.setForeground(QColor(theme.text if kind == "text" else theme.text2))
        weight = QFont.Weight.DemiBold if kind == "heading" else QFont.Weight.Normal
        char.setFont(style.ui_font(14 if kind == "text" else 12, weight))
        if new_block and not self.answer.document().isEmpty():
            block = QTextBlockFormat()
            block.setTopMargin(14 if kind == "heading" else 3)
            cursor.insertBlock(block)
        cursor.insertText(text, char)
        if at_end:
            bar.setValue(bar.maximum())

    def _rerender(self, *_args: object) -> None:
        self.flush()
        self.answer.clear()
        for kind, text in self._segments:
            self._render(text, kind, new_block=True)
