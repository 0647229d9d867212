"""Make an offered network change on one Mac, only because the person asked (issue 18).

Shows what will run there and why, the undo, how long it lasts; asks that Mac's admin
password, hands it to ``apply`` once (in the background) and forgets it: the field is
cleared at once, nothing keeps it. Modelled on the Cluster pane's "set up access".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import shiboken6
from PySide6.QtWidgets import QFormLayout, QLineEdit, QWidget

from core.cluster.netchange import NetworkChange
from gui.nodes.dialogs import _Dialog
from gui.style import mono_font
from gui.widgets import label


class NetworkChangeDialog(_Dialog):
    """``apply(password)`` blocks (it runs through ``run_in_background``) and raises with
    a message to show; on success the dialog accepts."""

    def __init__(
        self,
        node: str,
        changes: Sequence[NetworkChange],
        *,
        apply: Callable[[str], Any],
        run_in_background: Callable[..., None],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(f"Change the network on {node}", f"Change the network on {node}", parent)
        self._apply, self._run = apply, run_in_background
        self.busy = False
        for change in changes:
            self.column.addWidget(label(f"This {change.why}.", wrap=True))
            commands = "\n".join(f"sudo {c}" for c in change.commands)
            undo = "\n".join(f"sudo {c}" for c in change.undo)
            shown = label(commands, wrap=True, selectable=True)
            shown.setFont(mono_font(12))
            self.column.addWidget(shown)
            self.column.addWidget(
                label(f"Undo: {undo}. It lasts {change.lasts}.", "hint", wrap=True, selectable=True)
            )
        form = QFormLayout()
        self.password = QLineEdit()
        self.password.setEchoMode(QLineEdit.EchoMode.Password)
        self.password.setPlaceholderText(f"The password of an administrator of {node}")
        self.password.returnPressed.connect(self.submit)
        form.addRow(label("Admin password", "fact-name"), self.password)
        self.column.addLayout(form)
        self.column.addWidget(
            label("The password is used once, for this change, and never stored.", "hint")
        )
        self.error = label("", "error-text", wrap=True, selectable=True)
        self.error.hide()
        self.column.addWidget(self.error)
        self.cancel_button = self.button("Cancel")
        self.cancel_button.clicked.connect(self.reject)
        self.submit_button = self.button("Change", "primary", stretch_before=True)
        self.submit_button.setDefault(True)
        self.submit_button.clicked.connect(self.submit)
        self.finish_layout()
        self.setMinimumWidth(520)
        self.password.setFocus()

    def submit(self) -> None:
        password = self.password.text()
        if self.busy:
            return
        if not password:
            self._show_error("Type the password of an administrator of that Mac.")
            return
        self.password.clear()
        self.busy = True
        self._set_busy(True)
        self.error.hide()
        self._run(lambda: self._apply(password), self._done, self._failed)

    def _done(self, _result: object) -> None:
        if not shiboken6.isValid(self):
            return
        self.busy = False
        self.accept()

    def _failed(self, error: BaseException) -> None:
        if not shiboken6.isValid(self):
            return
        self.busy = False
        self._set_busy(False)
        self._show_error(str(error) or type(error).__name__)
        self.password.setFocus()

    def _show_error(self, text: str) -> None:
        self.error.setText(text)
        self.error.show()

    def _set_busy(self, busy: bool) -> None:
        self.submit_button.setText("Changing…" if busy else "Change")
        for widget in (self.submit_button, self.password):
            widget.setEnabled(not busy)
