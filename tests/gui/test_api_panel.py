"""The Run pane's API section over a (fake) job: on/off, key shown once and revoked,
examples, requests served, and API answers in the chat with who asked."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from core.model.info import ModelInfo, read_model_info
from core.plan.planner import Plan
from core.run.demo import demo_facts
from core.run.measure.history import History
from core.run.measure.telemetry import AnswerFigures
from core.run.states import RunState
from core.serve.service import ApiSettings, load_settings
from gui.bridge import Bridge
from gui.model.planning import plan_all
from gui.run.chat import ChatView
from gui.run.pane import RunPane
from tests.gui.fakes import FakeBehaviour, fake_factory
from tests.helpers.serving import free_port


@pytest.fixture(scope="module")
def demo_plans(demo_model: Path) -> tuple[ModelInfo, dict[str, Plan]]:
    info = read_model_info(demo_model)
    return info, plan_all(info, demo_facts(2))


def _pane(qtbot: QtBot, demo_plans) -> RunPane:
    bridge = Bridge()
    pane = RunPane(bridge, fake_factory())

    def before_close(_widget: RunPane) -> None:
        if pane.busy:
            pane.stop()
            qtbot.waitUntil(lambda: not pane.busy, timeout=10_000)
        pane.shutdown()
        bridge.close()

    qtbot.addWidget(pane, before_close_func=before_close)
    pane.resize(1100, 900)
    pane.show()
    info, plans = demo_plans
    pane.set_plan(info, plans["pipeline"])
    return pane


def _post(url: str, key: str | None, out: list) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {
        "model": "SmolLM2-135M-Instruct-mlx-q4",
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
    }
    out.append(httpx.post(f"{url}/chat/completions", json=body, headers=headers, timeout=30))


def _ask_in_thread(qtbot: QtBot, url: str, key: str | None) -> httpx.Response:
    """An HTTP client on its own thread while the GUI's event loop runs."""
    out: list = []
    thread = threading.Thread(target=_post, args=(url, key, out), daemon=True)
    thread.start()
    qtbot.waitUntil(lambda: bool(out), timeout=20_000)
    return out[0]


