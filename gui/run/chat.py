"""The conversation: a prompt box and the answer streaming in as tokens arrive.

Tokens can arrive faster than a text layout is worth redoing, so pieces are buffered and
written at most every ``FLUSH_MS`` (about as often as the plots redraw): smooth to the eye,
and the cost stays flat however fast a cluster generates.

Answers stream side by side: the ranks answer a batch of requests at once (the API's
clients and the window's own question), their tokens interleaved. Each answer keeps its
own place in the transcript, under its question, and grows there; a new heading per
token switch would shred eight streams into one word per heading.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

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
from core.run.measure.telemetry import AnswerFigures
from core.worker import protocol as p
from gui import style
from gui.style import set_role
from gui.widgets import OpaqueBackground

FLUSH_MS = 120
CALL_SHOWN = 200  # characters of a tool call's arguments shown in the chat


@dataclass
class _Streaming:
    """An answer being written: its text's end in the document (a cursor others' inserts
    do not move), its segment of the record, and the pieces not yet written."""

    end: QTextCursor
    segment: list[str]
    pieces: list[str] = field(default_factory=list)
    lines_after: int = 0  # lines written under it already (its tool calls), in the record


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
        self.prompt.setPlaceholderText("Ask the cluster…")
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
        self._segments: list[list[str]] = []  # [kind, text]: heading, text or meta
        # By request: the answers being written. A Start clears them with the transcript
        # (request ids start over with each job).
        self._streaming: dict[str, _Streaming] = {}
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
        self._streaming.clear()
        self._segments.clear()
        self.answer.clear()

    def add_question(self, text: str) -> None:
        self.flush()
        self._heading("You")
        self._write(text, "text", new_block=False)

    def add_asked(self, who: str, question: str, request: str | None = None) -> None:
        """What an API client asked, under who asked, scrolled to; its answer (``request``)
        streams in right under it, whatever the others in its batch write meanwhile."""
        self.flush()
        self._heading(f"Asked through the API ({who})")
        self._write(question, "text", new_block=False)
        if request is not None and request not in self._streaming:
            self._begin(request)
        bar = self.answer.verticalScrollBar()
        bar.setValue(bar.maximum())

    def add_token(self, request: str, piece: str) -> None:
        streaming = self._streaming.get(request) or self._begin(request)
        streaming.pieces.append(piece)
        if not self._flush.isActive():
            self._flush.start()

    def _begin(self, request: str) -> _Streaming:
        """The answer's place: its heading and an empty text at the transcript's end."""
        self.flush()
        self._heading("MacMesh cluster")
        end = QTextCursor(self.answer.document())
        end.movePosition(QTextCursor.MoveOperation.End)
        end.setKeepPositionOnInsert(True)  # what others write after it stays after it
        streaming = self._streaming[request] = _Streaming(end, self._segments[-1])
        return streaming

    def finish_answer(self, request: str, done: AnswerFigures) -> None:
        """The answer's line: ``done`` is its figures as every surface shows them
        (``core.run.measure.telemetry.answer_figures``), never the worker's raw event."""
        self.flush()
        streaming = self._streaming.pop(request, None)
        if streaming is None:  # no token events (telemetry off): show the whole text
            self._heading("MacMesh cluster")
            self._write(done.text, "text", new_block=False)
        elif not streaming.segment[1] and done.text:  # its place, kept for no token
            streaming.segment[1] = done.text
            self._insert(streaming.end, done.text, "text", new_block=False)
        tps, ttft = done.generation_tps, done.ttft_s
        parts = [
            f"{done.generation_tokens} tokens",
            f"{units.rate(tps)} tokens/s" if tps else None,
            f"first token after {units.seconds(ttft)}" if ttft is not None else None,
            "stopped" if done.finish_reason == p.CANCELLED else None,
        ]
        line = " · ".join(p for p in parts if p)
        if streaming is None:
            self._write(line, "meta", new_block=True)
        else:  # right under the answer, in the transcript and in its record
            at = next(i for i, seg in enumerate(self._segments) if seg is streaming.segment)
            self._segments.insert(at + 1 + streaming.lines_after, ["meta", line])
            self._insert(streaming.end, line, "meta", new_block=True)

    def add_calls(self, request: str, calls: list[dict[str, object]]) -> None:
        """The tool calls an API answer made (``request``), each on a line of its own
        under the answer (at the transcript's end once the answer is done)."""
        self.flush()
        lines = [f"Tool call: {call_said(call)}" for call in calls]
        streaming = self._streaming.get(request)
        if streaming is None:
            for line in lines:
                self._write(line, "meta", new_block=True)
            return
        at = next(i for i, seg in enumerate(self._segments) if seg is streaming.segment)
        for line in lines:
            streaming.lines_after += 1
            self._segments.insert(at + streaming.lines_after, ["meta", line])
            self._insert(streaming.end, line, "meta", new_block=True)

    def add_note(self, text: str) -> None:
        self.flush()
        self._write(text, "meta", new_block=True)

    def flush(self) -> None:
        self._flush.stop()
        for streaming in self._streaming.values():
            if streaming.pieces:
                text, streaming.pieces = "".join(streaming.pieces), []
                streaming.segment[1] += text
                self._insert(streaming.end, text, "text", new_block=False)

    def _insert(self, end: QTextCursor, text: str, kind: str, *, new_block: bool) -> None:
        """Write at an answer's ``end`` and move it past what was written (it keeps its
        place on inserts, its own too)."""
        document = self.answer.document()
        before, position = document.characterCount(), end.position()
        self._render(text, kind, new_block, at=position)
        end.setPosition(position + document.characterCount() - before)

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

    def _render(self, text: str, kind: str, new_block: bool, at: int | None = None) -> None:
        """Write at the transcript's end, or at position ``at``."""
        theme = style.current()
        bar = self.answer.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        cursor = QTextCursor(self.answer.document())
        if at is None:
            cursor.movePosition(QTextCursor.MoveOperation.End)
        else:
            cursor.setPosition(at)
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
        ends = {id(s.segment): s.end for s in self._streaming.values()}
        for segment in self._segments:
            kind, text = segment
            self._render(text, kind, new_block=True)
            if id(segment) in ends:  # an answer still streaming ends here now
                ends[id(segment)].movePosition(QTextCursor.MoveOperation.End)


def call_said(call: dict[str, object]) -> str:
    """A call as the chat shows it: its name and its arguments' JSON (shortened)."""
    arguments = json.dumps(call.get("arguments", {}), ensure_ascii=False)
    if len(arguments) > CALL_SHOWN:
        arguments = arguments[: CALL_SHOWN - 1] + "…"
    return f"{call.get('name', '?')} {arguments}"
