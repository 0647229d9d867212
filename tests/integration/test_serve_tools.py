"""Tool calls on the three dialects (issue 34, items 1 and 2), with the real ``openai``,
``anthropic`` and ``ollama`` packages against a real server over a fake job (a real
Session, no MLX) whose model is the demo model with Qwen2.5's tool template (mlx-lm
reads its calls with ``json_tools``) and whose ranks answer with a scripted text holding
a call: the call read, whole and streamed (OpenAI's id and name first, then argument
fragments; Anthropic's ``input_json_delta``; Ollama's ``tool_calls``), the conversation's
calls and results rendered through the template into the ranks' tokens, a forced choice
sending its call schema for constrained decoding, and the demo model's own template
(no tools) refusing ``tool_choice: auto`` with a 400."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import ollama
import openai
import pytest
from mlx_lm.utils import load_tokenizer

from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.session import Session, simulated_hosts
from core.serve.keys import Gate
from core.serve.server import APIServer, ServerOptions
from core.serve.tool_schema import call_schema, constraint
from tests.gui.fakes import FakeBehaviour, fake_factory
from tests.helpers.templates import TOOLS, templated

KEY = "mm-" + "t" * 40
MODEL = "demo"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}</tool_call>'
ANSWER = f"Let me look. {CALL}"
ARGUMENTS = {"city": "Paris", "unit": "C"}


class Serving:
    def __init__(self, folder: Path, answer: str) -> None:
        self.behaviour = FakeBehaviour(token_s=0.002, answer=answer)
        self.session = Session(
            read_model_info(folder),
            simulated_hosts(demo_facts(2)),
            job_factory=fake_factory(self.behaviour),
        )
        self.session.start()
        self.session.wait_ready(30)
        self.calls: list[tuple[str, list[dict]]] = []
        self.server = APIServer(
            self.session, MODEL, 8192, Gate(key=KEY), ServerOptions("127.0.0.1", 0)
        )
        self.server.served.on_calls = lambda request, calls: self.calls.append((request, calls))
        self.server.start()
        assert self.server.served.prompts is not None and self.server.served.prompts.wait(60)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def stop(self) -> None:
        self.server.stop()
        self.session.stop()


@pytest.fixture(scope="module")
def tool_model(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return templated(demo_model, tmp_path_factory.mktemp("tools") / "demo-tools", TOOLS)


def _serving(folder: Path, answer: str) -> Iterator[Serving]:
    serving = Serving(folder, answer)
    try:
        yield serving
    finally:
        serving.stop()


@pytest.fixture
def calling(tool_model: Path) -> Iterator[Serving]:
    """The tool template; the ranks answer with prose, then a call."""
    yield from _serving(tool_model, ANSWER)


@pytest.fixture
def json_call(tool_model: Path) -> Iterator[Serving]:
    """The tool template; the ranks answer with a call's JSON (a forced answer)."""
    yield from _serving(tool_model, '{"name": "get_weather", "arguments": {"city": "Oslo"}}')


@pytest.fixture
def no_tools(demo_model: Path) -> Iterator[Serving]:
    """The demo model's own template, which knows no tools."""
    yield from _serving(demo_model, "Paris is sunny.")


def _openai(serving: Serving) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{serving.url}/v1", api_key=KEY, max_retries=0)


def test_openai_reads_the_call_whole_and_streamed_alike(calling: Serving) -> None:
    client = _openai(calling)
    whole = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER, TIME])
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content.strip() == "Let me look."
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == ARGUMENTS

    stream = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER, TIME], stream=True
    )
    deltas, text, finish = [], "", None
    for chunk in stream:
        delta = chunk.choices[0].delta
        text += delta.content or ""
        deltas.extend(delta.tool_calls or [])
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and text.strip() == "Let me look."
    first, *fragments = deltas
    assert first.index == 0 and first.id.startswith("call_")
    assert first.function.name == "get_weather" and first.function.arguments == ""
    assert len(fragments) >= 2 and all(f.id is None and f.function.name is None for f in fragments)
    assert json.loads("".join(f.function.arguments for f in fragments)) == ARGUMENTS
    assert [calls for _request, calls in calling.calls] == [
        [{"name": "get_weather", "arguments": ARGUMENTS}]
    ] * 2  # the window's chat hears of both


