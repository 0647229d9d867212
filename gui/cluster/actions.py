"""What a person does about a node: the row actions, the dialogs they open, and what
each decision asks of the scanner.

Trust… and Details… show a host key (new, or changed and refused); Set up access…
asks for a password once and hands it to ``scanner.set_up_access`` off the GUI thread;
Retry and Check again re-probe; a hand-added Mac can be forgotten. The RDMA badge opens
the node's guide page. The Cluster pane owns one ``NodeActions``; tests reach the open
dialog through ``dialog``.
"""

from __future__ import annotations

import getpass
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import shiboken6
from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QDialog, QWidget

from gui.cluster import dialogs
from gui.cluster.table_model import (
    ACCESS,
    DETAILS,
    RETRY,
    TRUST,
    NodeTableModel,
    rdma_badge,
    status,
)

if TYPE_CHECKING:
    from core.cluster.registry import Node
    from core.cluster.scanner import Scanner
    from core.remote.ssh import UnknownHostKey
    from gui.bridge import Bridge


class Pane(Protocol):
    """What the actions need of the Cluster pane."""

    scanner: Scanner | None
    bridge: Bridge | None
    model: NodeTableModel

    def window(self) -> QWidget: ...

    def notify(self, text: str) -> None: ...


def is_demo(node: Node) -> bool:
    return "demo" in node.sources


def is_manual(node: Node) -> bool:
    return "manual" in node.sources


class NodeActions:
    """``open_url`` opens System Settings (QDesktopServices by default; tests record the
    URL); ``host_is_mac`` says whether this computer has System Settings to open."""

    def __init__(
        self,
        pane: Pane,
        open_url: Callable[[str], object] | None = None,
        host_is_mac: bool | None = None,
    ) -> None:
        self._pane = pane
        self._open_url = open_url or (lambda url: QDesktopServices.openUrl(QUrl(url)))
        self._host_is_mac = sys.platform == "darwin" if host_is_mac is None else host_is_mac
        self.pending_keys: dict[str, UnknownHostKey] = {}  # by node name
        self.dialog: QDialog | None = None  # the dialog open now

    @property
    def scanner(self) -> Scanner | None:
        return self._pane.scanner

    def run_action(self, name: str, action: str) -> None:
        """A row's action pill: Trust…, Set up access…, Retry or Details…."""
        if action == TRUST:
            self.show_host_key(name)
        elif action == ACCESS:
            self.show_access(name)
        elif action == DETAILS:
            self.show_host_key_changed(name)
        elif action == RETRY and self.scanner is not None:
            self.scanner.reprobe(name)

    def _node(self, name: str) -> Node | None:
        model = self._pane.model
        row = model.row_of(name)
        return model.node(row) if row is not None else None

    def _open(self, dialog: QDialog) -> QDialog:
        if self.dialog is not None and shiboken6.isValid(self.dialog):
            self.dialog.close()
        self.dialog = dialog
        dialog.destroyed.connect(lambda *_: self._forget_dialog(dialog))
        dialog.open()
        return dialog

    def _forget_dialog(self, dialog: object) -> None:
        if self.dialog is dialog:
            self.dialog = None

    def show_guide(self, name: str) -> dialogs.GuideDialog | None:
        """The RDMA guide page for this node's macOS (or its other problem)."""
        node = self._node(name)
        badge = rdma_badge(node) if node is not None else None
        if badge is None or badge.guide is None:
            return None
        scanner = self.scanner
        dialog = dialogs.GuideDialog(
            name,
            badge.guide,
            badge.reason,
            open_settings=self._open_url if self._host_is_mac else None,
            check_again=(lambda: scanner.reprobe(name)) if scanner is not None else None,
            parent=self._pane.window(),
        )
        self._open(dialog)
        return dialog

    def show_host_key(self, name: str) -> dialogs.HostKeyDialog | None:
        key = self.pending_keys.get(name)
        if key is None or self.scanner is None:  # the key is not known here yet: ask again
            if self.scanner is not None:
                self.scanner.reprobe(name)
            return None
        scanner = self.scanner

        def trust() -> None:
            self.pending_keys.pop(name, None)
            self._try(lambda: scanner.accept_host_key(name), "Could not remember the key")

        def distrust() -> None:
            self.pending_keys.pop(name, None)
            self._try(lambda: scanner.reject_host_key(name), "Could not refuse the key")

        dialog = dialogs.HostKeyDialog(
            name,
            getattr(key, "host", name),
            key.fingerprint,
            key.key.get_name(),
            trust=trust,
            distrust=distrust,
            parent=self._pane.window(),
        )
        self._open(dialog)
        return dialog

    def show_host_key_changed(self, name: str) -> dialogs.HostKeyChangedDialog | None:
        node = self._node(name)
        if node is None:
            return None
        scanner = self.scanner
        dialog = dialogs.HostKeyChangedDialog(
            name,
            node.probe_message,
            check_again=(lambda: scanner.reprobe(name)) if scanner is not None else None,
            parent=self._pane.window(),
        )
        self._open(dialog)
        return dialog

    def show_access(self, name: str) -> dialogs.AccessDialog | None:
        node = self._node(name)
        bridge = self._pane.bridge
        if node is None or self.scanner is None or bridge is None:
            return None
        scanner, user = self.scanner, node.user

        def set_up(new_user: str, password: str) -> None:
            """Off the GUI thread. A user other than the node's is remembered first (as a
            hand-added user@host), since the scanner logs in as the node's user."""
            if new_user and new_user != (user or getpass.getuser()):
                scanner.add_host(_host_text(node, new_user))
            scanner.set_up_access(name, password)

        dialog = dialogs.AccessDialog(
            name,
            user,
            set_up=set_up,
            run_in_background=bridge.run_in_background,
            parent=self._pane.window(),
        )
        self._open(dialog)
        return dialog

    def show_add_host(self) -> dialogs.AddHostDialog | None:
        if self.scanner is None:
            return None
        dialog = dialogs.AddHostDialog(self.scanner.add_host, parent=self._pane.window())
        self._open(dialog)
        return dialog

    def forget_host(self, name: str) -> bool:
        return bool(self.scanner is not None and self.scanner.remove_host(name))

    def _try(self, action: Callable[[], object], what: str) -> None:
        try:
            action()
        except Exception as error:  # a file or network problem: say it, keep the window
            self._pane.notify(f"{what}: {error}")

    def context_actions(self, name: str) -> list[tuple[str, Callable[[], object]]]:
        """What a row's context menu offers (the words and what each does)."""
        node = self._node(name)
        if node is None or self.scanner is None or is_demo(node):
            return []
        scanner = self.scanner
        actions: list[tuple[str, Callable[[], object]]] = [
            ("Check again", lambda: scanner.reprobe(name))
        ]
        if status(node) is None and rdma_badge(node).guide:
            actions.append(("How to fix RDMA…", lambda: self.show_guide(name)))
        if is_manual(node):
            actions.append(("Forget this Mac", lambda: self.forget_host(name)))
        return actions


def _host_text(node: Node, user: str) -> str:
    """``user@host:port`` for ``core.cluster.hosts.parse_host``."""
    host = node.ssh_host
    if ":" in host:
        host = f"[{host}]"
    return f"{user}@{host}:{node.ssh_port or 22}"
