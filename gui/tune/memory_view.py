"""Memory per Mac in the Fine-tune view: before a Start, what the settings need on each
Mac (``core.tune.fit``) and the fit's verdict in one line; while training, each Mac's
peak memory so far (from the reports). Both against what the Mac can give the GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QVBoxLayout, QWidget

from core import units
from gui.model.memory_bars import Bar, MemoryBars
from gui.style import set_role
from gui.widgets import label, section

if TYPE_CHECKING:
    from core.tune.fit import TrainingFit

PLANNED_TITLE = "Memory per Mac · planned for these settings, of usable memory"
PEAK_TITLE = "Memory per Mac · peak while training, of usable memory"
WAITING = "Each Mac's peak memory appears once training starts."


class TuneMemory(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = section(PLANNED_TITLE)
        self.bars = MemoryBars()
        self.bars.empty_text = WAITING
        self.fit_line = label("", "hint", wrap=True)
        self.fit_line.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        layout.addWidget(self.title)
        layout.addWidget(self.bars)
        layout.addWidget(self.fit_line)

    def show_fit(self, fit: TrainingFit) -> None:
        """A ``core.tune.fit.TrainingFit``: each Mac's need, and the verdict."""
        self.title.setText(PLANNED_TITLE.upper())
        self.bars.show_bars(
            [
                Bar(
                    n.name,
                    n.need_bytes,
                    n.usable_bytes,
                    f"the model {units.size(n.weights_bytes)}, the adapter and its "
                    f"optimizer {units.size(n.lora_bytes)}, activations "
                    f"{units.size(n.activation_bytes)}",
                )
                for n in fit.nodes
            ]
        )
        self.fit_line.setText(fit.message)
        set_role(self.fit_line, "hint" if fit.ok else "error-text")
        self.fit_line.setVisible(bool(fit.message))

    def show_nothing(self, words: str) -> None:
        self.bars.show_bars([], words)
        self.fit_line.hide()

    def start_training(self) -> None:
        """Training starts: the bars will show what it really takes."""
        self.title.setText(PEAK_TITLE.upper())
        self.show_nothing(WAITING)

    def show_peak(self, peak: Mapping[str, int], usable: Mapping[str, int]) -> None:
        """Each Mac's peak memory so far, against its usable memory."""
        self.bars.show_bars(
            [
                Bar(node, int(peak[node]), usable.get(node, 0), f"peak {units.size(peak[node])}")
                for node in (list(usable) or list(peak))
                if node in peak
            ]
        )
