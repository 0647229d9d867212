"""Test links in the Cables view: available while a job is ready, run off the GUI thread,
each link's result drawn on its cable (bytes/s and the share of its rate, latency in the
tooltip), kept in the history as a "linktest" run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from core.run.measure.history import History
from core.run.measure.links import LinkResult, Nominal
from core.run.planning import links_simulated, shared_machine
from core.run.states import RunState
from core.run.tasks.linktest import LinkTest
from gui.cluster.link_test_bar import LinkTestBar
from gui.cluster.pane import CABLES
from gui.cluster.topology_view import TopologyView
from gui.main_window import MainWindow
from gui.model.drop_zone import LOADED
from tests.gui.fakes import FakeBehaviour, fake_factory
from tests.gui.helpers import drop_paths


def _ready_window(
    qtbot: QtBot, demo_model: Path, macs: int, behaviour: FakeBehaviour | None = None
) -> MainWindow:
    window = MainWindow(demo=True, job_factory=fake_factory(behaviour or FakeBehaviour()))
    qtbot.addWidget(window, before_close_func=lambda w: _stop(qtbot, w))
    window.show()
    window.cluster.start_demo(macs)
    window.cluster.show_view(CABLES)
    window.run.controller.link_scale = 0.02  # the loopback TCP rate, measured quickly
    drop_paths(window.model.drop_zone, demo_model)
    qtbot.waitUntil(lambda: window.model.drop_zone.state == LOADED, timeout=20_000)
    window.model.select_strategy("pipeline")
    return window


def _stop(qtbot: QtBot, window: MainWindow) -> None:
    if window.run.busy:
        window.run.stop()
        qtbot.waitUntil(lambda: not window.run.busy, timeout=10_000)


def test_test_links_draws_each_result_on_its_cable(qtbot: QtBot, demo_model: Path) -> None:
    window = _ready_window(qtbot, demo_model, 4)
    bar = window.cluster.link_bar
    assert bar.isVisible() and not bar.button.isEnabled()
    assert "Start a job" in bar.note.text()
    window.run.start()
    qtbot.waitUntil(lambda: window.run.controller.state == RunState.READY, timeout=10_000)
    assert bar.button.isEnabled()
    with qtbot.waitSignal(window.run.controller.links_tested, timeout=30_000) as tested:
        bar.button.click()
        assert not bar.button.isEnabled()
        assert window.run.status.text() == "Testing the links, 4 KiB to 64 MiB…"
        assert not window.run.controller.ask("Hello?", 8)  # one thing at a time
    result = tested.args[0]
    nodes = result.nodes  # rank order
    assert sorted(nodes) == ["Studio A", "Studio B", "Studio C", "Studio D"]
    ring = {frozenset((nodes[r], nodes[(r + 1) % 4])) for r in range(4)}
    assert {frozenset(r.nodes) for r in result.results} == ring
    qtbot.waitUntil(lambda: window.run.controller.state == RunState.READY, timeout=10_000)
    scene = window.cluster.topology.scene
    measured = {frozenset((line.a, line.b)): line for line in scene.cables() if line.measured}
    assert set(measured) == ring
    first = measured[frozenset(nodes[:2])]  # rank 0's link: the fake's 2 GB/s
    assert re.fullmatch(r"1\.8\d GB/s · \d+ % of loopback TCP", first.caption), first.caption
    r0 = next(r for r in result.results if r.a == 0)
    assert r0.bytes_per_s == pytest.approx(2e9, rel=0.01)  # the 64 MiB message's rate
    assert f"{r0.share * 100:.0f} % of loopback TCP" in first.caption
    assert re.search(r"latency 2\d µs", first.tooltip), first.tooltip
    across = next(line for line in scene.cables() if {line.a, line.b} == {nodes[0], nodes[2]})
    assert not across.measured and across.caption == "80 Gb/s"  # not a link of the ring
    assert "4 links measured" in bar.note.text()
    # Issue 25 item 3: on the demo it says plainly what Compare says of its Macs.
    assert bar.note.text().endswith(" " + links_simulated(4)), bar.note.text()
    assert shared_machine(4) + ", so these rates are loopback's" in bar.note.text()
    kept = History().runs()
    assert [r.kind for r in kept] == ["linktest"]
    links = kept[0].figures["links"]
    assert {tuple(link["nodes"]) for link in links} == {r.nodes for r in result.results}
    assert all(link["nominal"] == "loopback TCP" and link["share"] > 0 for link in links)
    window.run.ask("What is the capital of France?")  # the job still answers
    qtbot.waitUntil(lambda: "Paris" in window.run.chat.text(), timeout=10_000)
    _stop(qtbot, window)
    window.run.start()  # a new job: the old figures leave the cables
    assert not any(line.measured for line in window.cluster.topology.scene.cables())


def test_one_mac_has_no_link_to_test(qtbot: QtBot, demo_model: Path) -> None:
    window = _ready_window(qtbot, demo_model, 1)
    window.model.select_strategy("auto")
    window.run.start()
    qtbot.waitUntil(lambda: window.run.controller.state == RunState.READY, timeout=10_000)
    assert not window.cluster.link_bar.button.isEnabled()


def test_a_job_failing_during_the_test_says_so(qtbot: QtBot, demo_model: Path) -> None:
    failure = "rank 1 exited with signal 9 while testing the links"
    window = _ready_window(qtbot, demo_model, 2, FakeBehaviour(link_failure=failure))
    window.run.start()
    qtbot.waitUntil(lambda: window.run.controller.state == RunState.READY, timeout=10_000)
    with qtbot.waitSignal(window.run.controller.links_failed, timeout=10_000) as failed:
        window.cluster.link_bar.button.click()
    assert failed.args == [f"The link test failed: {failure}"]
    qtbot.waitUntil(lambda: window.run.controller.state == RunState.FAILED, timeout=10_000)
    assert window.cluster.link_bar.note.text() == failed.args[0]
    assert not window.cluster.link_bar.button.isEnabled()
    assert not any(line.measured for line in window.cluster.topology.scene.cables())
    assert History().runs() == []
    assert window.run.banner.isVisible()  # the failure, with each rank's log


def test_test_links_shows_its_progress_per_link_and_size(qtbot: QtBot, demo_model: Path) -> None:
    """Issue 25 item 10: two minutes with one line of text, "Generating" and "Stop this
    answer". Now each step says its link and size, how far, and the time left."""
    window = _ready_window(qtbot, demo_model, 4, FakeBehaviour(token_s=1.2))
    bar, run = window.cluster.link_bar, window.run
    run.start()
    qtbot.waitUntil(lambda: run.controller.state == RunState.READY, timeout=10_000)
    seen: list[dict] = []
    run.controller.link_progress.connect(seen.append)
    with qtbot.waitSignal(run.controller.links_tested, timeout=30_000):
        bar.button.click()
        qtbot.waitUntil(lambda: len(seen) >= 2, timeout=10_000)
        assert bar.progress.isVisible() and bar.progress.maximum() == 12  # 3 sizes × 4 links
        assert re.fullmatch(
            r"Testing Studio [A-D] ↔ Studio [A-D] at \S+ \S+: step \d+ of 12, about \d+ s left\.",
            bar.note.text(),
        ), bar.note.text()
        assert run.state_badge.text() == "Testing links"
        assert not run.chat.stop_answer.isVisible()  # no answer to stop
    assert [e["done"] for e in seen] == list(range(1, len(seen) + 1))
    assert seen[-1]["done"] == seen[-1]["total"] == 12
    assert not bar.progress.isVisible() and "4 links measured" in bar.note.text()
    assert run.state_badge.text() == "Ready"


