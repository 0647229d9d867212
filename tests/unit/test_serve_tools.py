"""Tool calls' pure parts (core.serve.tools, tool_schema, tool_calls): each dialect's tools
and choice as one spec, the call schema a forced choice sends (checked with
``jsonschema``: a valid call passes, a wrong name or missing argument fails), and an
answer's text read as it streams with mlx-lm's own parsers, whatever the cut between
tokens: markers split across pieces, a call the parser cannot read kept as text, one
call only when parallel calls are off, a format with no end marker (Mistral's)."""

from __future__ import annotations

import importlib
import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.serve.errors import APIError
from core.serve.tool_calls import Call, CallReader, NotACall, ToolFormat
from core.serve.tool_schema import call_schema, constraint
from core.serve.tools import ToolSpec, anthropic_tools, ollama_tools, openai_tools

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}


def _format(name: str) -> ToolFormat:
    module = importlib.import_module(f"mlx_lm.tool_parsers.{name}")
    return ToolFormat(name, module.tool_call_start, module.tool_call_end, module.parse_tool_call)


def _read(reader: CallReader, pieces: list[str]) -> list[str | Call]:
    out = [p for piece in pieces for p in reader.feed(piece)] + reader.end()
    merged: list[str | Call] = []
    for piece in out:  # adjacent texts as one, whatever the cut
        if isinstance(piece, str) and merged and isinstance(merged[-1], str):
            merged[-1] += piece
        else:
            merged.append(piece)
    return merged


def test_the_call_schema_accepts_valid_calls_and_refuses_others() -> None:
    spec = openai_tools({"tools": [WEATHER, TIME], "tool_choice": "required"})
    assert spec is not None and spec.forced
    schema = spec.schema()
    jsonschema.validate({"name": "get_weather", "arguments": {"city": "Oslo"}}, schema)
    jsonschema.validate({"name": "get_time", "arguments": {}}, schema)
    for wrong in (
        {"name": "get_weather", "arguments": {}},  # its required argument
        {"name": "get_weather", "arguments": {"city": "Oslo", "x": 1}},
        {"name": "get_wether", "arguments": {"city": "Oslo"}},
        {"name": "get_weather"},
        {"name": "get_time", "arguments": {}, "extra": 1},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)
    named = call_schema([WEATHER, TIME], {"type": "function", "function": {"name": "get_time"}})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "get_weather", "arguments": {"city": "Oslo"}}, named)
    assert spec.sampling() == constraint(schema)
    assert openai_tools({"tools": [WEATHER]}).sampling() == {}  # type: ignore[union-attr]


def test_each_dialects_choice_is_one_spec() -> None:
    assert openai_tools({"tools": [WEATHER], "parallel_tool_calls": False}) == ToolSpec(
        (WEATHER,), "auto", False
    )
    anthropic = {"tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}
    assert anthropic_tools({**anthropic, "tool_choice": {"type": "any"}}).choice == "required"  # type: ignore[union-attr]
    named = anthropic_tools(
        {
            **anthropic,
            "tool_choice": {
                "type": "tool",
                "name": "get_weather",
                "disable_parallel_tool_use": True,
            },
        }
    )
    assert named is not None and named.choice == "get_weather" and not named.parallel
    assert ollama_tools({"tools": [WEATHER]}).choice == "auto"  # type: ignore[union-attr]
    assert openai_tools({"tools": [], "tool_choice": "none"}) is None
    with pytest.raises(APIError) as refused:
        anthropic_tools({**anthropic, "tool_choice": {"type": "tool", "name": "nope"}})
    assert refused.value.param == "tool_choice.name"


CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(CALL) + 20), max_size=12))
def test_a_call_is_read_whatever_the_cut_between_pieces(cuts: list[int]) -> None:
    text = f"Checking. {CALL} Done <tool not a marker"
    points = sorted({c for c in cuts if c < len(text)})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    reader = CallReader(ToolSpec((WEATHER,)), _format("json_tools"))
    out = _read(reader, pieces)
    assert out[0] == "Checking. " and out[2] == " Done <tool not a marker"
    assert isinstance(out[1], Call) and out[1].name == "get_weather"
    assert out[1].arguments == {"city": "Oslo"} and reader.calls == [out[1]]
    assert json.loads("".join(out[1].fragments())) == {"city": "Oslo"}


def test_an_unreadable_call_stays_as_text_and_parallel_off_keeps_the_first() -> None:
    reader = CallReader(ToolSpec((WEATHER,)), _format("json_tools"))
    broken = "<tool_call>{not json</tool_call>"
    assert _read(reader, [broken, " after"]) == [broken + " after"]
    assert reader.calls == []
    one = CallReader(ToolSpec((WEATHER,), "auto", False), _format("json_tools"))
    out = _read(one, [CALL, CALL])
    assert len([p for p in out if isinstance(p, Call)]) == 1
    unended = CallReader(ToolSpec((WEATHER,)), _format("json_tools"))
    [call] = _read(unended, [CALL.removesuffix("</tool_call>")])  # cut at max_tokens
    assert isinstance(call, Call) and call.arguments == {"city": "Oslo"}


