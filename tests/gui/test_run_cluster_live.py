"""The window on real Macs: two simulated Thunderbolt 4 Mac minis (mini-tb4) behind a real
sshd on 127.0.0.2/.3, found by the real Scanner (added by hand, as a person would), a
tiny model dropped on the Model pane. Start runs the checks, copies the model with
per-Mac progress (Stop mid-copy keeps what arrived; the next Start resumes), runs the
2-rank ring job over SSH, streams tokens into the chat; Stop leaves nothing running."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import shiboken6
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from core.remote.modelcopy import CopyProgress
from core.run.states import RunState
from gui.main_window import MainWindow
from gui.model.drop_zone import LOADED
from tests.fixtures.macos.make_bin import make_host_bins
from tests.gui.helpers import drop_paths
from tests.helpers.jobs import assert_no_ranks_left
from tests.helpers.remote import wait_nothing_left
from tests.helpers.scanner import hand_added_scanner
from tests.helpers.sshd import SSHServer
from tests.helpers.tiny_models import make_tiny_model

pytestmark = pytest.mark.slow
HOSTS = {"127.0.0.2": "mini-g", "127.0.0.3": "mini-h"}
WAIT_MS = 180_000  # SSH probes, copies and two ranks on two busy cores


@pytest.fixture(scope="module")
def sshd_addresses() -> tuple[str, ...]:
    return tuple(HOSTS)


@pytest.fixture(scope="module")
def sshd_host_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_host_bins("mini-tb4", HOSTS, tmp_path_factory.mktemp("tb4-bins"))


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A tiny llama plus 48 MB every rank needs: a copy long enough to stop halfway."""
    folder = make_tiny_model(tmp_path / "model" / "tiny", layers=4, shards=2)
    (folder / "vocab.bin").write_bytes(os.urandom(48 << 20))
    return folder


@pytest.fixture
def window(
    qtbot: QtBot, sshd: SSHServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[MainWindow]:
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "hash-cache"))
    monkeypatch.setenv("MACMESH_REMOTE_CACHE", str(tmp_path / "nodes" / "{host}"))
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_lines())  # trusted already: tested in test_nodes_scanner
    scanner = hand_added_scanner(sshd, tmp_path, known)
    window = MainWindow()

    def stop_first(_w: MainWindow) -> None:
        if window.run.busy:
            window.run.stop()
            qtbot.waitUntil(lambda: not window.run.busy, timeout=60_000)
        dialog = window.run.launch_dialog
        if dialog is not None and shiboken6.isValid(dialog):
            dialog.close()

    qtbot.addWidget(window, before_close_func=stop_first)
    window.cluster.set_scanner(scanner)
    window.show()
    scanner.start()
    try:
        yield window
    finally:
        scanner.close()


def _state(window: MainWindow) -> RunState:
    return window.run.controller.state


def test_start_checks_copies_resumes_runs_and_stops_on_two_macs(
    qtbot: QtBot, window: MainWindow, sshd: SSHServer, model: Path, tmp_path: Path
) -> None:
    names = [f"{address}:{sshd.port}" for address in HOSTS]
    for name in names:
        window.cluster.scanner.add_host(name)
    run = window.run
    run.max_tokens.setValue(6)
    assert drop_paths(window.model.drop_zone, model)
    qtbot.waitUntil(lambda: window.model.drop_zone.state == LOADED, timeout=WAIT_MS)
    window.model.select_strategy("pipeline")
    qtbot.waitUntil(
        lambda: run._plan is not None and sorted(run._plan.nodes_used) == names, timeout=WAIT_MS
    )
    assert run.start_button.isEnabled()

    # Start; Stop once a tenth of a copy arrived: what arrived stays on the Macs.
    stopped_copy: list[object] = []

    def stop_copy(progress: CopyProgress) -> None:
        if not stopped_copy and progress.bytes_done > progress.bytes_total // 10:
            stopped_copy.append(progress)
            run.stop()

    run.controller.copy_progress.connect(stop_copy)
    qtbot.mouseClick(run.start_button, Qt.MouseButton.LeftButton)
    assert _state(window) == RunState.CHECKING and run.checks.isVisible()
    qtbot.waitUntil(lambda: _state(window) == RunState.STOPPED, timeout=WAIT_MS)
    run.controller.copy_progress.disconnect(stop_copy)
    assert "Copy stopped. What arrived is kept" in run.status.text()
    assert run.controller.job is None  # no rank was started
    assert "Backend: ring" in run.checks.text()  # Thunderbolt 4: ring, said plainly
    assert wait_nothing_left(sshd) == []
    partial = list((tmp_path / "nodes").glob("*/models/*.partial"))
    assert partial, "the stopped copy kept what arrived"

    # Start again: the copy resumes, the job runs, tokens stream into the chat.
    progress: list = []
    run.controller.copy_progress.connect(progress.append)
    qtbot.mouseClick(run.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: _state(window) == RunState.READY, timeout=WAIT_MS)
    first = {}
    for event in progress:
        first.setdefault(event.node, event)
    assert any(event.bytes_done > 0 for event in first.values()), "resumed, not restarted"
    assert set(run.checks.copy_text()) <= set(names)
    assert all(line.endswith("verified") for line in run.checks.copy_text().values())
    assert not run.checks.isVisible()  # loading took its place
    job = run.controller.job
    assert (
        job is not None
        and job.remote
        and [t.name for t in job.spec.targets] == list(run._plan.nodes_used)
    )
    run.chat.prompt.setText("Hello")
    qtbot.keyClick(run.chat.prompt, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: _state(window) == RunState.GENERATING, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: _state(window) == RunState.READY, timeout=WAIT_MS)
    [answer] = run.controller.telemetry.requests()
    assert answer.finished and answer.generation_tokens == 6 and answer.text
    assert answer.text.strip()[:12] in run.chat.text()  # streamed into the chat

    # The equivalent mlx.launch: the hostfile of these two Macs, the model where it was copied.
    qtbot.mouseClick(run.launch_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: run.launch_dialog is not None, timeout=WAIT_MS)
    dialog = run.launch_dialog
    hostfile = dialog.hostfile.toPlainText()
    assert '"backend": "ring"' in hostfile
    assert '"ssh": "127.0.0.2"' in hostfile and '"ssh": "127.0.0.3"' in hostfile
    assert str(tmp_path / "nodes") in dialog.command.toPlainText()
    dialog.close()

    qtbot.mouseClick(run.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: _state(window) == RunState.STOPPED, timeout=60_000)
    assert job.state.finished
    assert_no_ranks_left(job)
    assert wait_nothing_left(sshd) == []
