"""The Cluster pane over the real ``core.cluster.scanner.Scanner``: a real sshd on loopback
serving a simulated Mac, a first contact trusted through the dialog, an address where Remote Login
is off. Hosts are added by hand, Bonjour left out (``tests.helpers.scanner`` says why)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from core.cluster.registry import ProbeState
from core.cluster.scanner import Scanner
from gui.bridge import Bridge
from gui.cluster import dialogs
from gui.cluster.pane import ClusterPane
from gui.cluster.table_model import CHIP, MEMORY, RDMA, StatusRole
from tests.fixtures.macos.make_bin import make_host_bins
from tests.gui.cluster_helpers import click_action, row_data
from tests.helpers.scanner import hand_added_scanner
from tests.helpers.sshd import SSHServer

pytest_plugins = ["tests.helpers.sshd"]

WAIT_MS = 60_000  # a probe over SSH on two busy cores


@pytest.fixture(scope="module")
def sshd_addresses() -> tuple[str, ...]:
    return ("127.0.0.2",)


@pytest.fixture(scope="module")
def sshd_host_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gui-scanner-bins")
    return make_host_bins("mesh4", {"127.0.0.2": "studio-a"}, root)


@pytest.fixture(autouse=True)
def private_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MACMESH_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("MACMESH_SSH_DIR", str(tmp_path / "no-ssh"))


@pytest.fixture
def live(qtbot: QtBot, sshd: SSHServer, tmp_path: Path) -> Iterator[tuple[ClusterPane, Scanner]]:
    scanner = hand_added_scanner(sshd, tmp_path, tmp_path / "known_hosts", python="macmesh-python")
    bridge = Bridge()
    pane = ClusterPane(bridge, scanner=scanner, host_is_mac=False)
    qtbot.addWidget(pane)
    pane.resize(440, 500)
    pane.show()
    scanner.start()
    try:
        yield pane, scanner
    finally:
        if pane.actions.dialog is not None:
            pane.actions.dialog.close()
        scanner.close()
        bridge.close()
        bridge.deleteLater()


def _closed_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def test_a_new_mac_is_trusted_through_the_dialog_then_probed_over_ssh(
    qtbot: QtBot, live: tuple[ClusterPane, Scanner], sshd: SSHServer, tmp_path: Path
) -> None:
    pane, scanner = live
    name = f"127.0.0.2:{sshd.port}"
    scanner.add_host(name)
    qtbot.waitUntil(
        lambda: row_data(pane, name, CHIP) == "New Mac: check its identity", timeout=WAIT_MS
    )
    qtbot.waitUntil(lambda: name in pane.actions.pending_keys, timeout=WAIT_MS)
    click_action(qtbot, pane, name)
    dialog = pane.actions.dialog
    assert isinstance(dialog, dialogs.HostKeyDialog)
    server_key = paramiko.Ed25519Key(filename=str(sshd.root / "ssh_host_ed25519_key"))
    assert dialog.fingerprint.text() == server_key.fingerprint
    assert dialog.command == "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub"
    assert not (tmp_path / "known_hosts").exists()
    qtbot.mouseClick(dialog.trust_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: row_data(pane, name, CHIP) == "M3 Ultra", timeout=WAIT_MS)
    assert row_data(pane, name, MEMORY) == "512 GB"
    assert row_data(pane, name, RDMA) == "RDMA on"
    assert scanner.registry.get(name).probe_state is ProbeState.READY
    assert f"[127.0.0.2]:{sshd.port}" in (tmp_path / "known_hosts").read_text()


def test_remote_login_off_says_so_and_retry_probes_again(
    qtbot: QtBot, live: tuple[ClusterPane, Scanner]
) -> None:
    pane, scanner = live
    name = f"127.0.0.3:{_closed_port('127.0.0.3')}"
    probed: list[str] = []
    scanner.probed.connect(probed.append)
    scanner.add_host(name)
    qtbot.waitUntil(lambda: row_data(pane, name, CHIP) == "Unreachable", timeout=WAIT_MS)
    status = row_data(pane, name, CHIP, StatusRole)
    assert "No SSH server answers on 127.0.0.3" in status.detail
    assert status.action_label == "Retry"
    qtbot.waitUntil(lambda: len(probed) >= 1, timeout=WAIT_MS)
    before = len(probed)
    click_action(qtbot, pane, name)
    qtbot.waitUntil(lambda: len(probed) > before, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: row_data(pane, name, CHIP) == "Unreachable", timeout=WAIT_MS)
