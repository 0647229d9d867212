"""`macmesh run` and the window's Start are one Start: both drive a
``core.run.session.Session`` on the same simulated Macs (two Thunderbolt 4 Mac minis behind
a real sshd), each observed through that session's own ``state_changed`` signal."""

from __future__ import annotations

import argparse
import io
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from core.cli.run import add_arguments, run
from core.cli.session import make_targets
from core.model.info import read_model_info
from core.remote.targets import Target
from core.run.session import Host, Session
from core.run.states import RunState
from gui.bridge import Bridge
from gui.run.pane import RunPane
from tests.fixtures.macos.make_bin import make_host_bins
from tests.helpers.remote import wait_nothing_left
from tests.helpers.sshd import SSHServer

pytestmark = pytest.mark.slow
HOSTS = {"127.0.0.2": "mini-g", "127.0.0.3": "mini-h"}
WAIT_MS = 180_000


@pytest.fixture(scope="module")
def sshd_addresses() -> tuple[str, ...]:
    return tuple(HOSTS)


@pytest.fixture(scope="module")
def sshd_host_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_host_bins("mini-tb4", HOSTS, tmp_path_factory.mktemp("tb4-bins"))


class Hosts:
    """The Run pane's ClusterSource over fixed targets, nothing probed yet."""

    def __init__(self, targets: Sequence[Target]) -> None:
        self._targets = {t.name: t for t in targets}

    def hosts(self, names: Sequence[str]) -> list[Host]:
        return [Host(name, self._targets[name]) for name in names]


@pytest.fixture
def sessions(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Session, list[str]]]:
    """Every Session made, with the states its own signal reported."""
    made: list[tuple[Session, list[str]]] = []
    init = Session.__init__

    def recording(self: Session, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        states: list[str] = []
        self.state_changed.connect(lambda state, _detail: states.append(state))
        made.append((self, states))

    monkeypatch.setattr(Session, "__init__", recording)
    return made


@pytest.mark.timeout(900)
def test_macmesh_run_and_the_windows_start_drive_the_same_session(
    qtbot: QtBot,
    sshd: SSHServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tiny_models: dict[str, Path],
    sessions: list[tuple[Session, list[str]]],
) -> None:
    ssh_dir = tmp_path / "ssh"
    ssh_dir.mkdir(mode=0o700)
    shutil.copy(sshd.client_key, ssh_dir / "id_ed25519")
    (ssh_dir / "known_hosts").write_text(sshd.known_hosts_lines())
    monkeypatch.setenv("MACMESH_SSH_DIR", str(ssh_dir))
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SSH_AUTH_SOCK", "")
    hosts = [f"{address}:{sshd.port}" for address in HOSTS]
    cache = str(tmp_path / "nodes" / "{host}")

    # macmesh run, in this process.
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = [str(tiny_models["llama"]), "--hosts", ",".join(hosts), "--strategy", "pipeline"]
    args = parser.parse_args([*argv, "--max-tokens", "3", "--cache-root", cache, "--json"])
    out, err = io.StringIO(), io.StringIO()
    assert run(args, out, err) == 0, err.getvalue()

    # The window's Start on the same Macs, with the plan macmesh run made.
    [(cli, _states)] = sessions
    assert cli.plan is not None
    bridge = Bridge()
    pane = RunPane(bridge)

    def before_close(_widget: RunPane) -> None:
        if pane.busy:
            pane.stop()
            qtbot.waitUntil(lambda: not pane.busy, timeout=60_000)
        pane.shutdown()
        bridge.close()

    qtbot.addWidget(pane, before_close_func=before_close)
    pane.max_tokens.setValue(3)
    pane.set_cluster(Hosts(make_targets(hosts, cache_root=cache)))
    pane.set_plan(read_model_info(tiny_models["llama"]), cli.plan)
    pane.start()
    qtbot.waitUntil(lambda: pane.controller.state == RunState.READY, timeout=WAIT_MS)
    pane.ask("Hello")
    qtbot.waitUntil(lambda: pane.controller.state == RunState.GENERATING, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: pane.controller.state == RunState.READY, timeout=WAIT_MS)
    pane.stop()
    qtbot.waitUntil(lambda: pane.controller.state == RunState.STOPPED, timeout=60_000)

    [(cli, cli_states), (window, window_states)] = sessions
    assert type(cli) is type(window) is Session
    assert pane.controller.session is window
    for states in (cli_states, window_states):  # the same life, told by the same signal
        assert states[0] == RunState.CHECKING and states[-1] == RunState.STOPPED
        order = [RunState.CHECKING, RunState.LOADING, RunState.READY, RunState.GENERATING]
        assert [states.index(s) for s in order] == sorted(states.index(s) for s in order)
    assert window.probed == tuple(hosts)  # nothing known of them: probed over SSH
    assert [t.name for t in window.targets] == [t.name for t in cli.targets]
    assert window.job.spec.split == cli.job.spec.split
    assert wait_nothing_left(sshd) == []
