""" "Check my Macs": ``macmesh doctor``'s report in a dialog, and its capture (issue 27).

The report is the doctor's own (``core.run.checks.doctor.diagnose``) over the nodes the
Cluster pane shows: the scanner's (``seen_by``: each one's last SSH failure and target)
or the demo's simulated Macs (``simulated_seen``: their ranks run here, so this
machine's probe says their Python). It is made off the GUI thread (probes, TCP connects
over SSH); the dialog only shows it: the checks grouped by what they block, each with
its verdict and its fix, and the overall verdict. "Save a capture…" writes the redacted
capture zip (``core.cluster.capture``) where the person picks.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import shiboken6
from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QGridLayout,
    QLabel,
    QLayout,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from gui.bridge import Bridge
from gui.dialog import Dialog
from gui.folders import choose_save
from gui.widgets import Badge, label, section

if TYPE_CHECKING:
    from core.cluster.registry import Node
    from core.run.checks.doctor import DoctorReport
    from core.run.checks.report import Check
    from gui.cluster.pane import ClusterPane

BADGES = {"ok": ("OK", "success"), "warn": ("Warning", "warning"), "fail": ("Fails", "danger")}
CHECKING = "Checking every Mac… (a few seconds: each is probed again)"


def report_task(
    pane: ClusterPane, try_links: bool = True
) -> tuple[list[Node], Callable[[], DoctorReport]]:
    """The nodes ``pane`` (a ``ClusterPane``) shows, and the blocking work that makes the
    doctor's report over them: the demo's simulated Macs, else the scanner's nodes (none
    without a scanner). ``try_links``: the ring's paths tried with TCP connects (not for
    the demo, whose paths are loopback by construction)."""
    nodes: list[Node] = sorted(pane.nodes(), key=lambda n: (not n.is_self, n.name.lower()))
    scanner = pane.scanner
    demo: bool = pane.is_demo

    def work() -> DoctorReport:
        from core.run.checks.doctor import diagnose, diagnose_demo, diagnose_here
        from core.run.checks.seen import seen_by

        on_mac = sys.platform == "darwin"
        if demo:
            return diagnose_demo(nodes, on_mac=on_mac, python=sys.executable)
        if scanner is None:
            return diagnose([], (), on_mac=on_mac)
        seen = seen_by(scanner, nodes)
        return diagnose_here(seen, scanner.interfaces, on_mac=on_mac, try_links=try_links)

    return nodes, work


class _WrappedColumn(QWidget):
    """A column of wrapped rows in a scroll area: no minimum height of its own, so the
    scroll area gives it the height its rows need at its width (``heightForWidth``)."""

    def minimumSizeHint(self) -> QSize:
        return QSize(super().minimumSizeHint().width(), 0)


class CheckRow(QWidget):
    """One check: its verdict as a badge, what was found, and its fix when not ok."""

    def __init__(self, check: Check) -> None:
        super().__init__()
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 2, 0, 2)
        grid.setHorizontalSpacing(10)
        text, kind = BADGES[check.status]
        self.badge = Badge(text, kind)
        self.message = label(check.message, wrap=True, selectable=True)
        grid.addWidget(self.badge, 0, 0, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(self.message, 0, 1)
        self.fix = label(f"→ {check.fix}", "hint", wrap=True, selectable=True)
        self.fix.setVisible(bool(check.fix) and check.status != "ok")
        grid.addWidget(self.fix, 1, 1)
        grid.setColumnStretch(1, 1)
        self.check = check


class DoctorDialog(Dialog):
    """Shows a report once it is made (``show_report``) or why it could not be
    (``show_error``); "Save a capture…" saves the nodes' capture."""

    reported = Signal(object)  # DoctorReport
    saved = Signal(str)  # the capture's path, or "" when saving failed (the note says why)

    def __init__(self, bridge: Bridge, nodes: Sequence[Node], parent: QWidget | None) -> None:
        super().__init__("Check my Macs", "Check my Macs", parent)
        self.bridge = bridge
        self.nodes = list(nodes)
        self.report: DoctorReport | None = None
        self.rows: list[CheckRow] = []
        self.titles: list[QLabel] = []  # a group's title, above its rows
        self.verdict = label(CHECKING, "secondary", wrap=True)
        self.column.addWidget(self.verdict)
        self.groups = QVBoxLayout()
        self.groups.setSpacing(6)
        # Its height is its rows' at the width it has (their text wraps), never their
        # height wrapped at the narrowest width (three screens of blank below the rows).
        self.groups.setSizeConstraint(QLayout.SizeConstraint.SetNoConstraint)
        inner = _WrappedColumn()
        inner.setLayout(self.groups)
        self.rows_area = scroll = QScrollArea()
        scroll.setWidget(inner)
        scroll.setWidgetResizable(True)
        scroll.setMinimumSize(560, 160)
        self.column.addWidget(scroll, 1)
        self.note = label("", "secondary", wrap=True, selectable=True)
        self.note.hide()
        self.column.addWidget(self.note)
        self.capture_button = self.button("Save a capture…")
        self.capture_button.setToolTip(
            "What every Mac's probe printed, redacted (no serials, names or addresses), "
            "to send with a bug report"
        )
        self.capture_button.setEnabled(False)
        self.capture_button.clicked.connect(lambda: self.save_capture())
        self.close_button = self.button("Close", "primary", stretch_before=True)
        self.close_button.clicked.connect(self.accept)
        self.finish_layout()
        self.resize(680, 560)

    # -- the report ---------------------------------------------------------------------

    def show_report(self, report: DoctorReport) -> None:
        from core.run.checks.doctor import GROUPS, TITLES

        self.report = report
        for group in GROUPS:
            checks = report.group(group)
            if not checks:
                continue
            title = section(TITLES[group])
            self.titles.append(title)
            self.groups.addWidget(title)
            for check in checks:
                row = CheckRow(check)
                self.rows.append(row)
                self.groups.addWidget(row)
        self.groups.addStretch(1)
        # once the rows are shown (a layout shows a new child at the next event loop turn)
        QTimer.singleShot(0, self, self.fit_to_content)
        self.verdict.setText(verdict(report))
        self.verdict.setProperty("role", "model-name" if report.ok else "error-text")
        self.verdict.style().polish(self.verdict)
        self.capture_button.setEnabled(bool(self.nodes))
        self.reported.emit(report)

    def fit_to_content(self) -> None:
        """The dialog as tall as its rows need at its width, within its screen's room."""
        inner = self.rows_area.widget()
        if inner is None:
            return
        outer = self.layout()
        if outer is not None:
            outer.activate()
        width = self.rows_area.viewport().width()
        need = inner.heightForWidth(width) if inner.hasHeightForWidth() else -1
        if need < 0:
            need = inner.sizeHint().height()
        room = self.screen().availableGeometry().height() - 80
        chrome = self.height() - self.rows_area.viewport().height()
        self.resize(self.width(), max(self.minimumSizeHint().height(), min(room, need + chrome)))

    def show_error(self, error: BaseException) -> None:
        self.verdict.setText(f"The check could not run: {error}")
        self.reported.emit(None)

    # -- the capture ----------------------------------------------------------------------

    def save_capture(self, path: Path | None = None) -> None:
        """Write the capture to ``path`` (None: ask where, a .zip) off the GUI thread."""
        if path is None:
            chosen = choose_save(self, "Save a capture", "macmesh-capture.zip", "Capture (*.zip)")
            if chosen is None:
                return
            path = chosen
        if path.suffix.lower() != ".zip":
            path = path.with_name(f"{path.name}.zip")
        from core.cluster.capture import write_capture

        nodes = list(self.nodes)
        self.capture_button.setEnabled(False)
        self._say("Saving the capture…")
        self.bridge.run_in_background(
            lambda: write_capture(path, nodes),
            lambda written: self._saved(str(written), ""),
            lambda error: self._saved("", f"The capture could not be saved: {_reason(error)}"),
        )

    def _saved(self, path: str, problem: str) -> None:
        if not shiboken6.isValid(self):
            return
        self.capture_button.setEnabled(True)
        self._say(problem or f"Capture saved to {path} (redacted): attach it to a bug report.")
        self.saved.emit(path)

    def _say(self, text: str) -> None:
        self.note.setText(text)
        self.note.setVisible(bool(text))


