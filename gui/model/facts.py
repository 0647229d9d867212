"""What a model is, in a few facts a person checks before running it."""

from __future__ import annotations

from PySide6.QtWidgets import QGridLayout, QLabel, QVBoxLayout, QWidget

from core import units
from core.model.info import ModelInfo
from gui.widgets import label

FACTS = ("Architecture", "Parameters", "Layers", "Attention heads", "Quantization", "Weights")


class ModelFacts(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(8)
        self.name = label("", "model-name", selectable=True)
        layout.addWidget(self.name)
        grid = QGridLayout()
        grid.setHorizontalSpacing(14)
        grid.setVerticalSpacing(4)
        self.values: dict[str, QLabel] = {}
        for i, fact in enumerate(FACTS):
            row, column = divmod(i, 3)
            name = label(fact, "fact-name")
            value = label("", "fact-value")
            grid.addWidget(name, row * 2, column)
            grid.addWidget(value, row * 2 + 1, column)
            self.values[fact] = value
        for column in range(3):
            grid.setColumnStretch(column, 1)
        layout.addLayout(grid)

    def show_model(self, info: ModelInfo) -> None:
        self.name.setText(info.name)
        self.name.setToolTip(str(info.path))
        kv = f" ({info.kv_heads} KV)" if info.kv_heads != info.heads else ""
        texts = {
            "Architecture": info.architecture,
            "Parameters": units.count(info.parameter_count),
            "Layers": str(info.layers),
            "Attention heads": f"{info.heads}{kv}",
            "Quantization": info.quantization_label,
            "Weights": units.size(info.bytes_on_disk),
        }
        for fact, text in texts.items():
            self.values[fact].setText(text)
        self.values["Weights"].setToolTip(
            "The safetensors files: what the plan places on the Macs. The library's Size is "
            f"the whole folder, tokenizer and config included. {units.BYTES_NOTE}"
        )

    def text(self) -> str:
        """Everything shown, as one string (tests and accessibility)."""
        facts = [f"{k}: {v.text()}" for k, v in self.values.items()]
        return "\n".join([self.name.text(), *facts])
