"""Make an offered network change on one Mac, only because the person asked (issue 18).

Shows what will run there and why, the undo, how long it lasts; asks that Mac's admin
password, hands it to ``apply`` once (in the background) and forgets it: the field is
cleared at once, nothing keeps it. The flow is ``gui.dialog.PasswordDialog``'s, the one
the Cluster pane's "set up access" follows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtWidgets import QFormLayout, QWidget

from core.cluster.netchange import NetworkChange
from gui.dialog import PasswordDialog
from gui.style import mono_font
from gui.widgets import label


class NetworkChangeDialog(PasswordDialog):
    """``apply(password)`` blocks (it runs through ``run_in_background``) and raises with
    a message to show; on success the dialog accepts."""

    def __init__(
        self,
        node: str,
        changes: Sequence[NetworkChange],
        *,
        apply: Callable[[str], object],
        run_in_background: Callable[..., None],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(
            f"Change the network on {node}",
            run_in_background=run_in_background,
            submit_text="Change",
            busy_text="Changing…",
            no_password="Type the password of an administrator of that Mac.",
            parent=parent,
        )
        self._apply = apply
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
        self.password.setPlaceholderText(f"The password of an administrator of {node}")
        form.addRow(label("Admin password", "fact-name"), self.password)
        self.column.addLayout(form)
        self.column.addWidget(
            label("The password is used once, for this change, and never stored.", "hint")
        )
        self.column.addWidget(self.error)
        self.finish(520)

    def _work(self, password: str) -> Callable[[], object]:
        return lambda: self._apply(password)
