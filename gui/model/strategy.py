"""Auto | Pipeline | Tensor, each with the planner's verdict and its reason.

A choice that cannot work is greyed out and says why ("the model's 9 attention heads ...
do not divide by 2 nodes"). A remembered choice stays selected even when it stops
working (say, the node count changed): the Run pane then refuses to start and shows the
reason, rather than silently running something else.
"""

from __future__ import annotations

import functools

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QButtonGroup, QFrame, QHBoxLayout, QRadioButton, QVBoxLayout, QWidget

from core.plan.estimate import Estimate
from core.plan.planner import Plan
from core.worker.vocab import Strategy
from gui.model.planning import BLURBS, CHOICES, LABELS
from gui.style import set_role
from gui.widgets import Badge, label

VERDICT_BADGES = {
    "fits": ("Fits", "success"),
    "does_not_fit": ("Doesn't fit", "warning"),
    "invalid": ("Not possible", "danger"),
}


class StrategyOption(QFrame):
    """One choice: radio button, blurb, verdict badge, and the reason in a sentence."""

    def __init__(self, choice: Strategy, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.choice = choice
        set_role(self, "option")
        self.radio = QRadioButton(LABELS[choice])
        self.blurb = label(BLURBS[choice], "hint")
        self.badge = Badge("", "muted")
        self.badge.hide()
        self.reason = label("", "secondary", wrap=True)
        self.reason.hide()
        self.estimate = label("", "hint", wrap=True)  # the speed estimate, with its band
        self.estimate.hide()
        top = QHBoxLayout()
        top.setSpacing(8)
        top.addWidget(self.radio)
        top.addWidget(self.blurb)
        top.addStretch(1)
        top.addWidget(self.badge)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 7, 10, 8)
        layout.setSpacing(3)
        layout.addLayout(top)
        layout.addWidget(self.reason)
        layout.addWidget(self.estimate)
        self._works = True
        self.radio.toggled.connect(self._restyle)
        self.setCursor(Qt.CursorShape.PointingHandCursor)

    def show_plan(self, plan: Plan | None) -> None:
        if plan is None:
            self.badge.hide()
            self.reason.hide()
            self._works = True
            self.radio.setEnabled(True)
            self._restyle()
            return
        text, kind = VERDICT_BADGES[plan.verdict]
        if self.choice is Strategy.AUTO and plan.fits:
            text, kind = f"→ {LABELS[plan.strategy]}", "accent"
        self.badge.set(text, kind)
        self.badge.show()
        self.reason.setText(plan.reason)
        self.reason.show()
        works = self._works = plan.fits
        self.radio.setEnabled(works)
        self.setToolTip("" if works else f"{LABELS[self.choice]} cannot run: {plan.reason}")
        self._restyle()

    def show_estimate(self, estimate: Estimate | None) -> None:
        """ "Estimate on the real Macs: 31.0 tokens/s (likely 26.3–37.8)", or why there is
        none; its basis in the tooltip."""
        if estimate is None:
            self.estimate.hide()
            return
        self.estimate.setText(f"Estimate on the real Macs: {estimate.figures_text()}")
        self.estimate.setToolTip(estimate.basis())
        self.estimate.show()

    @property
    def works(self) -> bool:
        return self._works

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if self.radio.isEnabled() and event.button() == Qt.MouseButton.LeftButton:
            self.radio.setChecked(True)
        super().mousePressEvent(event)

    def _restyle(self, *_args: object) -> None:
        self.setProperty("checked", "true" if self.radio.isChecked() else "false")
        self.style().unpolish(self)
        self.style().polish(self)


class StrategyChooser(QWidget):
    strategy_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.group = QButtonGroup(self)
        self.group.setExclusive(True)
        self.options: dict[Strategy, StrategyOption] = {}
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        for choice in CHOICES:
            option = StrategyOption(choice)
            self.options[choice] = option
            self.group.addButton(option.radio)
            option.radio.toggled.connect(functools.partial(self._toggled, choice))
            layout.addWidget(option)

    def _toggled(self, choice: Strategy, checked: bool) -> None:
        if checked:
            self.strategy_changed.emit(choice)

    def selected(self) -> Strategy:
        return next((c for c, o in self.options.items() if o.radio.isChecked()), Strategy.AUTO)

    def select(self, choice: Strategy | str) -> None:
        """Select ``choice`` even if it cannot work now (see the module docstring)."""
        if choice in self.options:
            self.options[Strategy(choice)].radio.setChecked(True)

    def show_plans(
        self,
        plans: dict[Strategy, Plan] | None,
        estimates: dict[Strategy, Estimate] | None = None,
    ) -> None:
        for choice, option in self.options.items():
            option.show_plan(plans.get(choice) if plans else None)
            option.show_estimate(estimates.get(choice) if estimates else None)

    def set_locked(self, locked: bool) -> None:
        for option in self.options.values():
            option.setEnabled(not locked)
