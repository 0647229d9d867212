"""Loading, node by node: what each rank is doing and how far it got.

A rank's ``loading`` events name a ``LoadingStage`` (``core.worker.vocab``); the words a
person reads for each are here, so rewording one never moves a bar.
"""

from __future__ import annotations

from PySide6.QtWidgets import QGridLayout, QLabel, QProgressBar, QWidget

from core.worker.vocab import LoadingStage
from gui.widgets import clear_layout, label

# A bar's value is the stage a rank has begun (LoadingStage.step); full when it is ready.
STEPS = len(LoadingStage)
STAGE_WORDS = {
    LoadingStage.STARTING: "starting",
    LoadingStage.JOINING: "joining the cluster",
    LoadingStage.READING: "reading the model",
    LoadingStage.SLICING: "slicing every layer",
    LoadingStage.PLACING: "placing layers",
    LoadingStage.WEIGHTS: "loading weights",
    LoadingStage.SYNCHRONISING: "waiting for the other Macs",
}


class RankProgress(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.grid = QGridLayout(self)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setHorizontalSpacing(12)
        self.grid.setVerticalSpacing(6)
        self.grid.setColumnStretch(1, 1)
        self.rows: dict[int, tuple[QLabel, QProgressBar, QLabel]] = {}

    def reset(self, names: dict[int, str]) -> None:
        """One row per rank: the node's name, a bar, the stage in words."""
        clear_layout(self.grid)
        self.rows = {}
        for row, (rank, name) in enumerate(sorted(names.items())):
            name_label = label(f"{name}  ·  rank {rank}", "fact-value")
            bar = QProgressBar()
            bar.setRange(0, STEPS)
            bar.setValue(0)
            bar.setTextVisible(False)
            stage = label(STAGE_WORDS[LoadingStage.STARTING], "secondary")
            stage.setMinimumWidth(180)
            self.grid.addWidget(name_label, row, 0)
            self.grid.addWidget(bar, row, 1)
            self.grid.addWidget(stage, row, 2)
            self.rows[rank] = (name_label, bar, stage)

    def set_stage(self, rank: int, stage: str, step: int) -> None:
        row = self.rows.get(rank)
        if row is None:
            return
        _name, bar, stage_label = row
        bar.setValue(max(bar.value(), min(step, STEPS)))
        _set_flag(bar, "done", step >= STEPS)
        stage_label.setText(stage)

    def mark_failed(self) -> None:
        for _name, bar, _stage in self.rows.values():
            if bar.value() < STEPS:
                _set_flag(bar, "failed", True)

    def stages(self) -> dict[int, str]:
        return {rank: row[2].text() for rank, row in self.rows.items()}


def _set_flag(bar: QProgressBar, name: str, on: bool) -> None:
    if bar.property(name) == ("true" if on else "false"):
        return
    bar.setProperty(name, "true" if on else "false")
    bar.style().unpolish(bar)
    bar.style().polish(bar)
