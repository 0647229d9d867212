""" "Check my Macs" (issue 27): the Cluster pane's button and the View menu's action run
``macmesh doctor``'s report over the pane's Macs off the GUI thread and show it grouped
by what each check blocks, with its verdict, its fix and the overall verdict; "Save a
capture…" writes the redacted capture zip."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from core.cluster.capture import read_capture, write_capture
from core.cluster.discovery import BonjourPeer
from core.cluster.registry import ProbeState
from core.remote.ssh import SSHError, SSHTimeout
from core.remote.targets import Target
from core.run.checks.doctor_finding import FIREWALL_FIX
from core.run.demo import replay_nodes
from gui.bridge import Bridge
from gui.cluster.doctor_view import DoctorDialog
from gui.cluster.pane import ClusterPane
from gui.main_window import MainWindow
from gui.preferences import Preferences
from tests.fixtures.macos.hosts import load_facts
from tests.gui.fakes import FakeScanner

WAIT_MS = 60_000  # this machine's probe (the demo) on two busy cores


class DoctorScanner(FakeScanner):
    """The fake scanner with what the doctor asks of a real one: where each ready node
    is reached and each node's last SSH failure."""

    interfaces = ("127.0.0.1",)

    def __init__(self, hosts_path: Path) -> None:
        super().__init__(hosts_path)
        self.errors: dict[str, SSHError] = {}

    def target(self, name: str) -> Target:
        node = self.registry.get(name)
        if node is None or node.probe_state is not ProbeState.READY:
            raise ValueError(f"{name} is not ready")
        return Target(name=name, host=f"{name}.local", python="macmesh-python")

    def probe_error(self, name: str) -> SSHError | None:
        return self.errors.get(name)


def peer(name: str, address: str) -> BonjourPeer:
    return BonjourPeer(
        name,
        frozenset({"_ssh._tcp.local."}),
        hostname=f"{name}.local.",
        addresses=(address,),
        ssh_port=22,
        model="Mac16,9",
        osxvers=27,
    )


@pytest.fixture
def bridge() -> Iterator[Bridge]:
    bridge = Bridge()
    yield bridge
    bridge.close()
    bridge.deleteLater()


def close(dialog: DoctorDialog | None) -> None:
    if dialog is not None:
        dialog.close()


