"""How many requests the cluster answers at once, and how much of past conversations each
Mac keeps: the ``batch`` and ``prompt_cache_mb`` settings (issue 24), in the window.

Both take memory on every Mac (each request at once holds its own KV cache; the prompt
cache holds up to its bound), so the planner counts them: a change re-plans at once, and
when the batch is what does not fit the plan says so, naming the largest batch that fits.
The choice is saved in the core's settings, which the next Start reads, as ``macmesh run``
does (``--batch`` and ``--prompt-cache-mb`` override it there).
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QGridLayout, QSpinBox, QWidget

from core.run.planning import Serving
from core.settings import MAX_PROMPT_CACHE_MB
from core.worker import protocol as p
from gui.widgets import label, wheel_needs_focus

BATCH_TIP = (
    "How many requests the cluster answers together (the API's clients, the chat): "
    "more gives more tokens per second in all, and each one needs memory on every Mac "
    "for its own cache."
)
CACHE_TIP = (
    "How much of past conversations each Mac keeps, so the next turn of a chat does not "
    "read it again from its start. Off: every turn is read whole."
)


class ServingChoice(QWidget):
    """The rows "Requests at once [8]" and "Prompt cache per Mac [256 MB]":
    ``serving_changed(Serving)`` when the person changes either (not when they are set
    with ``select``)."""

    serving_changed = Signal(object)  # Serving

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.batch = QSpinBox()
        self.batch.setRange(1, p.MAX_BATCH)
        self.batch.setToolTip(BATCH_TIP)
        self.cache = QSpinBox()
        self.cache.setRange(0, MAX_PROMPT_CACHE_MB)
        self.cache.setSingleStep(64)
        self.cache.setSuffix(" MB")
        self.cache.setSpecialValueText("Off")  # shown for 0
        self.cache.setToolTip(CACHE_TIP)
        for box in (self.batch, self.cache):
            wheel_needs_focus(box)  # scrolling the column past it must not change it
            box.setKeyboardTracking(False)  # re-plan once a typed number is whole
        self.select(Serving())
        self.batch.valueChanged.connect(self._changed)
        self.cache.valueChanged.connect(self._changed)
        # Two rows, not one: the window's left column is narrow, and must never scroll
        # sideways (it would hide the Cluster pane's RDMA column).
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(8)
        grid.setVerticalSpacing(4)
        for row, (text, box, tip) in enumerate(
            (
                ("Requests at once", self.batch, BATCH_TIP),
                ("Prompt cache per Mac", self.cache, CACHE_TIP),
            )
        ):
            name = label(text, "secondary")
            name.setToolTip(tip)
            grid.addWidget(name, row, 0)
            grid.addWidget(box, row, 1)
        grid.setColumnStretch(2, 1)

    def selected(self) -> Serving:
        return Serving(self.batch.value(), self.cache.value())

    def select(self, serving: Serving) -> None:
        """Show ``serving`` (the remembered settings) without saying it changed."""
        for box, value in ((self.batch, serving.batch), (self.cache, serving.prompt_cache_mb)):
            box.blockSignals(True)
            box.setValue(value)
            box.blockSignals(False)

    def set_locked(self, locked: bool) -> None:
        self.batch.setEnabled(not locked)
        self.cache.setEnabled(not locked)

    def _changed(self, _value: int) -> None:
        self.serving_changed.emit(self.selected())
