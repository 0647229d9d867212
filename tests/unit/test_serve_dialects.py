"""Anthropic's and Ollama's bodies and shapes (core/serve/dialects.py), and OpenAI's
response shapes (core/serve/shaping.py)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from core.serve import dialects as d
from core.serve import shaping
from core.serve.errors import APIError, queue_full

MODEL = "SmolLM2"
HI = [{"role": "user", "content": "hi"}]
DONE = {
    "event": "done",
    "prompt_tokens": 7,
    "generation_tokens": 3,
    "text": "Paris.",
    "finish_reason": "length",
}


def test_anthropic_system_goes_first_and_max_tokens_is_required() -> None:
    ask = d.anthropic_request(
        {
            "model": MODEL,
            "max_tokens": 9,
            "system": "Be brief.",
            "messages": HI,
            "stop_sequences": ["\n"],
            "temperature": 0.2,
        },
        MODEL,
        8192,
    )
    assert ask.messages == [{"role": "system", "content": "Be brief."}, *HI]
    assert ask.max_tokens == 9 and ask.sampling == {"temperature": 0.2, "stop": ["\n"]}
    with pytest.raises(APIError, match="max_tokens"):
        d.anthropic_request({"model": MODEL, "messages": HI}, MODEL, 8192)
    with pytest.raises(APIError) as caught:
        d.anthropic_request({"model": "claude", "max_tokens": 5, "messages": HI}, MODEL, 8192)
    assert d.anthropic_error(caught.value)["error"]["type"] == "not_found_error"
    assert d.anthropic_error(queue_full(3, 16))["error"]["type"] == "rate_limit_error"


def test_anthropic_shapes_say_why_the_answer_ended() -> None:
    message = d.anthropic_message("msg_1", MODEL, DONE)
    assert message["stop_reason"] == "max_tokens" and message["usage"] == {
        "input_tokens": 7,
        "output_tokens": 3,
    }
    events = [
        block.split("\n")[0].removeprefix("event: ")
        for block in (
            d.anthropic_start("msg_1", MODEL) + d.anthropic_delta("Pa") + d.anthropic_end(DONE)
        )
        .decode()
        .strip()
        .split("\n\n")
    ]
    assert events == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


def test_ollama_streams_by_default_and_takes_its_options() -> None:
    ask = d.ollama_request(
        {
            "model": f"{MODEL}:latest",
            "messages": HI,
            "options": {"num_predict": 4, "seed": 1, "stop": ["x"], "temperature": 0.5},
        },
        MODEL,
        8192,
    )
    assert ask.stream and ask.max_tokens == 4
    assert ask.sampling == {"temperature": 0.5, "seed": 1, "stop": ["x"]}
    assert d.ollama_request({"model": MODEL, "messages": HI}, MODEL, 8192).max_tokens == 8192
    with pytest.raises(APIError, match="num_predict"):
        d.ollama_request(
            {"model": MODEL, "messages": HI, "options": {"num_predict": 10**9}}, MODEL, 8192
        )
    last = d.ollama_done(MODEL, DONE, 1.5)
    assert last["done"] and last["eval_count"] == 3 and last["total_duration"] == 1_500_000_000
    assert json.loads(d.ollama_piece(MODEL, "Pa"))["message"]["content"] == "Pa"


def test_openai_shapes_carry_usage_and_the_finish() -> None:
    whole = shaping.chat_completion("chatcmpl-1", MODEL, 1, DONE)
    assert whole["choices"][0]["message"]["content"] == "Paris."
    assert whole["choices"][0]["finish_reason"] == "length"
    assert whole["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "total_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    cancelled = shaping.text_completion("cmpl-1", MODEL, 1, {**DONE, "finish_reason": "cancelled"})
    assert cancelled["choices"][0]["finish_reason"] == "stop"
    last = shaping.chat_chunk("c", MODEL, 1, None, None, shaping.usage(DONE), True)
    assert last["choices"] == [] and last["usage"]["total_tokens"] == 10
    assert shaping.sse({"a": 1}) == b'data: {"a": 1}\n\n'


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/chat/completions", {"error": {"message": "no", "type": "invalid_request_error",
                                            "param": None, "code": None}}),
        ("/v1/nothing", {"error": {"message": "no", "type": "invalid_request_error",
                                   "param": None, "code": None}}),
        ("/v1/messages", {"type": "error",
                          "error": {"type": "invalid_request_error", "message": "no"}}),
        ("/api/chat", {"error": "no"}),
        ("/api/tags", {"error": "no"}),
    ],
)  # fmt: skip
def test_an_error_takes_the_shape_of_its_routes_dialect(path: str, expected: dict) -> None:
    assert d.error_body(path, APIError(400, "no")) == expected


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/v1/completions", lambda body: body["error"]["message"]),
        ("/v1/messages", lambda body: body["error"]["message"]),
        ("/api/chat", lambda body: body["error"]),
    ],
)
def test_a_server_error_too_is_in_the_routes_dialect(
    path: str, message: Callable[[dict], str]
) -> None:
    import asyncio

    from starlette.requests import Request

    from core.serve.app import unexpected

    request = Request({"type": "http", "method": "POST", "path": path, "headers": []})
    response = asyncio.run(unexpected(request, RuntimeError("boom")))
    assert response.status_code == 500
    assert message(json.loads(bytes(response.body))) == "RuntimeError: boom"