def verdict(report: DoctorReport) -> str:
    """The report's overall verdict, in the window's words."""
    if report.ok:
        return f"Every Mac can run a job ({', '.join(report.nodes)})."
    if not report.nodes:
        return "No Mac found yet: add one by name or address in the Cluster pane."
    failed = sum(f.check.status == "fail" for f in report.findings)
    said = [f"{failed} check{'s' * (failed != 1)} fail{'s' * (failed == 1)}"] if failed else []
    if blocked := [n for n in report.nodes if n not in report.ready]:
        said.append(f"{', '.join(blocked)} could not be probed")
    return f"Not ready ({'; '.join(said)}). Do what each fix says, then check again."


def _reason(error: BaseException) -> str:
    return (error.strerror if isinstance(error, OSError) else None) or str(error)


def check_macs(
    pane: ClusterPane, bridge: Bridge, parent: QWidget, *, try_links: bool = True
) -> DoctorDialog:
    """Open the dialog over ``pane``'s nodes and make the report in the background."""
    nodes, work = report_task(pane, try_links)
    dialog = DoctorDialog(bridge, nodes, parent)

    def done(report: DoctorReport) -> None:
        if shiboken6.isValid(dialog):
            dialog.show_report(report)

    def failed(error: BaseException) -> None:
        if shiboken6.isValid(dialog):
            dialog.show_error(error)

    dialog.open()
    bridge.run_in_background(work, done, failed)
    return dialog