def test_test_links_has_its_own_stop_and_the_job_stays(qtbot: QtBot, demo_model: Path) -> None:
    """Issue 25 item 10: the link test's own Stop ends the test, not the job."""
    window = _ready_window(qtbot, demo_model, 4, FakeBehaviour(token_s=1.2))
    bar, run = window.cluster.link_bar, window.run
    run.start()
    qtbot.waitUntil(lambda: run.controller.state == RunState.READY, timeout=10_000)
    with qtbot.waitSignal(run.controller.links_failed, timeout=30_000) as failed:
        bar.button.click()
        qtbot.waitUntil(bar.stop_button.isVisible, timeout=10_000)
        bar.stop_button.click()
    assert failed.args == ["Link test stopped: nothing measured was kept."]
    qtbot.waitUntil(lambda: run.controller.state == RunState.READY, timeout=10_000)
    assert not bar.stop_button.isVisible() and not bar.progress.isVisible()
    assert bar.note.text() == "Link test stopped: nothing measured was kept."
    assert not any(line.measured for line in window.cluster.topology.scene.cables())
    assert History().runs() == []  # nothing kept
    assert run.controller.ask("What is the capital of France?", 4)  # the job still answers
    qtbot.waitUntil(lambda: "The capital" in run.chat.text(), timeout=20_000)


def test_on_real_macs_the_result_has_no_demo_caveat(qtbot: QtBot) -> None:
    """The caveat is the demo's: the bar asks whether the Macs are simulated per result."""
    simulated = [False]
    bar = LinkTestBar(TopologyView(), lambda: simulated[0])
    qtbot.addWidget(bar)
    nodes = ["studio-a", "studio-b"]
    points = ({"bytes": 64 << 20, "seconds": 0.01, "bytes_per_s": 6.7e9},)
    tb5 = Nominal("Thunderbolt 5", 10e9)
    tested = LinkTest(
        nodes, [LinkResult(0, 1, ("studio-a", "studio-b"), 9e-6, 6.7e9, points, tb5)], []
    )
    bar.show_tested(tested)
    assert bar.note.text().startswith("1 link measured") and "Simulated" not in bar.note.text()
    simulated[0] = True
    bar.show_tested(tested)
    assert bar.note.text().endswith(links_simulated(2))
