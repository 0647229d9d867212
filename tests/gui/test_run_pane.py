"""The Run pane with a fake job: start, loading per node, streaming, plots, stop, failure.

The fake emits what real ranks emit, on its own threads, in milliseconds; the real thing
runs in test_demo_run.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from core.model.info import ModelInfo, read_model_info
from core.plan.planner import Plan
from core.run.demo import demo_facts
from core.run.states import RunState
from core.worker.vocab import LoadingStage
from gui.bridge import Bridge
from gui.model.planning import plan_all
from gui.run.failure import LogDialog
from gui.run.pane import RunPane, describe_plan
from gui.run.progress import STAGE_WORDS, STEPS
from tests.gui.fakes import FakeBehaviour, fake_factory


@pytest.fixture(scope="module")
def demo_plans(demo_model: Path) -> tuple[ModelInfo, dict[str, Plan]]:
    info = read_model_info(demo_model)
    return info, plan_all(info, demo_facts(2))


def _pane(
    qtbot: QtBot, demo_plans, behaviour: FakeBehaviour | None = None, strategy: str = "pipeline"
) -> RunPane:
    bridge = Bridge()
    factory = fake_factory(behaviour)
    pane = RunPane(bridge, factory)
    pane.jobs = factory.jobs  # type: ignore[attr-defined]

    def before_close(_widget: RunPane) -> None:
        if pane.busy:
            pane.stop()
            qtbot.waitUntil(lambda: not pane.busy, timeout=10_000)
        pane.shutdown()
        bridge.close()

    qtbot.addWidget(pane, before_close_func=before_close)
    pane.resize(1000, 820)
    pane.show()
    info, plans = demo_plans
    pane.set_plan(info, plans[strategy])
    return pane


def _state(pane: RunPane) -> RunState:
    return pane.controller.state


def test_start_stream_and_stop(qtbot: QtBot, demo_plans) -> None:
    pane = _pane(qtbot, demo_plans)
    assert pane.start_button.isEnabled() and not pane.stop_button.isEnabled()
    assert "Studio A (18 layers) and Studio B (12 layers)" in pane.status.text()
    qtbot.mouseClick(pane.start_button, Qt.MouseButton.LeftButton)
    assert _state(pane) == RunState.LOADING
    assert pane.progress_box.isVisible() and pane.stop_button.isEnabled()
    assert not pane.start_button.isEnabled()
    qtbot.waitUntil(lambda: _state(pane) == RunState.READY, timeout=10_000)
    assert set(pane.progress.stages()) == {0, 1}
    assert all(bar.value() == STEPS for _n, bar, _s in pane.progress.rows.values())
    assert "Ready" in pane.status.text()
    pane.chat.prompt.setText("What is the capital of France?")
    qtbot.keyClick(pane.chat.prompt, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: "Paris" in pane.chat.text(), timeout=10_000)
    qtbot.waitUntil(lambda: _state(pane) == RunState.READY, timeout=10_000)
    assert "What is the capital of France?" in pane.chat.text()
    assert "The capital of France is Paris." in pane.chat.text()
    qtbot.waitUntil(lambda: "tokens/s" in pane.chat.text(), timeout=5000)  # the summary line
    telemetry = pane.controller.telemetry
    assert len(telemetry.tokens_per_s().smoothed[0]) > 0
    pane.redraw()
    x, _y = pane.plots.smoothed.getData()
    assert x is not None and len(x) > 0
    assert pane.plots.link_curves, "the link bandwidth plot has a curve per link"
    assert "Studio A ↔ Studio B" in pane.plots.link_key.text()
    assert pane.numbers.texts()["total"] == "7"  # six words and the end-of-sequence token
    assert len(pane.controller.averages) == 1
    qtbot.mouseClick(pane.stop_button, Qt.MouseButton.LeftButton)
    assert _state(pane) == RunState.STOPPING and not pane.stop_button.isEnabled()
    qtbot.waitUntil(lambda: _state(pane) == RunState.STOPPED, timeout=10_000)
    assert pane.jobs[0].state.finished
    assert pane.start_button.isEnabled() and not pane.timer.isActive()
    assert pane.numbers.texts()["links"] == "0 B/s"  # nothing moves once the job ended
    assert pane.numbers.texts()["total"] == "7"


def test_every_loading_stage_has_words() -> None:
    assert set(STAGE_WORDS) == set(LoadingStage) and all(STAGE_WORDS.values())
    assert max(s.step for s in LoadingStage) + 1 == STEPS  # ready fills the bar


def test_loading_stages_move_each_bar_in_order_and_read_in_words(qtbot: QtBot, demo_plans) -> None:
    pane = _pane(qtbot, demo_plans)
    seen: list[tuple[int, str, int]] = []
    pane.controller.rank_progress.connect(lambda *shown: seen.append(shown))
    pane.start()
    qtbot.waitUntil(lambda: _state(pane) == RunState.READY, timeout=10_000)
    for rank in (0, 1):
        steps = [(text, step) for r, text, step in seen if r == rank]
        assert [step for _text, step in steps] == sorted(step for _text, step in steps)
        words = [text for text, _step in steps]
        for stage in (LoadingStage.JOINING, LoadingStage.READING, LoadingStage.PLACING):
            assert (STAGE_WORDS[stage], stage.step) in steps, (stage, steps)
        assert (STAGE_WORDS[LoadingStage.WEIGHTS], LoadingStage.WEIGHTS.step) in steps
        assert words[-1] == "ready" and steps[-1][1] == STEPS


def test_the_conversation_is_sent_with_its_history(qtbot: QtBot, demo_plans) -> None:
    behaviour = FakeBehaviour()
    pane = _pane(qtbot, demo_plans, behaviour)
    pane.max_tokens.setValue(5)
    pane.start()
    qtbot.waitUntil(lambda: _state(pane) == RunState.READY, timeout=10_000)
    for prompt in ("First question", "Second question"):
        pane.ask(prompt)
        qtbot.waitUntil(lambda: _state(pane) == RunState.READY, timeout=10_000)
        qtbot.wait(20)
    assert [m["role"] for m in behaviour.sent[1]["messages"]] == ["user", "assistant", "user"]
    assert behaviour.sent[1]["messages"][1]["content"] == "The capital of France is"
    assert behaviour.sent[1]["max_tokens"] == 5


def test_a_prompt_typed_while_loading_is_sent_once_loaded(qtbot: QtBot, demo_plans) -> None:
    behaviour = FakeBehaviour(load_s=0.2)
    pane = _pane(qtbot, demo_plans, behaviour)
    pane.start()
    assert pane.chat.prompt.isEnabled()
    pane.ask("Early question")
    assert "Early question" in pane.chat.text()
    qtbot.waitUntil(lambda: "Paris" in pane.chat.text(), timeout=10_000)
    assert behaviour.sent[0]["messages"] == [{"role": "user", "content": "Early question"}]


def test_stop_while_loading(qtbot: QtBot, demo_plans) -> None:
    pane = _pane(qtbot, demo_plans, FakeBehaviour(load_s=1.0))
    pane.start()
    qtbot.waitUntil(lambda: bool(pane.jobs) and pane.jobs[0].state.value == "loading", timeout=5000)
    pane.stop()
    qtbot.waitUntil(lambda: _state(pane) == RunState.STOPPED, timeout=10_000)
    assert pane.jobs[0].state.value == "stopped"
    assert "Stopped" in pane.status.text()


def test_a_failure_shows_the_message_and_each_rank_log(qtbot: QtBot, demo_plans) -> None:
    message = "Rank 1 was killed (signal 9) while loaded\nLast log lines:\n  loading weights"
    pane = _pane(qtbot, demo_plans, FakeBehaviour(fail_after_load=message))
    pane.start()
    qtbot.waitUntil(lambda: _state(pane) == RunState.FAILED, timeout=10_000)
    banner = pane.banner
    assert banner.isVisible()
    assert banner.title.text() == "Rank 1 was killed (signal 9) while loaded"
    assert "loading weights" in banner.detail.text()
    assert [b.text() for b in banner.log_buttons] == ["Rank 0 log", "Rank 1 log"]
    assert pane.start_button.isEnabled() and not pane.stop_button.isEnabled()
    assert "Rank 1 was killed" in pane.status.text()
    qtbot.mouseClick(banner.log_buttons[1], Qt.MouseButton.LeftButton)
    dialogs = [
        w for w in QApplication.topLevelWidgets() if isinstance(w, LogDialog) and w.isVisible()
    ]
    assert len(dialogs) == 1
    assert "rank 1 log" in dialogs[0].text.toPlainText()
    dialogs[0].close()  # deletes itself (the leak check would catch it otherwise)


def test_ranks_that_cannot_start_are_a_failure(qtbot: QtBot, demo_plans) -> None:
    pane = _pane(qtbot, demo_plans, FakeBehaviour(start_error=OSError("no python here")))
    pane.start()
    qtbot.waitUntil(lambda: _state(pane) == RunState.FAILED, timeout=10_000)
    assert "no python here" in pane.banner.title.text()


def test_start_is_refused_with_the_reason(qtbot: QtBot, demo_plans) -> None:
    pane = _pane(qtbot, demo_plans, strategy="tensor")
    assert not pane.start_button.isEnabled()
    assert pane.status.text().startswith("Can't start: Tensor parallelism is not possible")
    assert "9 attention heads" in pane.status.text()
    pane.start()  # even if called, nothing starts
    assert _state(pane) == RunState.IDLE and pane.jobs == []


def test_describe_plan(demo_plans) -> None:
    _info, plans = demo_plans
    assert describe_plan(plans["auto"]) == "Single Mac: Studio A, all 30 layers"
    assert describe_plan(plans["pipeline"]).startswith("Pipeline on Studio A (18 layers)")


def test_stop_this_answer_ends_it_and_the_cluster_answers_the_next(
    qtbot: QtBot, demo_plans
) -> None:
    long = " ".join(f"word{n}" for n in range(200))
    behaviour = FakeBehaviour(token_s=0.05, answer=long)
    pane = _pane(qtbot, demo_plans, behaviour)
    qtbot.mouseClick(pane.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: _state(pane) == RunState.READY, timeout=10_000)
    assert not pane.chat.stop_answer.isVisible() and pane.chat.send.isVisible()
    pane.chat.prompt.setText("Tell me everything.")
    qtbot.keyClick(pane.chat.prompt, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: "word2 " in pane.chat.text(), timeout=10_000)
    assert pane.chat.stop_answer.isVisible() and not pane.chat.send.isVisible()
    qtbot.mouseClick(pane.chat.stop_answer, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: _state(pane) == RunState.READY, timeout=10_000)
    qtbot.waitUntil(lambda: "stopped" in pane.chat.text(), timeout=5000)
    assert "word199" not in pane.chat.text()
    assert not pane.chat.stop_answer.isVisible() and pane.chat.send.isEnabled()
    job = pane.jobs[0]
    assert [s["id"] for s in job.behaviour.sent] == ["r1"] and "r1" in job._cancelled
    behaviour.answer = "The capital of France is Paris."
    pane.chat.prompt.setText("What is the capital of France?")
    qtbot.keyClick(pane.chat.prompt, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: "France is Paris." in pane.chat.text(), timeout=10_000)
    qtbot.waitUntil(lambda: _state(pane) == RunState.READY, timeout=10_000)


def test_the_banner_shows_what_to_try_in_text_and_the_log_lines_apart(qtbot: QtBot) -> None:
    from core.run.job.rank_status import RankStatus, exit_message
    from gui.run.failure import FailureBanner

    status = RankStatus(1, node="Studio B", exit_code=-11, loaded=True, activity="generating")
    status.log.extend(["loading weights", "Segmentation fault"])
    banner = FailureBanner()
    qtbot.addWidget(banner)
    banner.show_failure(exit_message(status), [])
    assert banner.title.text() == "Rank 1 on Studio B was killed (signal 11) while generating"
    assert banner.advice.text().startswith("MLX crashes this way when memory runs out: try")
    assert banner.detail.text() == "Last log lines:\n  loading weights\n  Segmentation fault"
    banner.show_failure("Rank 0 exited with code 1 while loading weights", [])
    assert banner.advice.isHidden() and banner.detail.isHidden()


def test_the_status_says_when_an_adapter_is_loaded(
    qtbot: QtBot, tiny_models, tiny_adapter: Path
) -> None:
    """Issue 25 item 15: Ready said nothing of the fine-tuned adapter the job runs."""
    info = read_model_info(tiny_models["llama"])
    plans = plan_all(info, demo_facts(2))
    pane = _pane(qtbot, (info, plans))
    pane.start()
    qtbot.waitUntil(lambda: _state(pane) == RunState.READY, timeout=10_000)
    assert "adapter" not in pane.status.text()
    pane.stop()
    qtbot.waitUntil(lambda: not pane.busy, timeout=10_000)
    pane.controller.adapter = tiny_adapter
    pane.start()
    qtbot.waitUntil(lambda: _state(pane) == RunState.READY, timeout=10_000)
    assert pane.status.text().startswith("Ready · ")
    assert pane.status.text().endswith(f" · with the adapter {tiny_adapter.name}")


def test_an_answers_last_link_reports_are_drawn_though_nothing_moves_after(
    qtbot: QtBot, demo_plans
) -> None:
    """The link plot redraws every other tick and a tick is skipped while telemetry stands
    still: reports that land on a tick without the links are drawn at the next one, not
    left off until something else happens (a full run saw a fast answer's links missing)."""
    pane = _pane(qtbot, demo_plans)
    pane.start()
    qtbot.waitUntil(lambda: _state(pane) == RunState.READY, timeout=10_000)
    with qtbot.waitSignal(pane.controller.recorded, timeout=10_000):
        pane.ask("What is the capital of France?")
    pane.timer.stop()  # the ticks, one by one, by hand
    assert pane.controller.telemetry.link_series()
    pane.plots.clear()
    pane._drawn = -1  # the answer's last reports not drawn yet
    pane.plots._ticks = 1  # and the next tick leaves the links out
    pane.redraw()
    assert not pane.plots.link_curves
    version = pane.controller.version
    pane.redraw()  # nothing moved since
    assert pane.controller.version == version
    assert list(pane.plots.link_curves) == ["0↔1"]


def test_an_answer_streamed_stays_shown_when_a_rank_dies_after_it(qtbot: QtBot, demo_plans) -> None:
    """Issue 39 item 3, in the window: a rank that dies after the answer leaves the
    answer in the chat, whole, with its figures; the banner says what failed and the
    session's advice (the architecture, the strategy, what else runs here)."""
    message = "Rank 1 on Studio B exited with code 1 after the answer"
    pane = _pane(qtbot, demo_plans, FakeBehaviour(fail_after_answer=message))
    pane.start()
    qtbot.waitUntil(lambda: _state(pane) == RunState.READY, timeout=10_000)
    pane.ask("What is the capital of France?")
    qtbot.waitUntil(lambda: _state(pane) == RunState.FAILED, timeout=10_000)
    session = pane.controller.session
    assert session is not None
    advice = session.failure_advice()
    assert advice.startswith("The llama model failed on a 2-node pipeline.")
    qtbot.waitUntil(lambda: "tokens/s" in pane.chat.text(), timeout=5000)  # its figures
    shown = pane.chat.text()
    assert "What is the capital of France?" in shown
    assert "The capital of France is Paris." in shown  # streamed, and kept
    assert "The cluster stopped: see the message above." in shown
    assert shown.index("Paris.") < shown.index("The cluster stopped")
    banner = pane.banner
    assert banner.isVisible() and banner.title.text() == message
    assert banner.advice.isVisible() and banner.advice.text() == advice
    assert pane.start_button.isEnabled() and not pane.stop_button.isEnabled()