def test_the_tool_loop_renders_the_call_and_its_result_into_the_ranks_tokens(
    calling: Serving, tool_model: Path
) -> None:
    client = _openai(calling)
    first = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER])
    call = first.choices[0].message.tool_calls[0]
    turns = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees, sunny"},
    ]
    client.chat.completions.create(model=MODEL, messages=turns, tools=[WEATHER])
    tokenizer = load_tokenizer(tool_model)
    prompt = tokenizer.decode(calling.behaviour.sent[-1]["tokens"])
    assert '"name": "get_weather"' in prompt and "<tools>" in prompt
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}' in (
        prompt
    )
    assert "<tool_response>\n18 degrees, sunny\n</tool_response>" in prompt


def test_a_forced_choice_sends_its_call_schema_and_reads_the_json_call(json_call: Serving) -> None:
    client = _openai(json_call)
    named = {"type": "function", "function": {"name": "get_weather"}}
    for choice, stream in (("required", False), (named, False), ("required", True)):
        answer = client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            tools=[WEATHER, TIME],
            tool_choice=choice,  # type: ignore[arg-type]
            stream=stream,
        )
        if stream:
            pieces = [d for c in answer for d in (c.choices[0].delta.tool_calls or [])]
            assert pieces[0].function.name == "get_weather"
            arguments = "".join(p.function.arguments or "" for p in pieces)
        else:
            [call] = answer.choices[0].message.tool_calls
            assert answer.choices[0].finish_reason == "tool_calls"
            arguments = call.function.arguments
        assert json.loads(arguments) == {"city": "Oslo"}
        sent = json_call.behaviour.sent[-1]
        assert constraint(call_schema([WEATHER, TIME], choice)).items() <= sent["sampling"].items()
    assert call_schema([WEATHER, TIME], named)["properties"]["name"] == {"const": "get_weather"}
    # a named function the answer does not call: the server says so, never prose as a call
    with pytest.raises(openai.InternalServerError) as wrong:
        client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            tools=[WEATHER, TIME],
            tool_choice={"type": "function", "function": {"name": "get_time"}},
        )
    assert "not a call of get_time" in str(wrong.value)


def test_tool_choice_none_leaves_the_text_as_written(calling: Serving) -> None:
    answer = _openai(calling).chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="none"
    )
    assert answer.choices[0].message.tool_calls is None
    assert "<tool_call>" in answer.choices[0].message.content
    assert answer.choices[0].finish_reason == "stop"


def test_anthropic_tool_use_whole_and_streamed(calling: Serving) -> None:
    client = anthropic.Anthropic(base_url=calling.url, api_key=KEY, max_retries=0)
    tools = [
        {
            "name": "get_weather",
            "description": "The weather in a city now",
            "input_schema": WEATHER["function"]["parameters"],
        }
    ]
    message = client.messages.create(model=MODEL, max_tokens=64, messages=ASK, tools=tools)
    assert message.stop_reason == "tool_use"
    text, use = message.content
    assert text.type == "text" and text.text.strip() == "Let me look."
    assert use.type == "tool_use" and use.id.startswith("toolu_")
    assert use.name == "get_weather" and use.input == ARGUMENTS

    with client.messages.stream(model=MODEL, max_tokens=64, messages=ASK, tools=tools) as s:
        kinds = [event.type for event in s]
        final = s.get_final_message()
    assert "input_json" in kinds  # the SDK's event for each input_json_delta
    assert final.stop_reason == "tool_use"
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[1].input == ARGUMENTS and final.content[1].name == "get_weather"

    # the loop: tool_use and tool_result blocks render through the template
    again = client.messages.create(
        model=MODEL,
        max_tokens=64,
        tools=tools,
        messages=[
            *ASK,
            {"role": "assistant", "content": [use.model_dump()]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "18 C"}],
            },
        ],
    )
    assert again.stop_reason == "tool_use"
    tokens = calling.behaviour.sent[-1]["tokens"]
    prompt = load_tokenizer(calling.server.served.prompts.folder).decode(tokens)  # type: ignore[union-attr]
    assert "<tool_response>\n18 C\n</tool_response>" in prompt


