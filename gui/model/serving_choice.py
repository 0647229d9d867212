"""How many requests the cluster answers at once, how much of past conversations each
Mac keeps, and how the KV cache is stored: the ``batch``, ``prompt_cache_mb`` and
``kv_bits`` settings (issues 24 and 37), in the window.

Both take memory on every Mac (each request at once holds its own KV cache; the prompt
cache holds up to its bound), so the planner counts them: a change re-plans at once, and
when the batch is what does not fit the plan says so, naming the largest batch that fits.
The choice is saved in the core's settings, which the next Start reads, as ``macmesh run``
does (``--batch``, ``--prompt-cache-mb`` and ``--kv-bits`` override it there). The KV
cache's group size is the setting's (``kv_group_size``), kept as it is.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QGridLayout, QSpinBox, QWidget

from core.run.planning import Serving
from core.settings import MAX_PROMPT_CACHE_MB
from core.worker import kvbits
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

KV_TIP = (
    "How each Mac stores the cache of the requests' past tokens: 8 or 4 bits take about a "
    "half or a quarter of the memory, so a longer context or more requests fit, at a "
    "small cost in quality (docs/kv-cache.md)."
)
KV_CHOICES = (("16-bit", kvbits.NONE), ("8-bit", 8), ("4-bit", 4))


class ServingChoice(QWidget):
    """The rows "Requests at once [8]", "Prompt cache per Mac [256 MB]" and "KV cache
    [16-bit]": ``serving_changed(Serving)`` when the person changes one (not when they
    are set with ``select``)."""

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
        self.kv = QComboBox()
        for text, bits in KV_CHOICES:
            self.kv.addItem(text, bits)
        self.kv.setToolTip(KV_TIP)
        self._group_size = kvbits.DEFAULT_GROUP_SIZE
        for box in (self.batch, self.cache, self.kv):
            wheel_needs_focus(box)  # scrolling the column past it must not change it
        for box in (self.batch, self.cache):
            box.setKeyboardTracking(False)  # re-plan once a typed number is whole
        self.select(Serving())
        self.batch.valueChanged.connect(self._changed)
        self.cache.valueChanged.connect(self._changed)
        self.kv.currentIndexChanged.connect(self._changed)
        # Two rows, not one: the window's left column is narrow, and must never scroll
        # sideways (it would hide the Cluster pane's RDMA column).
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(8)
        grid.setVerticalSpacing(4)
        rows: tuple[tuple[str, QWidget, str], ...] = (
            ("Requests at once", self.batch, BATCH_TIP),
            ("Prompt cache per Mac", self.cache, CACHE_TIP),
            ("KV cache", self.kv, KV_TIP),
        )
        for row, (text, widget, tip) in enumerate(rows):
            name = label(text, "secondary")
            name.setToolTip(tip)
            grid.addWidget(name, row, 0)
            grid.addWidget(widget, row, 1)
        grid.setColumnStretch(2, 1)

    def selected(self) -> Serving:
        bits = int(self.kv.currentData())
        return Serving(self.batch.value(), self.cache.value(), bits, self._group_size)

    def select(self, serving: Serving) -> None:
        """Show ``serving`` (the remembered settings) without saying it changed."""
        for box, value in ((self.batch, serving.batch), (self.cache, serving.prompt_cache_mb)):
            box.blockSignals(True)
            box.setValue(value)
            box.blockSignals(False)
        self.kv.blockSignals(True)
        self.kv.setCurrentIndex(max(0, self.kv.findData(serving.kv_bits)))
        self.kv.blockSignals(False)
        self._group_size = serving.kv_group_size

    def set_locked(self, locked: bool) -> None:
        self.batch.setEnabled(not locked)
        self.cache.setEnabled(not locked)
        self.kv.setEnabled(not locked)

    def _changed(self, _value: int) -> None:
        self.serving_changed.emit(self.selected())
