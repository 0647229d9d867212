"""The fine-tune's settings, built from ``TuneSettings``' own fields: each with its default
and its explanation (a caption under the main ones, a tooltip on every one). The five
that matter most are shown; the rest sit under "More".

``settings()`` reads the form into a ``TuneSettings``; ``check(ranks)`` asks
``TuneSettings.check`` and shows its refusal (``SettingsError``) under the form, in its
own words.
"""

from __future__ import annotations

from dataclasses import fields

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QFormLayout,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from core.tune.settings import SettingsError, TuneSettings
from gui.style import set_role
from gui.widgets import label

MAIN = ("iters", "batch_size", "learning_rate", "lora_rank", "lora_layers")
LABELS = {
    "iters": "Iterations",
    "batch_size": "Batch size",
    "learning_rate": "Learning rate",
    "lora_rank": "LoRA rank",
    "lora_layers": "LoRA layers",
    "steps_per_report": "Steps per report",
    "steps_per_eval": "Steps per validation",
    "steps_per_save": "Steps per checkpoint",
    "val_batches": "Validation batches",
    "max_seq_length": "Longest example",
    "seed": "Seed",
}
INT_LIMIT = 1_000_000_000


class SettingsForm(QWidget):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.explanations = TuneSettings.explanations()
        self.defaults = TuneSettings()
        self.inputs: dict[str, QSpinBox | QLineEdit] = {}
        main = QFormLayout()
        main.setVerticalSpacing(2)
        main.setHorizontalSpacing(12)
        more = QFormLayout()
        more.setVerticalSpacing(6)
        more.setHorizontalSpacing(12)
        for f in fields(TuneSettings):
            field_input = self._input(f.name, getattr(self.defaults, f.name))
            self.inputs[f.name] = field_input
            name = label(LABELS.get(f.name, f.name.replace("_", " ").capitalize()))
            name.setToolTip(self.explanations[f.name])
            if f.name in MAIN:
                main.addRow(name, field_input)
                caption = label(self.explanations[f.name], "hint", wrap=True)
                main.addRow("", caption)
            else:
                more.addRow(name, field_input)
        self.more_button = QPushButton("More settings")
        set_role(self.more_button, "link")
        self.more_button.setCheckable(True)
        self.more = QWidget()
        self.more.setLayout(more)
        self.more.hide()
        self.more_button.toggled.connect(self._show_more)
        self.error = label("", "error-text", wrap=True)
        self.error.hide()
        self.reset_button = QPushButton("Defaults")
        set_role(self.reset_button, "link")
        self.reset_button.setToolTip("Every setting back to its default")
        self.reset_button.clicked.connect(self.reset)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        layout.addLayout(main)
        layout.addWidget(self.more_button)
        layout.addWidget(self.more)
        layout.addWidget(self.error)

    def _input(self, name: str, default: object) -> QSpinBox | QLineEdit:
        if isinstance(default, int):
            box = QSpinBox()
            box.setRange(-1 if name == "val_batches" else 0, INT_LIMIT)
            box.setValue(default)
            box.setToolTip(self.explanations[name])
            box.valueChanged.connect(lambda _v: self._edited())
            return box
        line = QLineEdit(_float_text(float(str(default))))
        line.setToolTip(self.explanations[name])
        line.textEdited.connect(lambda _t: self._edited())
        return line

    def _show_more(self, shown: bool) -> None:
        self.more.setVisible(shown)
        self.more_button.setText("Fewer settings" if shown else "More settings")

    def _edited(self) -> None:
        self.error.hide()
        self.changed.emit()

    # -- values ---------------------------------------------------------------------------

    def settings(self) -> TuneSettings:
        """The form as settings; ``SettingsError`` when a field is not a number."""
        values: dict[str, object] = {}
        for name, widget in self.inputs.items():
            if isinstance(widget, QSpinBox):
                values[name] = widget.value()
                continue
            text = widget.text().strip()
            try:
                values[name] = float(text)
            except ValueError:
                raise SettingsError(
                    f"the {LABELS.get(name, name).lower()} must be a number, e.g. "
                    f"{_float_text(float(str(getattr(self.defaults, name))))}"
                ) from None
        return TuneSettings.from_dict(values)

    def set_settings(self, settings: TuneSettings) -> None:
        for name, widget in self.inputs.items():
            value = getattr(settings, name)
            if isinstance(widget, QSpinBox):
                widget.setValue(int(value))
            else:
                widget.setText(_float_text(float(value)))
        self.error.hide()

    def reset(self) -> None:
        self.set_settings(self.defaults)

    def check(self, ranks: int) -> TuneSettings | None:
        """The settings when ``TuneSettings.check`` takes them for ``ranks`` Macs; else
        None, with its refusal shown under the form."""
        try:
            settings = self.settings()
            settings.check(ranks)
        except SettingsError as error:
            self.show_error(str(error))
            return None
        self.error.hide()
        return settings

    def show_error(self, message: str) -> None:
        self.error.setText(
            message[:1].upper() + message[1:] + ("" if message.endswith(".") else ".")
        )
        self.error.show()

    def set_locked(self, locked: bool) -> None:
        for widget in self.inputs.values():
            widget.setEnabled(not locked)
        self.reset_button.setEnabled(not locked)


def _float_text(value: float) -> str:
    """1e-4 as people write it (Python's repr gives 0.0001)."""
    if value and (abs(value) < 1e-3 or abs(value) >= 1e5):
        mantissa, exponent = f"{value:e}".split("e")
        return f"{float(mantissa):g}e{int(exponent)}"
    return f"{value:g}"
