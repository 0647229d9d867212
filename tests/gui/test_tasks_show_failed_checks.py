"""Every task in the window shows a failed check the way Start does (``gui.task_runner``):
Compare (the Run pane) and a fine-tune (the Fine-tune view) on two Macs behind a real
sshd, one of which has no mlx (``tests.helpers.no_mlx``, the same Macs ``macmesh
compare`` and ``macmesh finetune`` are tested on), end at the checks, and the checks
view shows the failed check with its fix. Start, on two Macs whose facts the scanner
holds but which no SSH server answers, shows each check with its fix, twice over.
Nothing is started."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from core.cluster.registry import Node, ProbeState, Source
from core.model.info import ModelInfo, read_model_info
from core.remote.targets import Target
from core.run.demo import demo_facts
from core.run.placement import probe_targets
from core.run.session import Host
from core.run.states import RunState
from gui.model.planning import plan_all
from tests.gui.helpers import shown_run_pane
from tests.gui.tune_helpers import open_tune_view
from tests.helpers.no_mlx import (  # noqa: F401 (the module's sshd: these Macs)
    NoMlxMacs,
    no_mlx_macs,
    sshd_addresses,
    sshd_host_bins,
)
from tests.helpers.remote import wait_nothing_left
from tests.helpers.sshd import SSHServer

WAIT_MS = 120_000
ADDRESSES = ("127.0.0.9", "127.0.0.10")  # nothing listens there (Start's test)


class Unreachable:
    """A ClusterSource: the demo Macs' facts, just probed (so the plan is made without a
    probe), each at an address where no SSH server answers (so its checks fail)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        (tmp_path / "known_hosts").write_text("")

    def hosts(self, names: list[str]) -> list[Host]:
        facts = {f.name: f for f in demo_facts(2)}
        hosts = []
        for name, address in zip(names, ADDRESSES, strict=False):
            target = Target(
                name,
                address,
                22,
                known_hosts=self.tmp_path / "known_hosts",
                ssh_dir=self.tmp_path,
                timeout=5.0,
                cache_root=str(self.tmp_path / "nodes" / address),
            )
            hosts.append(Host(name, target, replace(facts[name], probed_at=time.monotonic())))
        return hosts


class Reached:
    """A ClusterSource: the Macs behind the sshd, nothing probed yet (each task's
    session probes them over SSH)."""

    def __init__(self, macs: NoMlxMacs) -> None:
        self.targets = {t.name: t for t in macs.targets()}

    def hosts(self, names: list[str]) -> list[Host]:
        return [Host(name, self.targets[name]) for name in names]


@pytest.fixture
def macs(sshd: SSHServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> NoMlxMacs:
    """The two Macs, one without mlx, reached with their own SSH folder."""
    macs = no_mlx_macs(sshd, tmp_path)
    for name, value in macs.env().items():
        monkeypatch.setenv(name, value)
    return macs


def _shows_the_missing_mlx(text: str, macs: NoMlxMacs) -> None:
    """The checks view's text: the Mac without mlx, its failed check, its fix under it."""
    assert f"{macs.node}'s Python" in text and macs.problem in text, text
    assert f"→ {macs.fix}" in text, text  # the fix, under its check
    assert "failed" in text


@pytest.fixture(scope="module")
def demo_info(demo_model: Path) -> ModelInfo:
    return read_model_info(demo_model)


def _shows_the_failed_checks(text: str, count: int) -> None:
    """The checks view's text: ``count`` Macs unreachable, each check with its fix."""
    reached = [a for a in ADDRESSES if f"({a}) cannot be reached" in text]
    assert len(reached) == count, text
    assert "→ Turn on Remote Login there" in text  # the fix, under its check
    assert "failed" in text


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_compare_stops_at_a_failed_check_and_shows_it_with_its_fix(
    qtbot: QtBot,
    demo_info: ModelInfo,
    macs: NoMlxMacs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "cache"))
    facts = probe_targets(macs.targets())
    pane = shown_run_pane(qtbot, demo_info, plan_all(demo_info, facts)["pipeline"], Reached(macs))
    assert not pane.checks.isVisible()
    with qtbot.waitSignal(pane.comparer.failed, timeout=WAIT_MS) as failed:
        assert pane.compare()
    assert failed.args[0].startswith(f"Compare failed: A check failed ({macs.node}: ")
    assert pane.checks.isVisible()  # the checks view, as after Start
    _shows_the_missing_mlx(pane.checks.text(), macs)  # the one-Mac run's: the Mac without mlx
    assert [c.status for c in pane.checks.checks].count("fail") == 1
    assert pane.status.text().startswith("Compare failed: ")
    assert pane.controller.job is None and not pane.comparer.busy
    assert pane.compare_button.isEnabled() and pane.start_button.isEnabled()
    assert wait_nothing_left(macs.server) == []


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_fine_tune_stops_at_a_failed_check_and_shows_it_with_its_fix(
    qtbot: QtBot,
    demo_info: ModelInfo,
    macs: NoMlxMacs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MACMESH_DATA_DIR", str(tmp_path / "home"))
    facts = probe_targets(macs.targets())
    view = open_tune_view(qtbot, demo_info)
    view.set_nodes(
        [
            Node(
                f.name,
                is_mac=True,
                sources=frozenset({Source.MANUAL}),
                facts=f,
                probe_state=ProbeState.READY,
            )
            for f in facts
        ]
    )
    assert view.node_names == macs.hosts
    view.set_cluster(Reached(macs))  # type: ignore[arg-type]
    view.use_demo_data()
    qtbot.waitUntil(lambda: view.data is not None, timeout=20_000)
    assert not view.checks.isVisible()
    with qtbot.waitSignal(view.controller.checks_failed, timeout=WAIT_MS):
        assert view.start()
    qtbot.waitUntil(lambda: view.controller.state == RunState.NOT_READY, timeout=WAIT_MS)
    assert view.checks.isVisible()  # the checks view, as after the Run pane's Start
    _shows_the_missing_mlx(view.checks.text(), macs)
    assert [c.status for c in view.checks.checks].count("fail") == 1
    tune = view.controller.tune
    assert tune is not None and tune.session.job is None  # nothing was started
    assert macs.problem in tune.session.error  # the session's NOT_READY detail
    assert view.start_button.isEnabled()
    assert not list((tmp_path / "home").rglob("*.safetensors"))  # no adapter left behind
    assert wait_nothing_left(macs.server) == []


def test_start_stops_at_a_failed_check_through_its_task_runner_and_starts_again(
    qtbot: QtBot, demo_info: ModelInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start (``RunController`` on ``TaskRunner``): the checks' report crosses to the
    checks view with each fix, the runner is free again, and a second Start runs its own
    checks (nothing is started either time)."""
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "cache"))
    pane = shown_run_pane(
        qtbot, demo_info, plan_all(demo_info, demo_facts(2))["pipeline"], Unreachable(tmp_path)
    )
    controller = pane.controller
    reports: list[object] = []
    controller.preflight_done.connect(reports.append)
    for attempt in (1, 2):
        pane.start()
        assert controller.state == RunState.CHECKING
        qtbot.waitUntil(lambda: controller.state == RunState.NOT_READY, timeout=WAIT_MS)
        qtbot.waitUntil(lambda: not controller._starter.busy, timeout=WAIT_MS)
        assert len(reports) == attempt  # each Start's own report, once
        assert pane.checks.isVisible()
        _shows_the_failed_checks(pane.checks.text(), 2)
        assert "check" in pane.status.text() and "failed" in pane.status.text()
        assert controller.job is None and pane.start_button.isEnabled()