def test_mistrals_calls_run_to_the_end_of_the_answer() -> None:
    reader = CallReader(ToolSpec((WEATHER,)), _format("mistral"))
    out = _read(reader, ["Sure", "[TOOL_", 'CALLS]get_weather[ARGS]{"city": ', '"Oslo"}'])
    assert out[0] == "Sure" and isinstance(out[1], Call)
    assert (out[1].name, out[1].arguments) == ("get_weather", {"city": "Oslo"})


def test_a_forced_answer_is_its_json_call_or_not_a_call() -> None:
    spec = ToolSpec((WEATHER, TIME), "required")
    reader = CallReader(spec, None)
    assert reader.feed('{"name": "get_time", ') == []
    [call] = [*reader.feed('"arguments": {}}'), *reader.end()]
    assert isinstance(call, Call) and call.name == "get_time"
    wrapped = CallReader(spec, _format("json_tools"))
    assert [c.name for c in _read(wrapped, [CALL]) if isinstance(c, Call)] == ["get_weather"]
    for text, choice in (("Paris is sunny.", "required"), (CALL, "get_time")):
        forced = CallReader(ToolSpec((WEATHER, TIME), choice), _format("json_tools"))
        with pytest.raises(NotACall):
            _read(forced, [text])


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
_TOOLISH = st.fixed_dictionaries(
    {},
    optional={
        "tools": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "type": st.sampled_from(["function", "custom", "x"]) | _JSON,
                    "function": st.fixed_dictionaries(
                        {},
                        optional={"name": st.sampled_from(["f", "g"]) | _JSON, "parameters": _JSON},
                    )
                    | _JSON,
                    "name": st.sampled_from(["f", "g"]) | _JSON,
                    "input_schema": _JSON,
                },
            )
            | _JSON,
            max_size=3,
        )
        | _JSON,
        "tool_choice": st.sampled_from(["auto", "none", "required", "f"])
        | st.fixed_dictionaries(
            {},
            optional={
                "type": st.sampled_from(["function", "any", "tool", "auto"]) | _JSON,
                "name": _JSON,
                "function": _JSON,
            },
        )
        | _JSON,
        "parallel_tool_calls": _JSON,
    },
)
_TURNS = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "tool"])},
        optional={
            "content": st.text(max_size=5)
            | st.lists(
                st.fixed_dictionaries(
                    {"type": st.sampled_from(["text", "tool_use", "tool_result"])},
                    optional={
                        "text": _JSON,
                        "id": _JSON,
                        "name": _JSON,
                        "input": _JSON,
                        "tool_use_id": _JSON,
                        "content": _JSON,
                    },
                ),
                max_size=3,
            ),
            "tool_calls": _JSON
            | st.lists(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "id": _JSON,
                        "function": st.fixed_dictionaries(
                            {}, optional={"name": _JSON, "arguments": _JSON | st.text(max_size=6)}
                        ),
                    },
                ),
                max_size=2,
            ),
            "tool_call_id": _JSON,
        },
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(_TOOLISH, _TURNS)
def test_hostile_tools_and_turns_are_a_400_or_read_in_every_dialect(
    tools: dict, turns: list
) -> None:
    """Whatever a client sends as tools, choices, calls and results: an Ask, or a 400
    naming a field, never another exception (issue 34; the brief's hostile input)."""
    from core.serve.dialects import anthropic_request, ollama_request
    from core.serve.tool_routes import openai_chat_request

    body = {"model": "m", "max_tokens": 8, "messages": turns, **tools}
    for parse in (openai_chat_request, anthropic_request, ollama_request):
        try:
            ask = parse(body, "m", 2048)
        except APIError as error:
            assert error.status == 400 and error.message
            continue
        if ask.tools is not None:
            assert ask.tools.names and (not ask.tools.forced or ask.tools.schema())
            json.dumps(ask.messages)  # what goes to the ranks is JSON


def test_tools_count_toward_the_size_checked_before_any_tokenizing() -> None:
    from core.serve.prompts import PromptMaker
    from core.serve.tool_routes import openai_chat_request

    maker = PromptMaker(None, 100)
    maker._bytes_per_token = 4  # as if loaded: 400 bytes fit at most
    big = {"type": "function", "function": {"name": "f", "description": "x" * 1000}}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    maker.check_size(openai_chat_request(body, "m", 100))
    with pytest.raises(APIError) as refused:
        maker.check_size(openai_chat_request({**body, "tools": [big]}, "m", 100))
    assert refused.value.code == "context_length_exceeded"


def test_a_call_whose_arguments_text_is_nested_too_deeply_is_a_400() -> None:
    """OpenAI's arguments are a JSON text inside the body: 100,000 levels of it make json
    raise RecursionError, which must be the same 400 as any bad arguments, not a 500."""
    from core.serve.tool_routes import openai_chat_request

    deep = "[" * 100_000 + "]" * 100_000
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": deep}}
    body = {
        "model": "m",
        "max_tokens": 8,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
    }
    with pytest.raises(APIError) as caught:
        openai_chat_request(body, "m", 2048)
    assert caught.value.status == 400
    assert caught.value.param == "messages[1].tool_calls[0].function.arguments"


def test_a_forced_answer_nested_too_deeply_is_not_a_call() -> None:
    forced = CallReader(ToolSpec((WEATHER, TIME), "required"), None)
    with pytest.raises(NotACall):
        _read(forced, ["[" * 100_000 + "]" * 100_000])
