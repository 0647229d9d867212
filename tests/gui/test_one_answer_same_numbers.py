"""One answer, one set of numbers (issue 25, item 1): its tokens/s, time to first token and
token count read the same on the big-number cards, the chat line under it, its record in
the history, the CLI's summary and the API's ``usage``, and they are the figures
``core.run.measure.telemetry`` defines, recomputed here from the token events themselves.

The fake job sends what the worker sends over mlx-lm: one token event per generated token
(the end-of-sequence one included) and mlx-lm's own figures in ``done``, which read
otherwise (n tokens over n - 1 gaps; the worker's own time to first token). Surfaces that
read those raw fields showed 11.2 tokens/s where the card said 9.98, and 8 tokens where the
card said 7.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from pytestqt.qtbot import QtBot

from core import units
from core.cli.answer import launch_and_ask
from core.model.info import ModelInfo, read_model_info
from core.plan.planner import Plan
from core.run.demo import demo_facts
from core.run.measure.history import History, RunKind
from core.run.session import Session, simulated_hosts
from core.run.states import RunState
from core.serve import shaping
from core.serve.service import ApiSettings
from gui.bridge import Bridge
from gui.model.planning import plan_all
from gui.run.pane import RunPane
from tests.gui.fakes import FakeBehaviour, fake_factory
from tests.helpers.serving import free_port

QUESTION = "What is the capital of France?"
ANSWER = "The capital of France is Paris."
MAX_TOKENS = 64
TOKENS = len(ANSWER.split()) + 1  # its words and the end-of-sequence token


@pytest.fixture(scope="module")
def demo_plans(demo_model: Path) -> tuple[ModelInfo, dict[str, Plan]]:
    info = read_model_info(demo_model)
    return info, plan_all(info, demo_facts(2))


@pytest.fixture
def fresh_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MACMESH_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def behaviour() -> FakeBehaviour:
    # Tokens 30 ms apart, the first one later: mlx-lm's figures then differ from ours.
    return FakeBehaviour(token_s=0.03, answer=ANSWER)


def expected(events: list[dict[str, Any]]) -> tuple[int, float]:
    """The count and tokens/s of an answer from its token events: (n - 1) over the time
    from the first token to the last, as the module docstring of telemetry defines it."""
    times = [e["t"] for e in events if e["event"] == "token" and e.get("rank", 0) == 0]
    return len(times), (len(times) - 1) / (times[-1] - times[0])


def chat_line(text: str) -> dict[str, str]:
    """ "7 tokens · 12.3 tokens/s · first token after 31 ms" → its three figures."""
    line = text.strip().splitlines()[-1]
    found = re.fullmatch(r"(\d+) tokens · (\S+) tokens/s · first token after (.+)", line)
    assert found, line
    return {"total": found[1], "tps": f"{found[2]} tokens/s", "ttft": found[3]}


def _pane(qtbot: QtBot, demo_plans) -> tuple[RunPane, list[Any]]:
    bridge = Bridge()
    factory = fake_factory(behaviour())
    pane = RunPane(bridge, factory)

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
    pane.set_plan(info, plans["pipeline"])
    pane.max_tokens.setValue(MAX_TOKENS)
    return pane, factory.jobs


def _window_shows(pane: RunPane, count: int, tps: float, ttft_s: float) -> None:
    """The card and the chat line under the answer show these figures."""
    shown = {
        "total": str(count),
        "tps": f"{units.rate(tps)} tokens/s",
        "ttft": units.seconds(ttft_s),
    }
    pane.redraw(force=True)
    card = pane.numbers.texts()
    assert {"total": card["total"], "tps": card["tps"], "ttft": card["ttft"]} == shown
    assert chat_line(pane.chat.text()) == shown


def test_every_surface_of_the_window_shows_the_same_numbers(
    qtbot: QtBot, demo_plans, fresh_data: Path
) -> None:
    pane, jobs = _pane(qtbot, demo_plans)
    pane.start()
    qtbot.waitUntil(lambda: pane.controller.state == RunState.READY, timeout=10_000)
    events: list[dict[str, Any]] = []
    jobs[0].event.connect(events.append)
    with qtbot.waitSignal(pane.controller.recorded, timeout=10_000) as kept:
        pane.ask(QUESTION)
    done = next(e for e in events if e["event"] == "done")
    count, tps = expected(events)
    assert count == TOKENS

    figures = kept.args[0].figures
    assert figures["generation_tokens"] == count
    assert figures["generation_tps"] == pytest.approx(tps, rel=1e-9)
    assert History().runs()[0].figures["generation_tps"] == figures["generation_tps"]
    assert shaping.usage(done)["completion_tokens"] == count  # the API's usage of it
    _window_shows(pane, count, tps, figures["ttft_s"])
    # What the worker's raw fields would have shown: not what any surface shows.
    assert units.rate(done["generation_tps"]) != units.rate(tps)


def test_a_question_through_the_api_shows_the_same_numbers_everywhere(
    qtbot: QtBot, demo_plans, fresh_data: Path
) -> None:
    """One question from an OpenAI client: its ``usage``, the window's card and chat line,
    and the record the API keeps."""
    pane, jobs = _pane(qtbot, demo_plans)
    pane.api.apply(ApiSettings(enabled=True, require_key=False, port=free_port()))
    pane.start()
    qtbot.waitUntil(lambda: pane.api.running, timeout=10_000)
    events: list[dict[str, Any]] = []
    jobs[0].event.connect(events.append)
    body = {
        "model": demo_plans[0].name,
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": MAX_TOKENS,
    }
    reply = httpx.post(f"{pane.api.address}/chat/completions", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    usage = reply.json()["usage"]
    count, tps = expected(events)
    assert usage["completion_tokens"] == count == TOKENS
    qtbot.waitUntil(lambda: any(r.kind == RunKind.API for r in History().runs()), timeout=10_000)
    figures = next(r for r in History().runs() if r.kind == RunKind.API).figures
    assert figures["generation_tokens"] == count
    assert figures["generation_tps"] == pytest.approx(tps, rel=1e-9)
    qtbot.waitUntil(lambda: "tokens/s" in pane.chat.text().splitlines()[-1], timeout=10_000)
    _window_shows(pane, count, tps, figures["ttft_s"])


def test_the_cli_summary_and_its_record_show_the_same_numbers(demo_plans, fresh_data: Path) -> None:
    info, plans = demo_plans
    plan = plans["pipeline"]
    session = Session(
        info, simulated_hosts(demo_facts(2)), plan=plan, job_factory=fake_factory(behaviour())
    )
    events: list[dict[str, Any]] = []
    session.event.connect(events.append)
    out, err = io.StringIO(), io.StringIO()
    code = launch_and_ask(session, QUESTION, MAX_TOKENS, {}, "the demo", out, err, as_json=True)
    assert code == 0, err.getvalue()
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    count, tps = expected(events)
    done = next(e for e in events if e["event"] == "done")
    assert summary["generation_tokens"] == count == TOKENS
    assert summary["generation_tps"] == pytest.approx(tps, rel=1e-9)
    assert shaping.usage(done)["completion_tokens"] == count
    record = History().runs()[0]
    for key in ("generation_tokens", "generation_tps", "ttft_s", "prompt_tokens"):
        assert record.figures[key] == summary[key], key
