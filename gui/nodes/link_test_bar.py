"""The Cables view's "Test links": available while a job is ready, it asks for a link
test (the Run pane's controller runs it off the GUI thread) and draws each result on its
cable of the map."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QWidget

from gui.nodes.link_captions import tested_captions
from gui.nodes.topology_view import TopologyView
from gui.widgets import label

if TYPE_CHECKING:
    from core.run.tasks.linktest import LinkTest

IDLE_WORDS = "Start a job on two Macs or more to test its links."


class LinkTestBar(QWidget):
    requested = Signal()

    def __init__(self, view: TopologyView, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.button = QPushButton("Test links")
        self.button.setToolTip(
            "Measure every link the job uses through MLX (send/recv per pair, 4 KiB to "
            "64 MiB) and set it against the cable's rate"
        )
        self.button.clicked.connect(self._clicked)
        self.note = label(IDLE_WORDS, "hint", wrap=True)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.button)
        row.addWidget(self.note, 1)
        self.tested: LinkTest | None = None
        self.failure: str | None = None  # kept until the next job: it says what happened
        self.set_available(False)

    def set_available(self, available: bool, running: bool = False) -> None:
        """``available``: a job is ready for a test; ``running``: a job holds ranks."""
        self.button.setEnabled(available)
        if self.failure is not None:
            return
        if not available and not running and self.tested is None:
            self.note.setText(IDLE_WORDS)
        elif available and self.tested is None:
            self.note.setText("The job is ready: Test links measures each of its links.")

    def _clicked(self) -> None:
        self.button.setEnabled(False)
        self.note.setText("Testing the links, 4 KiB to 64 MiB…")
        self.requested.emit()

    def show_tested(self, tested: LinkTest) -> None:
        self.tested = tested
        self.view.set_measured(tested_captions(tested))
        count = len(tested.results)
        self.note.setText(
            f"{count} link{'s' * (count != 1)} measured: the figures are on the cables "
            "(latency in their tooltips)."
        )

    def show_failed(self, message: str) -> None:
        self.failure = message
        self.note.setText(message)

    def clear(self) -> None:
        self.tested = self.failure = None
        self.note.setText("Test links is available once the job is ready.")
        self.view.set_measured({})
