"""Issue 34, item 6: the Run pane's API panel says the served model's tool call format and
structured output, and an API answer that called a tool shows its call in the chat (a
fake job whose model is the demo model with Qwen2.5's tool template, answering with a
call; the demo model's own template has no call format, which the panel says too)."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.measure.telemetry import AnswerFigures
from gui.bridge import Bridge
from gui.model.planning import plan_all
from gui.run.chat import ChatView
from gui.run.pane import RunPane
from tests.gui.fakes import FakeBehaviour, fake_factory
from tests.helpers.serving import free_port
from tests.helpers.templates import TOOLS, templated

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def tool_model(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return templated(demo_model, tmp_path_factory.mktemp("gui-tools") / "demo-tools", TOOLS)


def _serving_pane(qtbot: QtBot, model: Path, answer: str) -> tuple[RunPane, str]:
    bridge = Bridge()
    pane = RunPane(bridge, fake_factory(FakeBehaviour(token_s=0.005, answer=answer)))

    def before_close(_widget: RunPane) -> None:
        if pane.busy:
            pane.stop()
            qtbot.waitUntil(lambda: not pane.busy, timeout=10_000)
        pane.shutdown()
        bridge.close()

    qtbot.addWidget(pane, before_close_func=before_close)
    pane.resize(1100, 900)
    pane.show()
    info = read_model_info(model)
    pane.set_plan(info, plan_all(info, demo_facts(2))["pipeline"])
    panel = pane.api_panel
    qtbot.mouseClick(pane.api_button, Qt.MouseButton.LeftButton)
    panel.port.setValue(free_port())
    panel.port.editingFinished.emit()
    panel.enabled.setChecked(True)
    qtbot.waitUntil(lambda: pane.api.settings.enabled, timeout=5000)
    qtbot.mouseClick(panel.new_key, Qt.MouseButton.LeftButton)
    key = panel.key.text()
    assert not panel.supports.isVisible()  # nothing served, nothing said
    qtbot.mouseClick(pane.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: pane.api.running, timeout=15_000)
    return pane, key


def _post(url: str, key: str, body: dict, out: list) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    out.append(httpx.post(f"{url}/chat/completions", json=body, headers=headers, timeout=30))


def test_the_panel_says_the_call_format_and_the_chat_shows_an_api_answers_call(
    qtbot: QtBot, tool_model: Path
) -> None:
    pane, key = _serving_pane(qtbot, tool_model, f"Checking. {CALL}")
    panel = pane.api_panel
    qtbot.waitUntil(lambda: "json_tools format" in panel.supports.text(), timeout=30_000)
    assert panel.supports.isVisible() and "structured output" in panel.supports.text()
    body = {
        "model": pane.api.model,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [WEATHER],
    }
    out: list = []
    threading.Thread(target=_post, args=(pane.api.address, key, body, out), daemon=True).start()
    qtbot.waitUntil(lambda: bool(out), timeout=20_000)
    assert out[0].status_code == 200, out[0].text
    [call] = out[0].json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    qtbot.waitUntil(lambda: "Tool call: get_weather" in pane.chat.text(), timeout=10_000)
    text = pane.chat.text()
    assert 'Tool call: get_weather {"city": "Paris"}' in text
    asked = text.index("Weather in Paris?")
    assert asked < text.index("Tool call: get_weather")


def test_the_panel_says_a_template_without_tools_has_no_call_format(
    qtbot: QtBot, demo_model: Path
) -> None:
    pane, _key = _serving_pane(qtbot, demo_model, "Paris.")
    qtbot.waitUntil(lambda: "no call format" in pane.api_panel.supports.text(), timeout=30_000)


def test_calls_go_under_their_answer_and_before_its_figures(qtbot: QtBot) -> None:
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.add_asked("key_1", "Weather?", "r1")
    chat.add_token("r1", "Checking.")
    chat.add_calls("r1", [{"name": "get_weather", "arguments": {"city": "x" * 400}}])
    chat.finish_answer("r1", AnswerFigures(None, None, 0, 2, 5.0, 0.2, "stop", "Checking."))
    lines = chat.text().splitlines()
    at = lines.index("Checking.")
    assert lines[at + 1].startswith('Tool call: get_weather {"city": "xxx')
    assert lines[at + 1].endswith("…") and len(lines[at + 1]) < 260  # shortened
    assert lines[at + 2].startswith("2 tokens")