def test_the_report_over_the_scanners_macs_shows_each_group_verdict_and_fix(
    qtbot: QtBot, bridge: Bridge, tmp_path: Path
) -> None:
    scanner = DoctorScanner(tmp_path / "hosts.json")
    pane = ClusterPane(bridge, scanner=scanner, host_is_mac=True, open_url=lambda _url: None)
    qtbot.addWidget(pane)
    registry = scanner.registry
    for i, facts in enumerate(load_facts("pair27")):  # studio-f's Python has no mlx
        registry.peer_seen(peer(facts.name, f"10.0.0.{i + 2}"))
        registry.set_probe_result(facts.name, ProbeState.READY, "", facts)
    registry.peer_seen(peer("sleepy", "10.0.0.9"))
    registry.set_probe_state("sleepy", ProbeState.UNREACHABLE, "It did not answer.")
    scanner.errors["sleepy"] = SSHTimeout("sleepy.local", "no answer in 10 s")
    qtbot.waitUntil(lambda: len(pane.nodes()) == 3)

    dialog = pane.check_macs(try_links=False)
    try:
        assert dialog.isVisible() and dialog.verdict.text().startswith("Checking")
        assert not dialog.capture_button.isEnabled()  # nothing to save before the report
        with qtbot.waitSignal(dialog.reported, timeout=WAIT_MS) as done:
            pass
        report = done.args[0]
        assert report is not None and not report.ok
        assert set(report.nodes) == {"studio-e", "studio-f", "sleepy"}
        # Every check of the report has its row, in the groups' order, with its verdict.
        assert [r.check for r in dialog.rows] == [
            c for g in ("finding", "running", "linking") for c in report.group(g)
        ]
        shown = {(r.check.name, r.check.node): r for r in dialog.rows}
        python = shown[("python", "studio-f")]
        assert python.badge.text() == "Fails" and python.badge.kind == "danger"
        assert "has no mlx or mlx-lm" in python.message.text()
        assert not python.fix.isHidden() and "-m pip install mlx mlx-lm" in python.fix.text()
        firewall = shown[("firewall", "sleepy")]
        assert firewall.badge.kind == "danger" and FIREWALL_FIX in firewall.fix.text()
        rdma = shown[("rdma", "studio-f")]
        assert rdma.badge.text() == "Warning" and "System Settings" in rdma.fix.text()
        ok = next(r for r in dialog.rows if r.check.status == "ok")
        assert ok.badge.text() == "OK" and ok.fix.isHidden()
        assert [t.text() for t in dialog.titles] == [
            "FINDING THE MACS",
            "RUNNING A JOB",
            "LINKING THE MACS",
        ]
        assert dialog.verdict.text().startswith("Not ready (")
        assert "; sleepy could not be probed)" in dialog.verdict.text()

        # The capture: written where the person picked, redacted (no host name left).
        assert dialog.capture_button.isEnabled()
        with qtbot.waitSignal(dialog.saved, timeout=WAIT_MS) as saved:
            dialog.save_capture(tmp_path / "studio")
        path = Path(saved.args[0])
        assert path == tmp_path / "studio.zip" and "Capture saved to" in dialog.note.text()
        capture = read_capture(path)
        aliases = [n["alias"] for n in capture.manifest["nodes"]]
        assert len(aliases) == 3 and len(capture.nodes) == 2  # sleepy printed nothing
        with zipfile.ZipFile(path) as archive:
            texts = "\n".join(archive.read(n).decode() for n in archive.namelist())
        for name in ("studio-e", "studio-f", "sleepy"):
            assert name not in texts
        assert capture.manifest["redaction"]  # its rules are listed
    finally:
        close(dialog)


def test_a_capture_that_cannot_be_written_says_why(
    qtbot: QtBot, bridge: Bridge, tmp_path: Path
) -> None:
    pane = ClusterPane(bridge)
    qtbot.addWidget(pane)
    pane.start_demo(2)
    dialog = DoctorDialog(bridge, pane.nodes(), pane)
    try:
        with qtbot.waitSignal(dialog.saved, timeout=WAIT_MS) as saved:
            dialog.save_capture(tmp_path / "no-such-folder" / "capture.zip")
        assert saved.args == [""]
        assert dialog.note.text().startswith("The capture could not be saved: ")
        assert dialog.capture_button.isEnabled()  # try again elsewhere
    finally:
        close(dialog)


def test_the_panes_button_checks_the_demos_simulated_macs_with_this_machines_python(
    qtbot: QtBot, bridge: Bridge
) -> None:
    pane = ClusterPane(bridge)
    qtbot.addWidget(pane)
    pane.start_demo(2)
    pane.show()
    pane.check_button.click()
    dialog = pane.findChild(DoctorDialog)
    try:
        assert dialog is not None
        qtbot.waitUntil(lambda: dialog.report is not None, timeout=WAIT_MS)
        report = dialog.report
        assert report is not None and report.nodes == ("Studio A", "Studio B")
        assert report.ok, dialog.verdict.text()
        assert dialog.verdict.text() == "Every Mac can run a job (Studio A, Studio B)."
        finding = [r.message.text() for r in dialog.rows if r.check.name == "bonjour"]
        assert len(finding) == 2 and all("simulated Mac of the demo cluster" in t for t in finding)
        pythons = [r for r in dialog.rows if r.check.name == "python"]
        assert len(pythons) == 2 and all(r.badge.kind == "success" for r in pythons)
        _sized_to_its_rows(qtbot, dialog)
    finally:
        close(dialog)