def test_the_api_serves_the_job_with_a_key_shown_once_and_revocable(
    qtbot: QtBot, demo_plans
) -> None:
    pane = _pane(qtbot, demo_plans)
    panel = pane.api_panel
    assert not panel.isVisible() and "Off" in panel.status.text()
    qtbot.mouseClick(pane.api_button, Qt.MouseButton.LeftButton)
    assert panel.isVisible()
    panel.port.setValue(free_port())
    panel.port.editingFinished.emit()
    panel.enabled.setChecked(True)
    qtbot.waitUntil(lambda: pane.api.settings.enabled, timeout=5000)
    # The service turned on in the background; the panel shows it once told, on its thread.
    qtbot.waitUntil(lambda: "once a job is running" in panel.status.text(), timeout=5000)
    qtbot.mouseClick(panel.new_key, Qt.MouseButton.LeftButton)
    key = panel.key.text()
    assert key.startswith("mm-") and key in panel.curl.toPlainText()
    assert key in panel.python.toPlainText() and panel.keys.count() == 1
    qtbot.mouseClick(panel.copy_key, Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == key
    qtbot.mouseClick(pane.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: pane.api.running, timeout=15_000)
    qtbot.waitUntil(lambda: "Serving at http://127.0.0.1:" in panel.status.text(), timeout=5000)
    url = pane.api.address
    assert _ask_in_thread(qtbot, url, None).status_code == 401
    answer = _ask_in_thread(qtbot, url, key)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "The capital of France is Paris."
    qtbot.waitUntil(lambda: "1 answered" in panel.status.text(), timeout=5000)
    text = pane.chat.text()
    assert "Asked through the API (made in the window)" in text and "Paris" in text
    # What the client asked, under who asked, before the answer.
    asked = text.index("Asked through the API (made in the window)")
    assert text.index("What is the capital of France?", asked) < text.index("Paris", asked)
    assert pane.controller._history == []  # an API answer is not the chat's conversation
    qtbot.waitUntil(lambda: bool(History().runs()), timeout=5000)
    kept = History().runs()  # but it is a run of the history, kept as "api"
    assert [(r.kind, r.figures["text"]) for r in kept] == [
        ("api", "The capital of France is Paris.")
    ]
    qtbot.mouseClick(panel.revoke, Qt.MouseButton.LeftButton)
    assert panel.keys.count() == 0 and panel.key.text() == ""
    assert _ask_in_thread(qtbot, url, key).status_code == 401
    qtbot.mouseClick(pane.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: pane.controller.state == RunState.STOPPED, timeout=10_000)
    qtbot.waitUntil(lambda: not pane.api.running, timeout=10_000)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models", timeout=5)


def test_sharing_always_needs_a_key_and_the_settings_are_kept(qtbot: QtBot, demo_plans) -> None:
    pane = _pane(qtbot, demo_plans)
    panel = pane.api_panel
    panel.require_key.setChecked(False)
    qtbot.waitUntil(lambda: not pane.api.settings.needs_key, timeout=5000)
    panel.share.setChecked(True)
    assert panel.require_key.isChecked() and not panel.require_key.isEnabled()
    expected = ApiSettings(share=True, require_key=True, port=8080)
    qtbot.waitUntil(lambda: load_settings() == expected, timeout=5000)  # kept in its file
    assert pane.api.settings.needs_key


def test_the_panel_says_whether_the_prompt_cache_is_one_per_key_or_shared(
    qtbot: QtBot, demo_plans
) -> None:
    pane = _pane(qtbot, demo_plans)
    panel = pane.api_panel
    assert not panel.shared_cache.isChecked()  # one per key unless the person chooses
    panel.enabled.setChecked(True)
    qtbot.waitUntil(lambda: "prompt cache: one per key" in panel.status.text(), timeout=5000)
    panel.shared_cache.setChecked(True)
    qtbot.waitUntil(lambda: load_settings().shared_prompt_cache, timeout=5000)
    qtbot.waitUntil(lambda: "prompt cache shared by every key" in panel.status.text(), timeout=5000)


def test_the_panel_shows_how_many_it_serves_at_once_and_how_many_wait(
    qtbot: QtBot, demo_plans
) -> None:
    """Ten clients at once on a batch of eight (the server's default): the panel says
    "serving 8 at once · 2 waiting" while they stream, then every one answered."""
    bridge = Bridge()
    pane = RunPane(bridge, fake_factory(FakeBehaviour(token_s=0.4)))  # streams for ~2.4 s

    def before_close(_widget: RunPane) -> None:
        if pane.busy:
            pane.stop()
            qtbot.waitUntil(lambda: not pane.busy, timeout=10_000)
        pane.shutdown()
        bridge.close()

    qtbot.addWidget(pane, before_close_func=before_close)
    info, plans = demo_plans
    pane.set_plan(info, plans["pipeline"])
    panel = pane.api_panel
    pane.api.apply(ApiSettings(enabled=True, require_key=False, port=free_port()))
    qtbot.mouseClick(pane.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: pane.api.running, timeout=15_000)
    out: list = []
    clients = [
        threading.Thread(target=_post, args=(pane.api.address, None, out), daemon=True)
        for _ in range(10)
    ]
    for client in clients:
        client.start()
    qtbot.waitUntil(lambda: "serving 8 at once · 2 waiting" in panel.status.text(), timeout=10_000)
    qtbot.waitUntil(lambda: len(out) == 10, timeout=30_000)
    assert [answer.status_code for answer in out] == [200] * 10
    qtbot.waitUntil(
        lambda: "serving 0 at once · 0 waiting · 10 answered" in panel.status.text(),
        timeout=5000,
    )


def test_the_chat_shows_what_an_api_client_asked_under_who_asked_and_scrolls_to_it(
    qtbot: QtBot,
) -> None:
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.resize(500, 300)
    chat.show()
    for n in range(40):  # a conversation longer than the view
        chat.add_question(f"question {n}")
        chat.add_token(f"r{n}", f"answer {n}")
        chat.finish_answer(f"r{n}", AnswerFigures(None, None, 0, 2, 5.0, 0.2, "stop", ""))
    bar = chat.answer.verticalScrollBar()
    bar.setValue(0)  # the person scrolled up to read
    assert bar.maximum() > 0
    chat.add_asked("key_ab12cd: Zed", "Which river runs through Paris?")
    chat.add_token("api-1", "The Seine.")
    lines = chat.text().splitlines()
    asked = lines.index("Asked through the API (key_ab12cd: Zed)")
    assert lines[asked + 1 :] == [
        "Which river runs through Paris?",
        "MacMesh cluster",
        "The Seine.",
    ]
    qtbot.waitUntil(lambda: bar.value() == bar.maximum(), timeout=2000)
    assert bar.value() > 0  # scrolled down to the question, not left at the top


def test_answers_streaming_at_once_each_grow_under_their_own_question(qtbot: QtBot) -> None:
    """Issue 24: the ranks answer a batch at once, their tokens interleaved. Each answer
    stays under its question (no heading per token switch), its figures line under it,
    through a theme change's re-render too."""
    from gui import style

    chat = ChatView()
    qtbot.addWidget(chat)
    chat.show()
    chat.add_question("Hello from the window")
    for n in range(3):
        chat.add_asked(f"app{n}", f"question {n}", f"api-{n}")
    chat.add_token("mine", "Hi")  # the window's own answer joins the batch last
    for word in ("one ", "two ", "three"):
        for n in range(3):
            chat.add_token(f"api-{n}", f"{word}{n}" if word == "three" else word)
        chat.add_token("mine", f" {word.strip()}")
    figures = AnswerFigures(None, None, 0, 3, 5.0, 0.2, "stop", "")
    chat.finish_answer("api-1", figures)
    expected = [
        "You", "Hello from the window",
        "MacMesh cluster", "Hi one two three",
        "Asked through the API (app0)", "question 0", "MacMesh cluster", "one two three0",
        "Asked through the API (app1)", "question 1", "MacMesh cluster", "one two three1",
        "3 tokens · 5.00 tokens/s · first token after 200 ms",
        "Asked through the API (app2)", "question 2", "MacMesh cluster", "one two three2",
    ]  # fmt: skip
    # The window's answer had no place yet: it opened at the end, after the questions.
    expected = expected[:2] + expected[4:] + expected[2:4]
    assert chat.text().splitlines() == expected
    app = QApplication.instance()
    style.apply(app, style.DARK)  # re-rendered from the record: the same, still streaming
    try:
        chat.add_token("api-0", " four")
        chat.add_note("a note at the end")
        chat.add_token("api-2", " four")
        lines = chat.text().splitlines()
        assert lines[lines.index("question 0") + 2] == "one two three0 four"
        assert lines[lines.index("question 2") + 2] == "one two three2 four"
        assert lines[-1] == "a note at the end"
        assert lines.count("MacMesh cluster") == 4
    finally:
        style.apply(app, style.LIGHT)
    chat.add_asked("app3", "question 3", "api-3")  # no token event: the text at its end
    chat.add_asked("app4", "question 4", "api-4")
    chat.finish_answer("api-3", replace(figures, text="whole"))
    lines = chat.text().splitlines()
    assert lines[lines.index("question 3") + 1 :][:3] == ["MacMesh cluster", "whole", lines[-4]]
    assert lines[-4].startswith("3 tokens") and lines[-3:] == [
        "Asked through the API (app4)",
        "question 4",
        "MacMesh cluster",
    ]
    chat.clear()  # a Start: the next job's "api-0" is a new answer
    chat.add_token("api-0", "new")
    assert chat.text().splitlines() == ["MacMesh cluster", "new"]


def test_metrics_without_a_key_is_a_setting_of_the_panel_kept_in_its_file(
    qtbot: QtBot, demo_plans
) -> None:
    pane = _pane(qtbot, demo_plans)
    panel = pane.api_panel
    assert not panel.metrics_open.isChecked()  # behind the key by default
    panel.metrics_open.setChecked(True)
    qtbot.waitUntil(lambda: pane.api.settings.metrics_without_key, timeout=5000)
    qtbot.waitUntil(lambda: load_settings().metrics_without_key, timeout=5000)
    assert pane.api.settings.needs_key  # the API itself keeps its key