def test_anthropic_any_is_a_forced_call(json_call: Serving) -> None:
    client = anthropic.Anthropic(base_url=json_call.url, api_key=KEY, max_retries=0)
    tools = [{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}]
    message = client.messages.create(
        model=MODEL, max_tokens=64, messages=ASK, tools=tools, tool_choice={"type": "any"}
    )
    assert [b.type for b in message.content] == ["tool_use"]
    assert message.content[0].input == {"city": "Oslo"}
    schema = call_schema([WEATHER], "required")
    assert constraint(schema).items() <= json_call.behaviour.sent[-1]["sampling"].items()
    with client.messages.stream(
        model=MODEL, max_tokens=64, messages=ASK, tools=tools, tool_choice={"type": "any"}
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    [use] = [b for b in final.content if b.type == "tool_use"]
    assert use.input == {"city": "Oslo"} and use.name == "get_weather"


def test_ollama_tool_calls_whole_and_streamed(calling: Serving) -> None:
    client = ollama.Client(host=calling.url, headers={"Authorization": f"Bearer {KEY}"})
    whole = client.chat(model=MODEL, messages=ASK, tools=[WEATHER], stream=False)
    [call] = whole.message.tool_calls
    assert call.function.name == "get_weather" and dict(call.function.arguments) == ARGUMENTS
    streamed = [
        c
        for part in client.chat(model=MODEL, messages=ASK, tools=[WEATHER], stream=True)
        for c in (part.message.tool_calls or [])
    ]
    assert [(c.function.name, dict(c.function.arguments)) for c in streamed] == [
        ("get_weather", ARGUMENTS)
    ]
    # the loop: Ollama's call (arguments an object, no id) and the tool's answer
    client.chat(
        model=MODEL,
        tools=[WEATHER],
        stream=False,
        messages=[
            *ASK,
            {"role": "assistant", "content": "", "tool_calls": [call.model_dump()]},
            {"role": "tool", "content": "18 C", "tool_name": "get_weather"},
        ],
    )
    prompt = load_tokenizer(calling.server.served.prompts.folder).decode(  # type: ignore[union-attr]
        calling.behaviour.sent[-1]["tokens"]
    )
    assert "<tool_response>\n18 C\n</tool_response>" in prompt


def test_a_template_without_tools_refuses_auto_and_serves_a_forced_choice(
    no_tools: Serving,
) -> None:
    client = _openai(no_tools)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER])
    assert "no tool calling" in str(refused.value) and refused.value.body["param"] == "tools"
    reply = httpx.post(
        f"{no_tools.url}/v1/messages",
        headers={"x-api-key": KEY},
        json={
            "model": MODEL,
            "max_tokens": 8,
            "messages": ASK,
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        },
    )
    assert reply.status_code == 400 and "no tool calling" in reply.json()["error"]["message"]
    # required: served (the tools said in a system turn), the schema sent for the grammar;
    # this scripted answer is no call, which the server says instead of passing it on
    with pytest.raises(openai.InternalServerError) as invalid:
        client.chat.completions.create(
            model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required"
        )
    assert "not a call of get_weather" in str(invalid.value)
    sent = no_tools.behaviour.sent[-1]
    assert constraint(call_schema([WEATHER], "required")).items() <= sent["sampling"].items()
    prompt = load_tokenizer(no_tools.server.served.prompts.folder).decode(sent["tokens"])  # type: ignore[union-attr]
    assert "get_weather" in prompt and '"arguments"' in prompt


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": [{"type": "retrieval"}]}, "tools[0]"),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
            "tool_choice",
        ),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [WEATHER, WEATHER]}, "tools"),
        ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        (
            {
                "tools": [WEATHER],
                "messages": [
                    *ASK,
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": "{not json"},
                            }
                        ],
                    },
                ],
            },
            "messages[1].tool_calls[0].function.arguments",
        ),
        (
            {"tools": [WEATHER], "messages": [*ASK, {"role": "tool", "content": "x"}]},
            "messages[1].tool_call_id",
        ),
    ],
)
def test_malformed_tools_are_a_400_naming_the_field(
    calling: Serving, body: dict, param: str
) -> None:
    reply = httpx.post(
        f"{calling.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": MODEL, "messages": ASK, **body},
    )
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param