def _sized_to_its_rows(qtbot: QtBot, dialog: DoctorDialog) -> None:
    """Issue 35: the report ends with its last row, not with screens of blank below
    (its rows' height wrapped at the narrowest width); the dialog is as tall as its rows
    need, within its screen."""
    inner = dialog.rows_area.widget()
    assert inner is not None
    need = inner.heightForWidth(dialog.rows_area.viewport().width())
    qtbot.waitUntil(lambda: inner.height() == max(need, dialog.rows_area.viewport().height()))
    last = dialog.rows[-1]
    assert inner.height() - (last.y() + last.height()) < 40 or need < dialog.rows_area.height()
    room = dialog.screen().availableGeometry().height()
    assert dialog.height() <= room
    shown = dialog.rows_area.viewport().height()
    chrome = dialog.height() - shown
    assert shown >= min(need, room - 80 - chrome) - 1  # as tall as it needs, room allowing


def test_the_view_menus_check_my_macs_opens_the_report(qtbot: QtBot) -> None:
    window = MainWindow(Preferences(), demo=True)
    qtbot.addWidget(window)
    assert window.check_macs_action in window.view_menu.actions()
    window.check_macs_action.trigger()
    dialog = window.findChild(DoctorDialog)
    try:
        assert dialog is not None
        qtbot.waitUntil(lambda: dialog.report is not None, timeout=WAIT_MS)
        assert dialog.report is not None
        assert set(dialog.report.nodes) == {n.name for n in window.cluster.nodes()}
        assert dialog.rows
    finally:
        close(dialog)
        window.close()


# -- macmesh demo --replay FILE.zip ---------------------------------------------------------


def pair27_capture(tmp_path: Path) -> Path:
    from tests.unit.test_capture import fixture_nodes

    return write_capture(tmp_path / "studio.zip", fixture_nodes("pair27"), log_root=tmp_path)


def test_a_replayed_capture_shows_its_macs_and_cables_and_their_own_verdicts(
    qtbot: QtBot, tmp_path: Path
) -> None:
    window = MainWindow(Preferences(), demo=True, replay=replay_nodes(pair27_capture(tmp_path)))
    qtbot.addWidget(window)
    pane = window.cluster
    qtbot.waitUntil(lambda: [n.name for n in pane.nodes()] == ["mac-1", "mac-2"])
    assert pane.is_demo and pane.demo_badge.text() == "Replayed capture"
    assert pane.size_box.isHidden()  # the capture says how many Macs
    diagram = pane.diagram()
    assert diagram is not None and len(diagram.cables) == 1  # the captured cable, not a mesh
    assert {diagram.cables[0].a, diagram.cables[0].b} == {"mac-1", "mac-2"}
    dialog = pane.check_macs()
    try:
        qtbot.waitUntil(lambda: dialog.report is not None, timeout=WAIT_MS)
        # The studio's verdicts, not this machine's: mac-2 (studio-f) has no mlx.
        python = next(r for r in dialog.rows if (r.check.name, r.check.node) == ("python", "mac-2"))
        assert python.badge.kind == "danger" and "has no mlx or mlx-lm" in python.message.text()
        assert dialog.verdict.text().startswith("Not ready (")
    finally:
        close(dialog)
    pane.start_demo(2)  # back to the demo's own Macs
    qtbot.waitUntil(lambda: [n.name for n in pane.nodes()] == ["Studio A", "Studio B"])
    assert pane.demo_badge.text() == "Demo cluster" and not pane.size_box.isHidden()
    window.close()


def test_replay_refuses_a_file_that_is_not_a_capture_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gui.app import main as app_main
    from gui.cli import main as cli_main

    bad = tmp_path / "notes.zip"
    bad.write_text("not a zip")
    assert app_main(["--replay", str(bad)]) == 2
    said = capsys.readouterr().err
    assert said.startswith("macmesh: --replay: ") and "is not a capture" in said
    assert said.count("\n") == 1
    assert cli_main(["demo", "--headless", "--replay", str(pair27_capture(tmp_path))]) == 2
    assert "drop --headless" in capsys.readouterr().err
