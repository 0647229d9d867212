""" "Show the equivalent mlx.launch command": the command line and the hostfile JSON that
run the same job by hand, each in monospace with a Copy button.

What it shows comes from ``core.run.session`` (``demo_launch`` for the demo's local
ranks, ``planned_launch`` for real Macs); this is only the window.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import cast

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from gui import style
from gui.style import set_role
from gui.widgets import label, section

COPIED_MS = 1500
# ``Session.launch_command``'s JSON: command (list[str]), hostfile, local, worker_hash, reason
Launch = Mapping[str, object]


def command_text(launch: Launch) -> str:
    """The command as one shell command, an option (with its value) per line."""
    lines: list[list[str]] = []
    for word in cast("list[str]", launch["command"]):
        starts = word.startswith("-") and not (lines and lines[-1] == ["--"])
        if not lines or starts:
            lines.append([])
        lines[-1].append(shlex.quote(word))
    return " \\\n  ".join(" ".join(line) for line in lines)


def hostfile_text(launch: Launch) -> str:
    hostfile = launch.get("hostfile")
    return json.dumps(hostfile, indent=2) if hostfile else ""


class LaunchDialog(QDialog):
    """The equivalent ``mlx.launch`` for the current plan."""

    def __init__(self, launch: Launch, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setWindowTitle("Equivalent mlx.launch command")
        self.resize(760, 560 if launch.get("hostfile") else 340)
        self.launch = launch
        layout = QVBoxLayout(self)
        layout.setContentsMargins(18, 16, 18, 14)
        layout.setSpacing(8)
        layout.addWidget(label("Run the same job by hand", "model-name"))
        layout.addWidget(label(_intro(launch), "secondary", wrap=True))
        self.command = self._block(layout, "Command", command_text(launch), "command")
        self.hostfile: QPlainTextEdit | None = None
        if launch.get("hostfile"):
            self.hostfile = self._block(
                layout, "hostfile.json", hostfile_text(launch), "hostfile", stretch=1
            )
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        layout.addWidget(buttons)

    def _block(
        self, layout: QVBoxLayout, title: str, text: str, name: str, stretch: int = 0
    ) -> QPlainTextEdit:
        row = QHBoxLayout()
        row.addWidget(section(title))
        row.addStretch(1)
        button = QPushButton("Copy")
        button.setObjectName(f"copy-{name}")
        button.setToolTip(f"Copy the {title.lower()} to the clipboard")
        row.addWidget(button)
        layout.addLayout(row)
        box = QPlainTextEdit(text)
        set_role(box, "code")
        box.setReadOnly(True)
        box.setFont(style.mono_font(12))
        box.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        lines = text.count("\n") + 1
        box.setMinimumHeight(min(22 * lines + 18, 120) if not stretch else 160)
        if not stretch:
            box.setMaximumHeight(22 * lines + 24)
        layout.addWidget(box, stretch)
        button.clicked.connect(lambda: self._copy(button, box.toPlainText()))
        return box

    def _copy(self, button: QPushButton, text: str) -> None:
        QGuiApplication.clipboard().setText(text)
        button.setText("Copied")
        QTimer.singleShot(COPIED_MS, self, lambda: button.setText("Copy"))

    def copy_button(self, name: str) -> QPushButton:
        button = self.findChild(QPushButton, f"copy-{name}")
        assert button is not None
        return button


def _intro(launch: Launch) -> str:
    if launch.get("local"):
        return (
            "The demo's ranks run on this Mac, so mlx.launch needs no hostfile: -n starts "
            "that many ranks on loopback. Run it from MacMesh's folder (core/worker must be "
            "importable)."
        )
    worker = str(launch.get("worker_hash", ""))
    reason = launch.get("reason", "")
    return (
        f"{reason} Save the hostfile as hostfile.json next to where you run the command. "
        f"Every Mac needs MacMesh's core/worker (worker {worker[:12]}) importable: add "
        "--cwd <that folder>, and the model at the path shown."
    ).strip()


def show_launch_dialog(launch: Launch, parent: QWidget | None = None) -> LaunchDialog:
    dialog = LaunchDialog(launch, parent)
    dialog.show()
    return dialog
