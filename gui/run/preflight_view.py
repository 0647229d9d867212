"""The checks before Start on real Macs, and the model copy: one row per check, grouped
by Mac, each with its result and (when it is not ok) what to do; then one bar per Mac
that receives the model, with bytes, speed and time left.

It only shows what ``RunController`` hands it (``core.run.checks.report.PreflightReport``,
``core.remote.modelcopy.CopyProgress``): no logic beyond wording. Its Verify button asks
for the checks again with every model file hashed on the Macs (``verify_requested``: the
pane starts again with the session's ``verify``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QAbstractButton,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLayout,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from core import units
from gui.style import set_role
from gui.widgets import Badge, clear_layout, label, layout_widgets, section

if TYPE_CHECKING:
    from core.remote.modelcopy import CopyProgress
    from core.run.checks.report import Check, PreflightReport

CLUSTER = "cluster"  # core.run.checks.report.CLUSTER: checks about all the Macs together
ICONS = {"ok": "✓", "warn": "!", "fail": "✕"}
NAMES = {
    "ssh": "Reachable",
    "python": "Python",
    "versions": "Versions",
    "macos": "macOS",
    "model": "Model",
    "memory": "Memory",
    "plan": "Plan",
    "backend": "Backend",
    "network": "Network",  # a change offered for a faster ring path (issue 18)
    "source": "Model source",  # the Hub or this Mac (issue 13)
}
BAR_STEPS = 1000
MIN_HEIGHT = 120  # below this the rows scroll


def copy_line(progress: CopyProgress) -> str:
    """ "12.3 MB of 45.6 MB · 80.1 MB/s · about 3 s left" (nothing said before it is known)."""
    if progress.phase == "verified":
        return f"{units.size(progress.bytes_total)} · verified"
    parts = [f"{units.size(progress.bytes_done)} of {units.size(progress.bytes_total)}"]
    if progress.phase == "verifying":
        parts.append("verifying")
    if progress.rate:
        parts.append(units.bytes_per_s(progress.rate))
    if progress.eta_s is not None and progress.phase == "copying":
        parts.append(f"about {units.duration(progress.eta_s)} left")
    elif progress.phase == "copying":
        parts.append("measuring speed…")
    return " · ".join(parts)


class PreflightView(QFrame):
    """The checks and the copy, in a sub-card that scrolls when it is long."""

    verify_requested = Signal()  # the Verify button: check again, hashing every model file
    change_requested = Signal(str)  # a "network" check's Change… button: that Mac's name

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        set_role(self, "subcard")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(14, 10, 14, 12)
        outer.setSpacing(8)
        top = QHBoxLayout()
        top.setSpacing(8)
        top.addWidget(section("Checks before start"))
        self.badge = Badge("Checking", "accent")
        top.addWidget(self.badge)
        top.addStretch(1)
        self.backend = label("", "secondary")
        top.addWidget(self.backend)
        self.verify_button = QPushButton("Verify")
        self.verify_button.setToolTip(
            "Check again, hashing every model file on each Mac (slower: it reads them all). "
            "A file that changed since it was copied is copied again."
        )
        self.verify_button.setEnabled(False)
        self.verify_button.clicked.connect(self.verify_requested)
        top.addWidget(self.verify_button)
        outer.addLayout(top)
        self.intro = label("", "secondary", wrap=True)
        outer.addWidget(self.intro)
        self.rows_widget = _Rows()
        self.rows = QGridLayout(self.rows_widget)
        self.rows.setSizeConstraint(QLayout.SizeConstraint.SetNoConstraint)
        self.rows.setContentsMargins(0, 0, 0, 0)
        self.rows.setHorizontalSpacing(10)
        self.rows.setVerticalSpacing(4)
        self.rows.setColumnStretch(2, 1)
        self.rows_area = QScrollArea()
        self.rows_area.setWidget(self.rows_widget)
        self.rows_area.setWidgetResizable(True)
        self.rows_area.setFrameShape(QFrame.Shape.NoFrame)
        self.rows_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        outer.addWidget(self.rows_area)
        self.error = label("", "error-text", wrap=True, selectable=True)
        self.error.setTextFormat(Qt.TextFormat.PlainText)
        self.error.hide()
        outer.addWidget(self.error)
        self.copy_box = QWidget()
        copy_layout = QVBoxLayout(self.copy_box)
        copy_layout.setContentsMargins(0, 6, 0, 0)
        copy_layout.setSpacing(6)
        self.copy_title = section("Copying the model")
        copy_layout.addWidget(self.copy_title)
        self.copy_grid = QGridLayout()
        self.copy_grid.setHorizontalSpacing(12)
        self.copy_grid.setVerticalSpacing(6)
        self.copy_grid.setColumnStretch(1, 1)
        copy_layout.addLayout(self.copy_grid)
        self.copy_note = label(
            "Stop keeps what arrived: the next Start continues from there.", "hint", wrap=True
        )
        copy_layout.addWidget(self.copy_note)
        self.copy_box.hide()
        outer.addWidget(self.copy_box)
        outer.addStretch(1)
        self.copy_rows: dict[str, tuple[QProgressBar, QLabel]] = {}
        self.checks: list[Check] = []
        self.change_buttons: dict[str, QPushButton] = {}  # node → its Change… button

    # -- what the controller hands over ------------------------------------------------

    def show_checking(self, names: list[str]) -> None:
        self._clear_rows()
        self._clear_copies()
        self.error.hide()
        self.badge.set("Checking", "accent")
        self.verify_button.setEnabled(False)
        self.backend.setText("")
        self.intro.setText(
            f"Asking {', '.join(names)} over SSH: Python, mlx and mlx-lm, the model, memory, "
            "and how the Macs are cabled…"
        )
        self.intro.show()
        self.show()

    def show_report(self, report: PreflightReport) -> None:
        self._clear_rows()
        self.checks = list(report.checks)
        self.verify_button.setEnabled(True)
        failed = len(report.failures)
        if failed:
            self.badge.set(f"{failed} failed", "danger")
            self.intro.setText("Nothing was started. Fix what is marked ✕, then press Start again.")
        elif report.copies_needed:
            self.badge.set("Copy needed", "warning")
            self.intro.setText(
                f"Every check passed; {', '.join(report.copies_needed)} "
                f"need{'s' * (len(report.copies_needed) == 1)} the model first."
            )
        else:
            self.badge.set("Ready", "success")
            self.intro.setText("Every check passed.")
        self.backend.setText(f"Backend: {report.backend.name}")
        self.backend.setToolTip(report.backend.reason)
        row = 0
        for node, checks in _grouped(self.checks):
            heading = label("All Macs" if node == CLUSTER else node, "check-node")
            self.rows.addWidget(heading, row, 0, 1, 3)
            row += 1
            for check in checks:
                icon = label(ICONS.get(check.status, "?"), f"check-{check.status}")
                icon.setAlignment(Qt.AlignmentFlag.AlignCenter)
                icon.setFixedSize(18, 18)
                name = label(NAMES.get(check.name, check.name.title()), "check-name")
                text = check.message
                message = label(text, "check-message", wrap=True, selectable=True)
                self.rows.addWidget(icon, row, 0, Qt.AlignmentFlag.AlignTop)
                self.rows.addWidget(name, row, 1, Qt.AlignmentFlag.AlignTop)
                self.rows.addWidget(message, row, 2)
                row += 1
                if check.fix and check.status != "ok":
                    fix = label(f"→ {check.fix}", "check-fix", wrap=True, selectable=True)
                    self.rows.addWidget(fix, row, 2)
                    if check.name == "network" and check.node not in self.change_buttons:
                        button = QPushButton("Change…")
                        button.setToolTip(
                            f"Make this change on {check.node}: its admin password is asked "
                            "once, then the checks run again."
                        )
                        button.clicked.connect(
                            lambda _=False, node=check.node: self.change_requested.emit(node)
                        )
                        self.change_buttons[check.node] = button
                        self.rows.addWidget(button, row, 1, Qt.AlignmentFlag.AlignTop)
                    row += 1
        self.rows.setRowStretch(row, 1)
        self._fit()
        self.show()

    def show_error(self, message: str) -> None:
        """The checks or the copy could not run: the reason and what to do."""
        self.badge.set("Not ready", "danger")
        self.verify_button.setEnabled(True)
        if not self.checks:
            self.intro.hide()
        self.error.setText(message)
        self.error.show()
        for bar, _detail in self.copy_rows.values():
            if bar.value() < BAR_STEPS:
                _flag(bar, "failed")
        self.show()

    def show_copy(self, progress: CopyProgress) -> None:
        row = self.copy_rows.get(progress.node)
        if row is None:
            bar = QProgressBar()
            bar.setRange(0, BAR_STEPS)
            bar.setTextVisible(False)
            detail = label("", "secondary")
            detail.setMinimumWidth(260)
            index = len(self.copy_rows)
            self.copy_grid.addWidget(label(progress.node, "fact-value"), index, 0)
            self.copy_grid.addWidget(bar, index, 1)
            self.copy_grid.addWidget(detail, index, 2)
            self.copy_rows[progress.node] = row = (bar, detail)
            self.copy_box.show()
            self.badge.set("Copying", "accent")
            self.verify_button.setEnabled(False)
        bar, detail = row
        bar.setValue(round(progress.fraction * BAR_STEPS))
        if progress.phase == "verified":
            _flag(bar, "done")
        detail.setText(copy_line(progress))
        if self.copy_rows and all(b.value() >= BAR_STEPS for b, _ in self.copy_rows.values()):
            self.badge.set("Copied", "success")

    def copy_text(self) -> dict[str, str]:
        return {node: detail.text() for node, (_bar, detail) in self.copy_rows.items()}

    def text(self) -> str:
        """Everything the view says, for tests and accessibility."""
        parts = [self.badge.text(), self.backend.text(), self.intro.text()]
        for widget in layout_widgets(self.rows):
            if isinstance(widget, QLabel | QAbstractButton):  # the Change… buttons too
                parts.append(widget.text())
        parts += list(self.copy_text().values())
        if self.error.isVisible() or self.error.text():
            parts.append(self.error.text())
        return "\n".join(p for p in parts if p)

    # -- layout -----------------------------------------------------------------------

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self.checks:  # wrapped rows change height with the width
            self._fit()

    def _fit(self) -> None:
        """As tall as the rows when there is room, else it scrolls."""
        # New children show only on the next loop turn, and hidden ones take no room: show now.
        for widget in layout_widgets(self.rows):
            widget.show()
        self.rows.invalidate()
        self.rows.activate()
        width = self.rows_area.viewport().width()
        height = (
            self.rows.heightForWidth(width)
            if self.rows.hasHeightForWidth() and width > 100
            else self.rows.sizeHint().height()
        )
        self.rows_area.setMaximumHeight(max(height + 6, 1))  # no taller than its rows...
        self.rows_area.setMinimumHeight(min(height, MIN_HEIGHT))  # ...and scrolls when short

    def _clear_rows(self) -> None:
        self.checks = []
        self.change_buttons = {}
        clear_layout(self.rows, hide=True)  # gone from view now, deleted at the next loop turn
        self.rows_area.setMinimumHeight(0)
        self.rows_area.setMaximumHeight(1)

    def _clear_copies(self) -> None:
        clear_layout(self.copy_grid, hide=True)
        self.copy_rows = {}
        self.copy_box.hide()


class _Rows(QWidget):
    """The rows inside the scroll area: as tall as their wrapped text at the area's width
    (height for width), never forced taller by the labels' narrow-width minimum."""

    def minimumSizeHint(self) -> QSize:
        return QSize(super().minimumSizeHint().width(), 0)


def _grouped(checks: list[Check]) -> list[tuple[str, list[Check]]]:
    """Checks per Mac in the order the Macs first appear; the all-Macs checks last."""
    groups: dict[str, list[Check]] = {}
    for check in checks:
        groups.setdefault(check.node, []).append(check)
    ordered = [(node, items) for node, items in groups.items() if node != CLUSTER]
    if CLUSTER in groups:
        ordered.append((CLUSTER, groups[CLUSTER]))
    return ordered


def _flag(bar: QProgressBar, name: str) -> None:
    bar.setProperty(name, "true")
    bar.style().unpolish(bar)
    bar.style().polish(bar)
