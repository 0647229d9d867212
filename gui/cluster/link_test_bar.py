"""The Cables view's "Test links": available while a job is ready, it asks for a link
test (the Run pane's controller runs it off the GUI thread) and draws each result on its
cable of the map. On the demo its result says plainly that the simulated Macs share this
machine's cores and loopback, in Compare's words (``core.run.planning``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QProgressBar, QPushButton, QVBoxLayout, QWidget

from core.run.planning import links_simulated
from core.units import duration, size
from core.worker import protocol as p
from gui.cluster.link_captions import tested_captions
from gui.cluster.topology_view import TopologyView
from gui.widgets import label

if TYPE_CHECKING:
    from core.run.tasks.linktest import LinkTest

IDLE_WORDS = "Start a job on two Macs or more to test its links."


class LinkTestBar(QWidget):
    requested = Signal()
    stop_requested = Signal(str)  # the running link test's request id

    def __init__(
        self,
        view: TopologyView,
        simulated: Callable[[], bool] = lambda: False,
        parent: QWidget | None = None,
    ) -> None:
        """``simulated``: whether the Macs on the map are the demo's (asked per result)."""
        super().__init__(parent)
        self.view = view
        self.simulated = simulated
        self.button = QPushButton("Test links")
        self.button.setToolTip(
            "Measure every link the job uses through MLX (send/recv per pair, 4 KiB to "
            "64 MiB) and set it against the cable's rate"
        )
        self.button.clicked.connect(self._clicked)
        self.note = label(IDLE_WORDS, "hint", wrap=True)
        self.stop_button = QPushButton("Stop the test")
        self.stop_button.setToolTip("End the link test at the next message size; the job stays")
        self.stop_button.clicked.connect(self._stop_clicked)
        self.stop_button.hide()
        self.request: str | None = None  # the running test's, from its progress
        self.progress = QProgressBar()
        self.progress.setTextVisible(False)
        self.progress.setFixedHeight(6)
        self.progress.hide()
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(4)
        row = QHBoxLayout()
        row.addWidget(self.button)
        row.addWidget(self.note, 1)
        row.addWidget(self.stop_button)
        column.addLayout(row)
        column.addWidget(self.progress)
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

    def show_progress(self, event: p.LinkProgress, names: dict[int, str]) -> None:
        """A step of the test done (``link_progress``): which link at which size, how far,
        and the time left at the pace so far."""
        done, total = event["done"], max(event["total"], 1)
        pair = event["pair"]
        what = (
            f"{names.get(pair[0], pair[0])} ↔ {names.get(pair[1], pair[1])}"
            if pair
            else "all Macs at once (all_sum)"
        )
        elapsed = event["elapsed_s"]
        left = elapsed / done * (total - done) if done else None
        words = f"Testing {what} at {size(event['bytes'])}: step {done} of {total}"
        if left is not None and done < total:
            words += f", about {duration(left)} left"
        self.note.setText(words + ".")
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        self.progress.show()
        self.request = event["request"] or None
        self.stop_button.setVisible(self.request is not None and done < total)

    def _stop_clicked(self) -> None:
        if self.request is not None:
            self.stop_button.setEnabled(False)
            self.note.setText("Stopping the link test at the end of this message size…")
            self.stop_requested.emit(self.request)

    def _ended(self) -> None:
        self.progress.hide()
        self.stop_button.hide()
        self.stop_button.setEnabled(True)
        self.request = None

    def show_tested(self, tested: LinkTest) -> None:
        self.tested = tested
        self._ended()
        self.view.set_measured(tested_captions(tested))
        count = len(tested.results)
        words = (
            f"{count} link{'s' * (count != 1)} measured: the figures are on the cables "
            "(latency in their tooltips)."
        )
        if self.simulated():
            words += " " + links_simulated(len(tested.nodes))
        self.note.setText(words)

    def show_failed(self, message: str) -> None:
        self.failure = message
        self._ended()
        self.note.setText(message)

    def clear(self) -> None:
        self.tested = self.failure = None
        self._ended()
        self.note.setText("Test links is available once the job is ready.")
        self.view.set_measured({})
