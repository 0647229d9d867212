"""``core.serve.structured``: response_format, Ollama's format, Anthropic's output_config
and logprobs read from each dialect's body, checked on the controller (a schema the
grammar library refuses is a 400 naming the part), and the worker's fields made."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from core.serve.dialects import anthropic_request, ollama_request
from core.serve.errors import APIError
from core.serve.requests import chat_request, completion_request
from core.serve.structured import (
    completion_logprobs_object,
    json_schema_constraint,
    parsed,
    worker_fields,
)

M = "m"
CHAT: dict[str, Any] = {"model": M, "messages": [{"role": "user", "content": "hi"}]}
SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "c": {"enum": ["a", "b"]}},
    "required": ["n"],
}


def _format(schema: Any, strict: bool = True) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": strict}}


def test_a_json_schema_becomes_the_grammar_sent_to_the_ranks() -> None:
    ask = chat_request({**CHAT, "response_format": _format(SCHEMA)}, M, 2048)
    assert ask.constraint is not None and ask.constraint.kind == "json_schema"
    assert ask.constraint.schema == SCHEMA and ask.constraint.strict
    grammar = json.loads(worker_fields(ask.constraint, None)["grammar"])
    assert grammar["grammars"][0]["json_schema"]["properties"] == SCHEMA["properties"]
    assert "json_object" not in worker_fields(ask.constraint, None)  # its fields: not closed


def test_json_object_text_and_absent_response_formats() -> None:
    ask = chat_request({**CHAT, "response_format": {"type": "json_object"}}, M, 2048)
    assert ask.constraint is not None and ask.constraint.kind == "json_object"
    assert chat_request({**CHAT, "response_format": {"type": "text"}}, M, 2048).constraint is None
    assert chat_request(CHAT, M, 2048).constraint is None
    assert worker_fields(None, None) == {}
    assert worker_fields(ask.constraint, None)["json_object"] is True  # closed by max_tokens


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        ({"type": "string", "format": "weird"}, "weird"),
        ({"type": "object", "properties": {"a": {"$ref": "#/defs/gone"}}}, "/defs/gone"),
        ({"type": "nonsense"}, "nonsense"),
        ({"type": "string", "pattern": "(a"}, "unclosed group"),
    ],
)
def test_a_schema_the_library_cannot_compile_is_a_400_naming_the_part(
    schema: dict[str, Any], said: str
) -> None:
    with pytest.raises(APIError) as refused:
        chat_request({**CHAT, "response_format": _format(schema)}, M, 2048)
    assert refused.value.status == 400
    assert refused.value.param == "response_format.json_schema.schema"
    assert said in refused.value.message and "\n" not in refused.value.message


def test_strict_false_ignores_keywords_the_library_does_not_implement() -> None:
    odd = {"type": "object", "properties": {"a": {"type": "string"}}, "x-unknown-keyword": 1}
    assert json_schema_constraint(odd, False, "p").kind == "json_schema"


@pytest.mark.parametrize(
    "value",
    [{"type": "xml"}, "json", {"type": "json_schema"}, _format([1, 2])],
)
def test_a_malformed_response_format_is_a_400(value: Any) -> None:
    with pytest.raises(APIError) as refused:
        chat_request({**CHAT, "response_format": value}, M, 2048)
    assert refused.value.param is not None
    assert refused.value.param.startswith("response_format")


def test_chat_logprobs_and_top_logprobs() -> None:
    assert chat_request({**CHAT, "logprobs": True, "top_logprobs": 5}, M, 2048).logprobs == 5
    assert chat_request({**CHAT, "logprobs": True}, M, 2048).logprobs == 0
    assert chat_request({**CHAT, "logprobs": False}, M, 2048).logprobs is None
    for bad in ({"logprobs": True, "top_logprobs": 21}, {"top_logprobs": 2}, {"logprobs": 3}):
        with pytest.raises(APIError):
            chat_request({**CHAT, **bad}, M, 2048)
    fields = worker_fields(None, 5)
    assert fields == {"logprobs": 5}


def test_completion_logprobs_is_the_count_of_alternatives() -> None:
    body = {"model": M, "prompt": "hi", "logprobs": 3}
    assert completion_request(body, M, 2048).logprobs == 3
    with pytest.raises(APIError):
        completion_request({**body, "logprobs": 40}, M, 2048)
    entries = [
        {"token": "a", "logprob": -0.1, "top_logprobs": [{"token": "a", "logprob": -0.1}]},
        {"token": "bc", "logprob": -1.0, "top_logprobs": []},
    ]
    shaped = completion_logprobs_object(entries)
    assert shaped["tokens"] == ["a", "bc"] and shaped["text_offset"] == [0, 1]
    assert shaped["top_logprobs"][0] == {"a": -0.1}


def test_ollama_format_json_or_a_schema() -> None:
    ask = ollama_request({**CHAT, "format": "json"}, M, 2048)
    assert ask.constraint is not None and ask.constraint.kind == "json_object"
    assert worker_fields(ask.constraint, None)["json_object"] is True
    ask = ollama_request({**CHAT, "format": SCHEMA}, M, 2048)
    assert ask.constraint is not None and ask.constraint.schema == SCHEMA
    with pytest.raises(APIError) as refused:
        ollama_request({**CHAT, "format": "yaml"}, M, 2048)
    assert refused.value.param == "format"


def test_anthropic_output_config_format() -> None:
    body = {**CHAT, "max_tokens": 8}
    fmt = {"type": "json_schema", "schema": SCHEMA}
    ask = anthropic_request({**body, "output_config": {"format": fmt}}, M, 2048)
    assert ask.constraint is not None and ask.constraint.schema == SCHEMA
    beta = anthropic_request({**body, "output_format": fmt}, M, 2048)
    assert beta.constraint is not None
    with pytest.raises(APIError) as refused:
        anthropic_request({**body, "output_config": {"format": {"type": "xml"}}}, M, 2048)
    assert refused.value.param == "output_config.format"


def test_a_body_with_a_schema_is_parsed_off_the_event_loop() -> None:
    on_loop: list[bool] = []

    def parse(body: dict[str, Any], model: str, context: int | None) -> int:
        on_loop.append(threading.current_thread() is threading.main_thread())
        return 1

    asyncio.run(parsed(parse, {"response_format": {"type": "json_object"}}, M, None))
    asyncio.run(parsed(parse, {"format": "json"}, M, None))
    asyncio.run(parsed(parse, CHAT, M, None))
    assert on_loop == [False, False, True]
