"""The Cluster pane in real mode: live nodes, their probe states, and what a person does
about them (trust a key, set up access, retry, add or forget a Mac, read an RDMA guide).

A real ``Registry`` and ``HostList`` behind ``FakeScanner`` (no network); changes come
from other threads the way discovery and probes make them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import paramiko
import pytest
from PySide6.QtCore import QPoint, Qt
from pytestqt.qtbot import QtBot

from core.cluster.discovery import BonjourPeer
from core.cluster.registry import ProbeState
from core.remote.ssh import AuthFailed, UnknownHostKey
from gui.bridge import Bridge
from gui.cluster import dialogs
from gui.cluster.pane import CABLES, ClusterPane
from gui.cluster.table_model import (
    CHIP,
    MEMORY,
    NAME,
    RDMA,
    BadgeRole,
    HintRole,
    StatusRole,
)
from tests.fixtures.macos.hosts import load_facts
from tests.gui.cluster_helpers import click_action, names, row_data
from tests.gui.fakes import FakeScanner

MESH = {f.name: f for f in load_facts("mesh4")}
PAIR = {f.name: f for f in load_facts("pair27")}


@pytest.fixture
def scanner(tmp_path: Path) -> FakeScanner:
    return FakeScanner(tmp_path / "hosts.json")


@pytest.fixture
def urls() -> list[str]:
    return []


@pytest.fixture
def pane(qtbot: QtBot, scanner: FakeScanner, urls: list[str]) -> Iterator[ClusterPane]:
    bridge = Bridge()
    pane = ClusterPane(bridge, scanner=scanner, open_url=urls.append, host_is_mac=True)
    qtbot.addWidget(pane)
    pane.resize(440, 600)
    pane.show()
    yield pane
    if pane.actions.dialog is not None:
        pane.actions.dialog.close()
    bridge.close()
    bridge.deleteLater()


def on_thread(work: Callable[[], None]) -> None:
    """Make a registry change on another thread, as zeroconf's and the probes' do."""
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()


def peer(name: str, address: str) -> BonjourPeer:
    return BonjourPeer(
        name,
        frozenset({"_ssh._tcp.local."}),
        hostname=f"{name}.local.",
        addresses=(address,),
        ssh_port=22,
        model="Mac15,14",
        osxvers=25,
    )


def ready(scanner: FakeScanner, name: str, facts: object) -> None:
    scanner.registry.set_probe_result(name, ProbeState.READY, "", facts)


def test_nodes_appear_change_state_and_leave_live(
    qtbot: QtBot, pane: ClusterPane, scanner: FakeScanner
) -> None:
    registry = scanner.registry
    assert pane.pages.currentIndex() == 0 and pane.add_button.isVisible()
    on_thread(lambda: registry.peer_seen(peer("studio-a", "10.0.0.2")))
    qtbot.waitUntil(lambda: names(pane) == ["studio-a"], timeout=5000)
    assert pane.pages.currentIndex() == 1
    on_thread(lambda: registry.set_probe_state("studio-a", ProbeState.PROBING, "Asking…"))
    qtbot.waitUntil(lambda: row_data(pane, "studio-a", CHIP) == "Probing…", timeout=5000)
    assert pane.table.columnSpan(0, CHIP) == 4  # the status spans chip … RDMA
    assert pane.table.spinner.isActive()  # the row's dot spins while it is probed
    on_thread(lambda: ready(scanner, "studio-a", MESH["studio-a"]))
    qtbot.waitUntil(lambda: row_data(pane, "studio-a", CHIP) == "M3 Ultra", timeout=5000)
    assert row_data(pane, "studio-a", MEMORY) == "512 GB"
    assert row_data(pane, "studio-a", RDMA) == "RDMA on"
    assert pane.table.columnSpan(0, CHIP) == 1 and not pane.table.spinner.isActive()
    on_thread(lambda: registry.peer_seen(peer("studio-b", "10.0.0.3")))
    qtbot.waitUntil(lambda: names(pane) == ["studio-a", "studio-b"], timeout=5000)
    assert pane.summary.text() == "2 Macs · 1 ready"
    on_thread(lambda: registry.peer_gone("studio-a"))
    qtbot.waitUntil(lambda: names(pane) == ["studio-b"], timeout=5000)
    on_thread(lambda: registry.peer_gone("studio-b"))
    qtbot.waitUntil(lambda: pane.pages.currentIndex() == 0, timeout=5000)


def test_every_probe_state_says_why_and_offers_its_action(
    qtbot: QtBot, pane: ClusterPane, scanner: FakeScanner
) -> None:
    for host in ("a.local", "b.local", "c.local", "d.local"):
        scanner.add_host(host)
    message = "Remote Login is off on a.local: turn it on in System Settings, then Retry."
    scanner.registry.set_probe_state("a.local", ProbeState.UNREACHABLE, message)
    scanner.registry.set_probe_state("b.local", ProbeState.NEEDS_HOST_KEY, "b.local is new")
    scanner.registry.set_probe_state("c.local", ProbeState.NEEDS_ACCESS, "Our key is refused")
    scanner.registry.set_probe_state("d.local", ProbeState.HOST_KEY_CHANGED, "It CHANGED")
    expected = {
        "a.local": ("Unreachable", message, "retry", "Retry"),
        "b.local": ("New Mac: check its identity", "b.local is new", "trust", "Trust…"),
        "c.local": ("MacMesh cannot log in yet", "Our key is refused", "access", "Set up access…"),
        "d.local": ("Identity changed: connection refused", "It CHANGED", "details", "Details…"),
    }
    for name, (title, detail, action, words) in expected.items():
        status = row_data(pane, name, CHIP, StatusRole)
        assert (status.title, status.detail, status.action, status.action_label) == (
            title,
            detail,
            action,
            words,
        )
        assert row_data(pane, name, CHIP, Qt.ItemDataRole.ToolTipRole) == f"{title}. {detail}"
        row = pane.model.row_of(name)
        assert pane.table.columnSpan(row, CHIP) == 4 and pane.table.rowHeight(row) == 46
    qtbot.waitUntil(lambda: pane.summary.text() == "4 Macs · 0 ready · 4 need you", timeout=5000)


def test_row_actions_go_to_the_scanner(
    qtbot: QtBot, pane: ClusterPane, scanner: FakeScanner
) -> None:
    scanner.add_host("a.local")
    scanner.registry.set_probe_state("a.local", ProbeState.UNREACHABLE, "No route")
    click_action(qtbot, pane, "a.local")
    assert scanner.calls[-1] == ("reprobe", "a.local")
    scanner.registry.set_probe_state("a.local", ProbeState.HOST_KEY_CHANGED, "")
    ready_row = pane.model.row_of("a.local")
    assert pane.model.index(ready_row, CHIP).data(StatusRole).action == "details"
    click_action(qtbot, pane, "a.local")
    assert isinstance(pane.actions.dialog, dialogs.HostKeyChangedDialog)
    pane.actions.dialog.close()


def _unknown_key(tmp_path: Path, host: str = "b.local") -> UnknownHostKey:
    key = paramiko.ECDSAKey.generate()
    return UnknownHostKey(host, 22, key, tmp_path / "known_hosts")


@pytest.mark.parametrize("trusted", [True, False])
def test_a_new_host_key_is_shown_with_its_fingerprint_and_only_the_person_trusts_it(
    qtbot: QtBot, pane: ClusterPane, scanner: FakeScanner, tmp_path: Path, trusted: bool
) -> None:
    scanner.add_host("b.local")
    error = _unknown_key(tmp_path)
    scanner.registry.set_probe_state("b.local", ProbeState.NEEDS_HOST_KEY, str(error))
    on_thread(lambda: scanner.host_key_needed.emit("b.local", error))
    qtbot.waitUntil(lambda: "b.local" in pane.actions.pending_keys, timeout=5000)
    assert scanner.calls == [("add_host", "b.local")]  # nothing trusted by itself
    click_action(qtbot, pane, "b.local")
    dialog = pane.actions.dialog
    assert isinstance(dialog, dialogs.HostKeyDialog) and dialog.isVisible()
    assert dialog.fingerprint.text() == error.fingerprint
    assert error.fingerprint.startswith("SHA256:")
    assert dialog.command == "ssh-keygen -lf /etc/ssh/ssh_host_ecdsa_key.pub"
    button = dialog.trust_button if trusted else dialog.distrust_button
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    expected = "accept_host_key" if trusted else "reject_host_key"
    assert scanner.calls[-1] == (expected, "b.local")
    assert "b.local" not in pane.actions.pending_keys
    assert not (tmp_path / "known_hosts").exists()  # the scanner records it, not the GUI


def test_a_changed_host_key_is_refused_loudly_with_the_fix(
    qtbot: QtBot, pane: ClusterPane, scanner: FakeScanner
) -> None:
    scanner.add_host("d.local")
    message = (
        "The host key of d.local has CHANGED: it was SHA256:old, it is now SHA256:new. "
        "MacMesh will not connect. If you know why it changed, remove the old key with "
        "`ssh-keygen -R d.local -f /home/me/.ssh/known_hosts` and connect again."
    )
    scanner.registry.set_probe_state("d.local", ProbeState.HOST_KEY_CHANGED, message)
    dialog = pane.actions.show_host_key_changed("d.local")
    assert dialog is not None and dialog.isVisible()
    assert dialog.command == "ssh-keygen -R d.local -f /home/me/.ssh/known_hosts"
    texts = [b.text() for b in dialog.findChildren(dialogs.QPushButton)]
    assert not any("Trust" in text for text in texts)
    qtbot.mouseClick(dialog.copy_button, Qt.MouseButton.LeftButton)
    assert dialogs.QGuiApplication.clipboard().text() == dialog.command
    qtbot.mouseClick(dialog.check_button, Qt.MouseButton.LeftButton)
    assert scanner.calls[-1] == ("reprobe", "d.local")


def test_set_up_access_passes_the_password_once_and_clears_it(
    qtbot: QtBot, pane: ClusterPane, scanner: FakeScanner
) -> None:
    scanner.add_host("c.local")
    scanner.registry.set_probe_state("c.local", ProbeState.NEEDS_ACCESS, "Our key is refused")
    click_action(qtbot, pane, "c.local")
    dialog = pane.actions.dialog
    assert isinstance(dialog, dialogs.AccessDialog)
    assert dialog.password.echoMode() == dialogs.QLineEdit.EchoMode.Password
    qtbot.mouseClick(dialog.submit_button, Qt.MouseButton.LeftButton)  # no password yet
    assert "Type the password" in dialog.error.text()
    assert not any(call[0] == "set_up_access" for call in scanner.calls)

    scanner.access_error = AuthFailed("c.local", "c.local refused the password: check it.")
    scanner.access_delay_s = 0.2
    dialog.password.setText("wrong secret")
    qtbot.mouseClick(dialog.submit_button, Qt.MouseButton.LeftButton)
    assert dialog.password.text() == "" and not dialog.submit_button.isEnabled()
    qtbot.waitUntil(lambda: dialog.error.isVisible(), timeout=5000)
    assert dialog.error.text() == "c.local refused the password: check it."
    assert dialog.isVisible() and dialog.submit_button.isEnabled()
    assert [c for c in scanner.calls if c[0] == "set_up_access"] == [
        ("set_up_access", "c.local", "wrong secret")
    ]

    scanner.access_error = None
    scanner.facts_after["c.local"] = MESH["studio-c"]
    dialog.password.setText("right secret")
    dialog.password.returnPressed.emit()
    assert dialog.password.text() == ""
    qtbot.waitUntil(lambda: pane.actions.dialog is None, timeout=5000)
    attempts = [c for c in scanner.calls if c[0] == "set_up_access"]
    assert attempts[-1] == ("set_up_access", "c.local", "right secret") and len(attempts) == 2
    qtbot.waitUntil(lambda: row_data(pane, "c.local", CHIP) == "M3 Ultra", timeout=5000)


def test_add_a_mac_by_hand_errors_inline_then_remembered_and_forgotten(
    qtbot: QtBot, pane: ClusterPane, scanner: FakeScanner
) -> None:
    qtbot.mouseClick(pane.add_button, Qt.MouseButton.LeftButton)
    dialog = pane.actions.dialog
    assert isinstance(dialog, dialogs.AddHostDialog)
    qtbot.keyClicks(dialog.field, "studio b")
    qtbot.mouseClick(dialog.add_button, Qt.MouseButton.LeftButton)
    assert dialog.isVisible() and dialog.error.isVisible()
    assert "neither a host name nor an IP address" in dialog.error.text()
    dialog.field.setText("ml@studio-b.local:2222")
    qtbot.mouseClick(dialog.add_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: pane.actions.dialog is None, timeout=5000)
    assert names(pane) == ["studio-b.local:2222"]
    assert [str(h) for h in scanner.hosts.hosts()] == ["ml@studio-b.local:2222"]
    assert '"port": 2222' in scanner.hosts.path.read_text()  # remembered
    actions = dict(pane.actions.context_actions("studio-b.local:2222"))
    assert list(actions) == ["Check again", "Forget this Mac"]
    actions["Forget this Mac"]()
    assert scanner.calls[-1] == ("remove_host", "studio-b.local:2222")
    assert names(pane) == [] and pane.pages.currentIndex() == 0


def test_hints_this_mac_and_linux(pane: ClusterPane, scanner: FakeScanner) -> None:
    registry = scanner.registry
    registry.peer_seen(replace(peer("box", "10.0.0.9"), model=None))
    registry.peer_seen(replace(peer("me", "10.0.0.1"), is_self=True))
    assert names(pane) == ["me", "box"]  # this Mac first
    assert row_data(pane, "me", NAME, HintRole) == "this Mac"
    assert row_data(pane, "box", NAME, HintRole) == "Linux · ring only"
    assert pane.pages.currentIndex() == 1
    registry.peer_gone("box")
    assert pane.pages.currentIndex() == 0  # this Mac alone: "No other Mac found yet"


def _facts(version: str) -> object:
    major, minor = (int(part) for part in version.split("."))
    return replace(PAIR["studio-f"], macos_version=version, macos_major=major, macos_minor=minor)


@pytest.mark.parametrize(
    ("version", "guide", "title"),
    [
        ("27.0", "rdma-macos27", "Turn on RDMA in System Settings (macOS 27 and later)"),
        ("26.2", "rdma-recovery", "Turn on RDMA from Recovery (macOS 26.2 to 26.x)"),
        ("26.1", "rdma-update-macos", "Update macOS before turning on RDMA"),
    ],
)
def test_the_rdma_badge_opens_the_guide_for_the_macs_version(
    qtbot: QtBot,
    pane: ClusterPane,
    scanner: FakeScanner,
    urls: list[str],
    version: str,
    guide: str,
    title: str,
) -> None:
    scanner.add_host("studio-f.local")
    ready(scanner, "studio-f.local", _facts(version))
    badge = row_data(pane, "studio-f.local", RDMA, BadgeRole)
    assert badge.guide == guide and badge.text in ("RDMA off", "Update macOS")
    index = pane.model.index(pane.model.row_of("studio-f.local"), RDMA)
    qtbot.mouseClick(
        pane.table.viewport(), Qt.MouseButton.LeftButton, pos=pane.table.visualRect(index).center()
    )
    dialog = pane.actions.dialog
    assert isinstance(dialog, dialogs.GuideDialog) and dialog.guide == guide
    assert dialog.page.toPlainText().startswith(title)
    if guide == "rdma-macos27":
        assert dialog.settings_button is not None and dialog.settings_button.isVisible()
        qtbot.mouseClick(dialog.settings_button, Qt.MouseButton.LeftButton)
        assert urls == ["x-apple.systempreferences:com.apple.preference.security?Privacy_DevTools"]
    else:
        assert dialog.settings_button is None and urls == []
    qtbot.mouseClick(dialog.check_button, Qt.MouseButton.LeftButton)
    assert scanner.calls[-1] == ("reprobe", "studio-f.local")
    qtbot.waitUntil(lambda: pane.actions.dialog is None, timeout=5000)


def test_no_system_settings_button_when_this_computer_is_not_a_mac(
    qtbot: QtBot, scanner: FakeScanner
) -> None:
    bridge = Bridge()
    pane = ClusterPane(bridge, scanner=scanner, host_is_mac=False)
    qtbot.addWidget(pane)
    scanner.add_host("studio-f.local")
    ready(scanner, "studio-f.local", _facts("27.0"))
    dialog = pane.actions.show_guide("studio-f.local")
    assert dialog is not None and dialog.guide == "rdma-macos27"
    assert dialog.settings_button is None
    dialog.close()
    bridge.close()
    bridge.deleteLater()


def test_a_ready_cluster_shows_its_cables(
    qtbot: QtBot, pane: ClusterPane, scanner: FakeScanner
) -> None:
    for name, facts in MESH.items():
        scanner.add_host(name)
        ready(scanner, name, facts)
    qtbot.waitUntil(lambda: pane.view_box.isVisible(), timeout=5000)
    qtbot.mouseClick(pane.view_box.buttons[CABLES], Qt.MouseButton.LeftButton)
    assert pane.views.currentWidget() is pane.topology
    scene = pane.topology.scene
    assert scene is not None and scene.headline == "Full mesh" and len(scene.cables()) == 6
    pane.table.viewport().mapToGlobal(QPoint(0, 0))  # still alive behind the map
