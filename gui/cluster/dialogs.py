"""The Cluster pane's dialogs: an RDMA guide, a new or changed host key, setting up access,
adding a Mac by hand.

Each dialog only asks and shows; what it decides goes back through a callback the pane
gives it (the scanner's methods), so tests drive them with a fake scanner. They open
window-modal with ``open()`` (never a nested ``exec()`` loop) and delete themselves
when closed.
"""

from __future__ import annotations

import getpass
import re
from collections.abc import Callable
from functools import partial

from PySide6.QtGui import QGuiApplication, QTextCursor, QTextFormat
from PySide6.QtWidgets import (
    QFormLayout,
    QFrame,
    QLineEdit,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from core.cluster.rdma import GUIDES, guide_resource
from gui.dialog import Dialog, PasswordDialog
from gui.resources import resource_path
from gui.style import mono_font, set_role
from gui.widgets import label

# Privacy & Security, scrolled to Developer Tools, where macOS 27 has the RDMA switch.
# Without the anchor (older macOS) the URL still opens Privacy & Security.
SYSTEM_SETTINGS_URL = "x-apple.systempreferences:com.apple.preference.security?Privacy_DevTools"


def _then_accept(dialog: Dialog, first: Callable[[], object]) -> None:
    """``first()``, then close ``dialog`` accepted (its "Check again" button)."""
    first()
    dialog.accept()


def _banner(text: str, kind: str = "subcard") -> QFrame:
    frame = QFrame()
    set_role(frame, kind)
    layout = QVBoxLayout(frame)
    layout.setContentsMargins(12, 10, 12, 10)
    layout.addWidget(label(text, wrap=True, selectable=True))
    return frame


class GuideDialog(Dialog):
    """One page of ``resources/guides/``, for one node, with what MacMesh saw there.

    ``open_settings`` (None: this computer is not a Mac) adds "Open System Settings" to
    the macOS 27 guide; ``check_again`` (None: nothing to re-probe) adds "Check again".
    """

    def __init__(
        self,
        node: str,
        guide: str,
        reason: str,
        *,
        open_settings: Callable[[str], object] | None = None,
        check_again: Callable[[], object] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(f"{GUIDES[guide]} — {node}", GUIDES[guide], parent)
        self.guide = guide
        self.heading.hide()  # the page's own first heading says it
        if reason:
            self.column.addWidget(_banner(reason))
        self.page = QTextBrowser()
        self.page.setOpenExternalLinks(True)
        self.page.setMarkdown(resource_path(guide_resource(guide)).read_text(encoding="utf-8"))
        _tame_headings(self.page)
        self.column.addWidget(self.page, 1)
        self.settings_button: QPushButton | None = None
        if guide == "rdma-macos27" and open_settings is not None:
            self.settings_button = self.button("Open System Settings", "primary")
            self.settings_button.setToolTip(
                "Opens Privacy & Security on this Mac. Turn RDMA on at each Mac in the cluster."
            )
            self.settings_button.clicked.connect(lambda: open_settings(SYSTEM_SETTINGS_URL))
        self.check_button: QPushButton | None = None
        if check_again is not None:
            self.check_button = self.button("Check again")
            self.check_button.setToolTip(f"Probe {node} again once you have done the steps")
            self.check_button.clicked.connect(partial(_then_accept, self, check_again))
        self.close_button = self.button("Close", stretch_before=True)
        self.close_button.setDefault(True)
        self.close_button.clicked.connect(self.reject)
        self.finish_layout()
        self.resize(620, 660)


HEADING_PX = {1: 20, 2: 15, 3: 13}


def _tame_headings(page: QTextBrowser) -> None:
    """Markdown headings at the sizes of the app's own titles, not a browser's."""
    block = page.document().begin()
    while block.isValid():
        level = block.blockFormat().headingLevel()
        if level in HEADING_PX:
            cursor = QTextCursor(block)
            cursor.select(QTextCursor.SelectionType.BlockUnderCursor)
            char = block.begin().fragment().charFormat()  # bold, from the markdown
            char.clearProperty(QTextFormat.Property.FontSizeAdjustment)
            char.clearProperty(QTextFormat.Property.FontPointSize)
            char.setProperty(QTextFormat.Property.FontPixelSize, HEADING_PX[level])
            cursor.setCharFormat(char)
            spacing = block.blockFormat()
            spacing.setTopMargin(14 if level > 1 else 0)
            spacing.setBottomMargin(6)
            cursor.setBlockFormat(spacing)
        block = block.next()


def key_algorithm(key_name: str) -> str:
    """``ssh-ed25519`` → ``ed25519``: the name of the host key file on the Mac."""
    for algorithm in ("ed25519", "ecdsa", "rsa"):
        if algorithm in key_name.lower():
            return algorithm
    return key_name.removeprefix("ssh-").lower()


class HostKeyDialog(Dialog):
    """First contact with a Mac: its fingerprint, how to check it, Trust / Don't trust."""

    def __init__(
        self,
        node: str,
        host: str,
        fingerprint: str,
        key_name: str,
        *,
        trust: Callable[[], object],
        distrust: Callable[[], object],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(f"Trust {node}?", f"Is this really {node}?", parent)
        algorithm = key_algorithm(key_name)
        self.column.addWidget(
            label(
                f"MacMesh is connecting to {host} for the first time. Every Mac has a "
                "fingerprint that proves who it is. Make sure this one belongs to your Mac, "
                "so nobody on the network can pretend to be it.",
                wrap=True,
            )
        )
        self.column.addWidget(label(f"{algorithm.upper()} KEY FINGERPRINT", "section"))
        self.fingerprint = label(fingerprint, selectable=True)
        self.fingerprint.setFont(mono_font(13))
        self.fingerprint.setWordWrap(True)
        box = QFrame()
        set_role(box, "subcard")
        inner = QVBoxLayout(box)
        inner.setContentsMargins(12, 10, 12, 10)
        inner.addWidget(self.fingerprint)
        self.column.addWidget(box)
        self.command = f"ssh-keygen -lf /etc/ssh/ssh_host_{algorithm}_key.pub"
        how = label(
            f"To check, at {node} open Terminal (in Applications › Utilities), type the line "
            "below and press Return. It prints a line that must contain the same SHA256 "
            "text as above.",
            "secondary",
            wrap=True,
        )
        self.column.addWidget(how)
        command = label(self.command, selectable=True)
        command.setFont(mono_font(12))
        self.column.addWidget(command)
        self.column.addWidget(
            label(
                "If you trust it, MacMesh remembers the key (in ~/.ssh/known_hosts, like ssh "
                "does) and refuses to connect should it ever change.",
                "hint",
                wrap=True,
            )
        )
        self.distrust_button = self.button("Don't trust")
        self.distrust_button.clicked.connect(self.reject)
        self.trust_button = self.button("Trust this Mac", "primary", stretch_before=True)
        self.trust_button.clicked.connect(self.accept)
        self.accepted.connect(trust)
        self.rejected.connect(distrust)
        self.finish_layout()
        self.setMinimumWidth(560)


class HostKeyChangedDialog(Dialog):
    """A Mac whose host key changed: a loud refusal with the fix, and no way to trust it."""

    def __init__(
        self,
        node: str,
        message: str,
        *,
        check_again: Callable[[], object] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(f"{node}: connection refused", f"{node}'s identity has changed", parent)
        set_role(self.heading, "error-title")
        self.column.addWidget(
            _banner(message or "Its host key is not the one remembered.", "banner-error")
        )
        self.column.addWidget(
            label(
                "MacMesh will not connect to it. If the Mac was reinstalled or replaced, "
                "forget the old key with the command below (in Terminal), then check again. "
                "If you do not know why it changed, do not connect: ask whoever runs your "
                "network.",
                wrap=True,
            )
        )
        match = re.search(r"`([^`]+)`", message or "")
        self.command = match.group(1) if match else ""
        self.copy_button: QPushButton | None = None
        if self.command:
            command = label(self.command, selectable=True)
            command.setFont(mono_font(12))
            command.setWordWrap(True)
            self.column.addWidget(command)
            self.copy_button = self.button("Copy command")
            self.copy_button.clicked.connect(
                lambda: QGuiApplication.clipboard().setText(self.command)
            )
        self.check_button: QPushButton | None = None
        if check_again is not None:
            self.check_button = self.button("Check again")
            self.check_button.clicked.connect(partial(_then_accept, self, check_again))
        self.close_button = self.button("Close", stretch_before=True)
        self.close_button.setDefault(True)
        self.close_button.clicked.connect(self.reject)
        self.finish_layout()
        self.setMinimumWidth(520)


class AccessDialog(PasswordDialog):
    """Set up access once: a user name and that Mac's password, used for one login to
    install this Mac's key there, never stored. ``set_up(user, password)`` blocks (it
    runs in the background through ``run_in_background``) and raises with a message to
    show."""

    def __init__(
        self,
        node: str,
        user: str | None,
        *,
        set_up: Callable[[str, str], object],
        run_in_background: Callable[..., None],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(
            f"Set up access to {node}",
            run_in_background=run_in_background,
            submit_text="Set up access",
            busy_text="Setting up…",
            no_password="Type the password of this user on that Mac.",
            parent=parent,
        )
        self._set_up = set_up
        self.column.addWidget(
            label(
                f"MacMesh logs in to your Macs with a key, not a password. Once, it needs "
                f"the password of an account on {node} to put that key there. The password "
                "is used for this one login and never stored.",
                wrap=True,
            )
        )
        form = QFormLayout()
        form.setSpacing(8)
        self.user = QLineEdit(user or getpass.getuser())
        self.inputs.insert(0, self.user)
        self.password.setPlaceholderText(f"The password of this user on {node}")
        form.addRow(label("User name", "fact-name"), self.user)
        form.addRow(label("Password", "fact-name"), self.password)
        self.column.addLayout(form)
        self.column.addWidget(self.error)
        self.column.addWidget(
            label(
                f"Remote Login must be on at {node} (System Settings › General › Sharing) "
                "for this user.",
                "hint",
                wrap=True,
            )
        )
        self.finish(480)

    def _work(self, password: str) -> Callable[[], object]:
        user = self.user.text().strip()
        return lambda: self._set_up(user, password)

    def reject(self) -> None:
        if not self.busy:  # the login in flight finishes first; then the dialog can go
            super().reject()


class AddHostDialog(Dialog):
    """Add a Mac by name or address; ``add`` raises ValueError with a message to show."""

    def __init__(self, add: Callable[[str], object], parent: QWidget | None = None) -> None:
        super().__init__("Add a Mac", "Add a Mac by name or address", parent)
        self._add = add
        self.column.addWidget(
            label(
                "For a Mac MacMesh does not find by itself (on another network, or with "
                "Bonjour blocked). MacMesh remembers it.",
                "secondary",
                wrap=True,
            )
        )
        self.error = label("", "error-text", wrap=True)
        self.error.hide()
        self.field = QLineEdit()
        self.field.setPlaceholderText("studio-b.local, 192.168.1.20 or user@host:2222")
        self.field.returnPressed.connect(self.submit)
        self.field.textEdited.connect(lambda _text: self.error.hide())
        self.column.addWidget(self.field)
        self.column.addWidget(self.error)
        self.cancel_button = self.button("Cancel")
        self.cancel_button.clicked.connect(self.reject)
        self.add_button = self.button("Add", "primary", stretch_before=True)
        self.add_button.setDefault(True)
        self.add_button.clicked.connect(self.submit)
        self.finish_layout()
        self.setMinimumWidth(440)

    def submit(self) -> None:
        try:
            self._add(self.field.text())
        except ValueError as error:
            self.error.setText(str(error))
            self.error.show()
            self.field.setFocus()
            return
        self.accept()
