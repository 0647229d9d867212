"""Compare in the Run pane: one Mac then the cluster (off the GUI thread), side by side,
the headline large, kept as a "compare" run; refused while the window's job runs; Stop."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from core import units
from core.model.info import ModelInfo, read_model_info
from core.plan.planner import Plan
from core.run.demo import demo_facts
from core.run.job.launcher import JobSpec
from core.run.measure.history import History
from core.run.planning import estimate_cell
from core.run.session import Host
from core.run.states import RunState
from gui.bridge import Bridge
from gui.model.planning import plan_all
from gui.run.pane import COMPARE_DONE, RunPane
from tests.gui.fakes import FakeBehaviour, FakeJob


@pytest.fixture(scope="module")
def demo_plans(demo_model: Path) -> tuple[ModelInfo, dict[str, Plan]]:
    info = read_model_info(demo_model)
    return info, plan_all(info, demo_facts(2))


def _pane(qtbot: QtBot, demo_plans, token_s: dict[int, float]) -> RunPane:
    """A Run pane whose fake jobs answer at ``token_s[nodes]`` seconds a token."""
    jobs: list[FakeJob] = []

    def factory(spec: JobSpec) -> FakeJob:
        job = FakeJob(spec, FakeBehaviour(token_s=token_s[spec.nodes]))
        jobs.append(job)
        return job

    bridge = Bridge()
    pane = RunPane(bridge, factory)
    pane.jobs = jobs  # type: ignore[attr-defined]

    def before_close(_widget: RunPane) -> None:
        if pane.busy:
            pane.stop()
            qtbot.waitUntil(lambda: not pane.busy, timeout=20_000)
        pane.shutdown()
        bridge.close()

    qtbot.addWidget(pane, before_close_func=before_close)
    pane.resize(1000, 820)
    pane.show()
    info, plans = demo_plans
    pane.set_plan(info, plans["pipeline"])
    pane.set_cluster(DemoSource())
    return pane


class DemoSource:
    """The demo's simulated Macs with their facts, as the Cluster pane gives them."""

    def hosts(self, names: list[str]) -> list[Host]:
        facts = {f.name: f for f in demo_facts(4)}
        return [Host(name, None, facts[name]) for name in names]


def test_compare_runs_one_mac_then_the_cluster(qtbot: QtBot, demo_plans) -> None:
    pane = _pane(qtbot, demo_plans, {1: 0.04, 2: 0.01})
    locks: list[bool] = []
    pane.running_changed.connect(locks.append)
    with qtbot.waitSignal(pane.comparer.finished, timeout=60_000) as finished:
        assert pane.compare()
        assert not pane.compare_button.isEnabled() and not pane.start_button.isEnabled()
        assert pane.stop_button.isEnabled() and pane.state_badge.text() == "Comparing"
    result = finished.args[0]
    assert [job.spec.nodes for job in pane.jobs] == [1, 2]  # one Mac first, then two
    assert result.single.nodes == ["Studio A"] and result.single.ranks == 1
    assert result.cluster.nodes == ["Studio A", "Studio B"] and result.cluster.ranks == 2
    assert result.ratio > 1.5
    assert result.headline() == f"{result.ratio:.1f}× faster on 2 Macs"
    assert pane.comparison.isVisible()
    # The demo's Macs are simulated: the headline leads with the estimate for the real Macs
    # named, labelled as an estimate, its basis in the tooltip; the measured figure second.
    beside = pane.comparer.beside
    assert beside is not None and beside.simulated
    one, two = (beside.estimates[r.label].tokens_per_s for r in (result.single, result.cluster))
    assert one and two
    ratio = two / one
    estimated = f"{ratio:.1f}× faster on 2 Macs" if ratio >= 1.05 else f"{ratio:.2f}× on 2 Macs"
    shown = pane.comparison.headline.text()
    assert shown.startswith(f"Estimate for the real Macs: {estimated}"), shown
    assert result.headline() not in shown  # the measured ratio does not lead
    basis = pane.comparison.headline.toolTip()
    assert "On one Mac: An estimate, not a measurement" in basis
    assert "On the cluster: An estimate, not a measurement" in basis and "GB/s" in basis
    measured = pane.comparison.measured.text()
    assert pane.comparison.measured.isVisible()
    assert measured.startswith(f"Measured on simulated Macs: {result.ratio:.1f}× faster on 2 Macs")
    assert "the 2 demo Macs share this machine's" in measured and "loopback" in measured
    assert "says nothing about real Macs" in measured
    cells = pane.comparison.cells
    assert cells[(0, 0)] == "One Mac · Studio A" and cells[(0, 1)] == "Cluster · Studio A, Studio B"
    assert cells[(1, 0)].endswith("tokens/s") and cells[(2, 0)].endswith("tokens/s")
    # Beside the measured figures, the estimate for the real Macs named, its basis in a tooltip.
    for column, run in enumerate((result.single, result.cluster)):
        estimate = beside.estimates[run.label]
        assert cells[(4, column)] == estimate_cell(estimate)
        assert cells[(4, column)].startswith(f"{units.rate(estimate.tokens_per_s)} tokens/s (est.)")
        assert ", likely " in cells[(4, column)]
        # Both numbers: batch 1 and the aggregate at the planned batch, as the plan words it.
        assert estimate.batch > 1 and f"; {estimate.aggregate_text()}" in cells[(4, column)]
        tooltip = pane.comparison.tooltips[(4, column)]
        assert tooltip.startswith("An estimate, not a measurement") and "GB/s" in tooltip
    assert "Studio B: 150 MB" in cells[(5, 1)]  # memory per node, as the ranks reported
    assert pane.status.text() == COMPARE_DONE  # the headline said once, in the panel
    # The result takes the idle chat's and plots' room (no strip to scroll at 1280×800);
    # Close gives it back.
    assert not pane.splitter.isVisible() and pane.comparison.isVisible()
    pane.comparison.close_button.click()
    assert pane.splitter.isVisible() and not pane.comparison.isVisible()
    assert locks == [True, False] and pane.start_button.isEnabled()
    kept = History().runs()
    assert [r.kind for r in kept] == ["compare"]
    assert kept[0].figures["ratio"] == pytest.approx(result.ratio, abs=0.001)
    # The History lists what the view said first: the estimate, not the simulated ratio.
    assert kept[0].headline() == shown and kept[0].figures["measured"] == measured
    assert all(job.state.finished for job in pane.jobs)  # no rank left behind


