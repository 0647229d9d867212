"""Where the nodes get their part of the model: the ``model_source`` setting (issue 13).

Auto: a node downloads its own files from Hugging Face when the model came from there
and the node reaches it, else this Mac copies them. Hugging Face: always (a node that
cannot fails the checks, saying why). This Mac: always copied, the Hub never asked. The
choice is saved in the core's settings, which the next Start reads, as ``macmesh run``
does (``--model-source`` overrides it there).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QWidget

from core.worker.vocab import ModelSource
from gui.widgets import label, wheel_needs_focus

CHOICES = {
    ModelSource.AUTO: "Hugging Face, else this Mac",
    ModelSource.HUB: "Hugging Face",
    ModelSource.THIS_MAC: "This Mac",
}
TIPS = {
    ModelSource.AUTO: "Each node downloads its own files from Hugging Face when the model "
    "came from there and the node reaches it; otherwise this Mac copies them over the network.",
    ModelSource.HUB: "Each node downloads its own files from Hugging Face; a node that cannot (no "
    "network, or a model not from Hugging Face) fails the checks and says why.",
    ModelSource.THIS_MAC: "This Mac copies each node's files; Hugging Face is never asked "
    "(offline studios, or a slow internet link).",
}


class ModelSourceChooser(QWidget):
    """The row "Nodes get the model from [choice]": ``source_changed(value)`` when the person
    changes it (not when it is set with ``select``)."""

    source_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.combo = QComboBox()
        # Sized to the column, not to its longest choice: the window's left column must
        # never scroll sideways (it would hide the Cluster pane's RDMA column).
        self.combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.combo.setMinimumContentsLength(12)
        wheel_needs_focus(self.combo)  # scrolling the column past it must not change it
        for value, text in CHOICES.items():
            self.combo.addItem(text, value.value)
            self.combo.setItemData(self.combo.count() - 1, TIPS[value], Qt.ItemDataRole.ToolTipRole)
        self.combo.setToolTip(TIPS[ModelSource.AUTO])
        self.combo.activated.connect(self._chosen)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(8)
        row.addWidget(label("Nodes get the model from", "secondary"))
        row.addWidget(self.combo, 1)

    def selected(self) -> ModelSource:
        return ModelSource(self.combo.currentData())

    def select(self, value: str) -> None:
        """Show ``value`` (a remembered setting); an unknown one shows auto."""
        index = self.combo.findData(value if value in CHOICES else ModelSource.AUTO.value)
        self.combo.setCurrentIndex(index)
        self.combo.setToolTip(TIPS[self.selected()])

    def set_locked(self, locked: bool) -> None:
        self.combo.setEnabled(not locked)

    def _chosen(self, _index: int) -> None:
        self.combo.setToolTip(TIPS[self.selected()])
        self.source_changed.emit(self.selected())
