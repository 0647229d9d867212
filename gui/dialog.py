"""The window's dialogs' two shared pieces: the frame every dialog has, and the flow of one
that asks a password.

``Dialog``: a title, a heading, a body column and a button row; window-modal, deleted when
closed, opened with ``open()`` (never a nested ``exec()`` loop).

``PasswordDialog``: asks a password (setting up access to a Mac, changing its network),
hands it once to a blocking action run in the background, and forgets it: the field is
cleared at once and nothing keeps it. While the action runs its inputs are disabled; when
it fails its message is shown and the password asked again; when it succeeds the dialog
accepts.
"""

from __future__ import annotations

from collections.abc import Callable

import shiboken6
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLineEdit, QPushButton, QVBoxLayout, QWidget

from gui.style import set_role
from gui.widgets import label


class Dialog(QDialog):
    """A titled dialog with a body column and a button row, deleted when closed."""

    def __init__(self, title: str, heading: str, parent: QWidget | None) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setWindowModality(Qt.WindowModality.WindowModal)
        self.column = QVBoxLayout(self)
        self.column.setContentsMargins(22, 20, 22, 18)
        self.column.setSpacing(12)
        self.heading = label(heading, "model-name", wrap=True)
        self.column.addWidget(self.heading)
        self.buttons = QHBoxLayout()
        self.buttons.setSpacing(8)

    def finish_layout(self) -> None:
        self.column.addSpacing(4)
        self.column.addLayout(self.buttons)

    def button(
        self, text: str, role: str | None = None, *, stretch_before: bool = False
    ) -> QPushButton:
        if stretch_before:
            self.buttons.addStretch(1)
        button = QPushButton(text)
        if role:
            set_role(button, role)
        button.setAutoDefault(False)
        self.buttons.addWidget(button)
        return button


class PasswordDialog(Dialog):
    """A dialog whose submit hands a password once to an action and forgets it.

    Subclasses lay out ``password`` and ``error`` (created here, not placed) in their
    body, call ``finish``, and say in ``_work`` what runs with the password. That blocks
    (it runs through ``run_in_background(work, done, failed)``, ``Bridge``'s) and raises
    with a message to show; on success the dialog accepts. ``inputs``: the fields
    disabled while it runs (``password``, and any a subclass adds).
    """

    def __init__(
        self,
        title: str,
        *,
        run_in_background: Callable[..., None],
        submit_text: str,
        busy_text: str,
        no_password: str,
        parent: QWidget | None,
    ) -> None:
        super().__init__(title, title, parent)  # the title is its heading too
        self._run = run_in_background
        self._submit_text, self._busy_text, self._no_password = submit_text, busy_text, no_password
        self.busy = False
        self.password = QLineEdit()
        self.password.setEchoMode(QLineEdit.EchoMode.Password)
        self.password.returnPressed.connect(self.submit)
        self.error = label("", "error-text", wrap=True, selectable=True)
        self.error.hide()
        self.inputs: list[QWidget] = [self.password]

    def finish(self, min_width: int) -> None:
        """Cancel and submit buttons, the layout closed, the password field focused."""
        self.cancel_button = self.button("Cancel")
        self.cancel_button.clicked.connect(self.reject)
        self.submit_button = self.button(self._submit_text, "primary", stretch_before=True)
        self.submit_button.setDefault(True)
        self.submit_button.clicked.connect(self.submit)
        self.finish_layout()
        self.setMinimumWidth(min_width)
        self.password.setFocus()

    def submit(self) -> None:
        """Hand the password over once and forget it; the field is cleared at once."""
        password = self.password.text()
        if self.busy:
            return
        if not password:
            self._show_error(self._no_password)
            return
        work = self._work(password)
        self.password.clear()
        self.busy = True
        self._set_busy(True)
        self.error.hide()
        self._run(work, self._done, self._failed)

    def _work(self, password: str) -> Callable[[], object]:
        """What runs in the background with ``password``; read any other field here, on
        the GUI thread, at submit."""
        raise NotImplementedError

    def _done(self, _result: object) -> None:
        if not shiboken6.isValid(self):  # the window went away meanwhile
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
        self.submit_button.setText(self._busy_text if busy else self._submit_text)
        for widget in (self.submit_button, *self.inputs):
            widget.setEnabled(not busy)
