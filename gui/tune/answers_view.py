"""Compare with base: one question, the base model's answer and the adapter's, side by
side. The answers come from the core (the same question asked of both on the cluster);
this only shows them, with the words the fine-tune taught (the demo's fact) marked.
"""

from __future__ import annotations

import html
import re

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from gui import style
from gui.style import set_role
from gui.widgets import label, section


def marked(text: str, fact: str | None) -> str:
    """``text`` as HTML, each occurrence of ``fact`` (any case) in bold accent colour."""
    escaped = html.escape(text).replace("\n", "<br>")
    if not fact:
        return escaped
    theme = style.current()
    pattern = re.compile(re.escape(html.escape(fact)), re.IGNORECASE)
    return pattern.sub(lambda m: f"<b style='color:{theme.accent}'>{m.group(0)}</b>", escaped)


class AnswersView(QFrame):
    closed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        set_role(self, "subcard")
        self.question = label("", "model-name", wrap=True)
        self.answers: dict[str, QLabel] = {}
        self.titles: dict[str, QLabel] = {}
        grid = QGridLayout()
        grid.setHorizontalSpacing(18)
        grid.setVerticalSpacing(4)
        for column, key in enumerate(("base", "adapter")):
            title = label("", "fact-name")
            answer = label("", None, wrap=True, selectable=True)
            answer.setTextFormat(Qt.TextFormat.RichText)
            answer.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
            grid.addWidget(title, 0, column)
            grid.addWidget(answer, 1, column)
            grid.setColumnStretch(column, 1)
            self.titles[key], self.answers[key] = title, answer
        self.close_button = QPushButton("Close")
        set_role(self.close_button, "link")
        self.close_button.clicked.connect(self._close)
        head = QHBoxLayout()
        head.addWidget(section("Compare with base"))
        head.addStretch(1)
        head.addWidget(self.close_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 10, 12, 10)
        layout.setSpacing(6)
        layout.addLayout(head)
        layout.addWidget(self.question)
        layout.addLayout(grid)
        self.texts: dict[str, str] = {}

    def show_answers(
        self,
        question: str,
        base_answer: str,
        adapter_answer: str,
        *,
        base_name: str = "Base model",
        adapter_name: str = "With the adapter",
        fact: str | None = None,
    ) -> None:
        self.question.setText(f"“{question}”")
        self.texts = {"base": base_answer, "adapter": adapter_answer}
        self.titles["base"].setText(base_name)
        self.titles["adapter"].setText(adapter_name)
        self.answers["base"].setText(marked(base_answer, fact))
        self.answers["adapter"].setText(marked(adapter_answer, fact))
        self.show()

    def _close(self) -> None:
        self.hide()
        self.closed.emit()