def test_on_real_macs_the_measured_result_leads(qtbot: QtBot) -> None:
    """Real Macs: the measured headline, as before; no estimate lead, no simulated line."""
    from core.run.planning import EstimateBeside
    from core.run.tasks.compare import Comparison, RunFigures
    from gui.run.compare_view import CompareView

    def run(label: str, nodes: list[str], tps: float) -> RunFigures:
        return RunFigures(label, nodes, "tensor", len(nodes), tps, 200.0, 0.1, 40, 12, {}, "Paris")

    result = Comparison(
        run("one Mac", ["Studio A"], 20.0), run("cluster", ["Studio A", "Studio B"], 54.0), "tensor"
    )
    view = CompareView()
    qtbot.addWidget(view)
    view.show_result(result, EstimateBeside({}, simulated=False))
    assert view.headline.text() == "2.7× faster on 2 Macs" == result.headline()
    assert view.headline.toolTip() == "" and not view.measured.isVisible()


def test_compare_while_a_job_runs_stops_it_and_compares_in_one_click(
    qtbot: QtBot, demo_plans
) -> None:
    """Issue 35: no greyed-out Compare while a job runs; "Stop and compare" stops the job
    (the Macs' memory is its) and then compares, in one click."""
    pane = _pane(qtbot, demo_plans, {1: 0.01, 2: 0.01})
    idle_tip = pane.compare_button.toolTip()
    assert pane.compare_button.isEnabled() and "one Mac, then on the cluster" in idle_tip
    pane.start()
    qtbot.waitUntil(lambda: pane.controller.state == RunState.READY, timeout=10_000)
    button = pane.compare_button
    assert button.isEnabled() and button.text() == "Stop and compare"
    assert button.toolTip().startswith("Stops the job, then compares")
    with qtbot.waitSignal(pane.comparer.finished, timeout=60_000):
        button.click()
        qtbot.waitUntil(lambda: pane.controller.state == RunState.STOPPED, timeout=10_000)
    assert pane.jobs[0].state.finished  # the chat's job ended before the comparison ran
    assert len(pane.jobs) == 3  # the chat's job, then one Mac, then the cluster
    assert pane.comparison.isVisible()
    qtbot.waitUntil(lambda: not pane.busy, timeout=10_000)
    assert button.text() == "Compare" and button.toolTip() == idle_tip
    info, _plans = demo_plans
    pane.set_plan(info, plan_all(info, demo_facts(1))["auto"])  # a single Mac
    assert "runs on one Mac" in pane.compare_button.toolTip()


def test_stop_ends_a_comparison(qtbot: QtBot, demo_plans) -> None:
    pane = _pane(qtbot, demo_plans, {1: 0.5, 2: 0.5})  # slow answers: Stop lands in one
    pane.max_tokens.setValue(50)
    with qtbot.waitSignal(pane.comparer.failed, timeout=30_000) as failed:
        pane.compare()
        qtbot.waitUntil(lambda: bool(pane.jobs and pane.jobs[0].behaviour.sent), timeout=20_000)
        pane.stop()
    assert failed.args == ["Compare stopped."]
    assert len(pane.jobs) == 1 and pane.jobs[0].state.finished  # the cluster never ran
    assert not pane.busy and pane.start_button.isEnabled()
    assert History().runs() == []
