"""The pipeline split by hand: layers per Mac in spin boxes, each edit checked by the
planner before it is taken.

A change of one Mac's count moves the boundary with its neighbour (the next Mac in rank
order, or the one before for the last), so the layers always add up to the model's.
The pane asks the planner (``ModelPane.try_split``); an edit that does not fit is
refused: the boxes go back to the split in force and the planner's reason (the Mac and
the gigabytes missing) is shown. "Reset" returns to the planner's own split.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QGridLayout,
    QHBoxLayout,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from core.plan.planner import Plan
from gui.style import set_role
from gui.widgets import clear_layout, label, section, wheel_needs_focus


def moved(split: Sequence[int], rank: int, value: int) -> tuple[int, ...]:
    """``split`` with ``rank`` set to ``value``, the difference taken from (or given to)
    its neighbour; the same total. A neighbour left with fewer than one layer makes a
    split the planner refuses ("needs at least one layer")."""
    counts = list(split)
    neighbour = rank + 1 if rank + 1 < len(counts) else rank - 1
    counts[neighbour] -= value - counts[rank]
    counts[rank] = value
    return tuple(counts)


class SplitEditor(QWidget):
    """``edited(split)`` when a person changes a count (rank order); ``reset()`` for the
    planner's split."""

    edited = Signal(tuple)
    reset = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.split: tuple[int, ...] = ()
        self.boxes: list[QSpinBox] = []
        self.names: list[str] = []
        self._filling = False
        self._by_hand = False
        self.grid = QGridLayout()
        self.grid.setHorizontalSpacing(10)
        self.grid.setVerticalSpacing(4)
        self.reset_button = QPushButton("Reset")
        set_role(self.reset_button, "link")
        self.reset_button.setToolTip("Go back to the planner's split")
        self.reset_button.clicked.connect(self.reset.emit)
        self.note = label("", "hint", wrap=True)
        self.refusal = label("", "error-text", wrap=True)
        self.refusal.hide()
        head = QHBoxLayout()
        head.addWidget(section("Layers per Mac · pipeline"))
        head.addStretch(1)
        head.addWidget(self.reset_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addLayout(head)
        layout.addLayout(self.grid)
        layout.addWidget(self.note)
        layout.addWidget(self.refusal)

    def show_plan(self, plan: Plan, by_hand: bool) -> None:
        """The split of ``plan`` (a pipeline), in rank order; ``by_hand``: set by a person."""
        counts = tuple(rank.layers for rank in plan.ranks)
        names = [rank.node for rank in plan.ranks]
        if names != self.names:
            self._rebuild(names)
        self._fill(counts)
        total = sum(counts)
        self.note.setText(
            f"Set by hand: {total} layers. Reset goes back to the planner's split."
            if by_hand
            else f"The planner's split of {total} layers: change a count to move a boundary."
        )
        self._by_hand = by_hand
        self.reset_button.setEnabled(by_hand)

    def refuse(self, reason: str) -> None:
        """The last edit did not fit: back to the split in force, and why."""
        self._fill(self.split)
        self.refusal.setText(f"Not applied. {reason}")
        self.refusal.show()

    def accepted(self) -> None:
        self.refusal.hide()

    def set_locked(self, locked: bool) -> None:
        for box in self.boxes:
            box.setEnabled(not locked)
        self.reset_button.setEnabled(not locked and self._by_hand)

    # -- internals --------------------------------------------------------------------

    def _rebuild(self, names: list[str]) -> None:
        for box in self.boxes:
            box.deleteLater()
        clear_layout(self.grid)
        self.boxes, self.names = [], names
        for rank, name in enumerate(names):
            box = QSpinBox()
            box.setRange(0, 9_999)
            # Shrinks to its minimum in the window's fixed-width column, rather than
            # holding it at its full width (QSpinBox's own policy).
            box.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
            box.setSuffix(" layers")
            box.setKeyboardTracking(False)  # typing "12" is one edit, not "1" then "12"
            wheel_needs_focus(box)  # scrolling the column past it must not move a layer
            box.setToolTip(f"Layers {name} holds (rank {rank})")
            box.valueChanged.connect(lambda value, r=rank: self._changed(r, value))
            self.grid.addWidget(label(name, "secondary"), rank // 2, (rank % 2) * 2)
            self.grid.addWidget(box, rank // 2, (rank % 2) * 2 + 1)
            self.boxes.append(box)

    def _fill(self, counts: Sequence[int]) -> None:
        self._filling = True
        try:
            for box, count in zip(self.boxes, counts, strict=False):
                box.setValue(count)
        finally:
            self._filling = False
        self.split = tuple(counts)

    def _changed(self, rank: int, value: int) -> None:
        if self._filling or len(self.split) != len(self.boxes):
            return
        self.edited.emit(moved(self.split, rank, value))
