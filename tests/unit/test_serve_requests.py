"""Request bodies → an Ask, or a 4xx naming the field (core/serve/requests.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.serve.dialects import anthropic_request, ollama_request
from core.serve.errors import APIError
from core.serve.requests import (
    DEFAULT_COMPLETION_TOKENS,
    chat_request,
    completion_request,
    parse_json,
)

MODEL = "SmolLM2"
HI = [{"role": "user", "content": "hi"}]


def _chat(**fields: object) -> dict:
    return {"model": MODEL, "messages": HI, **fields}


def test_a_full_chat_request_becomes_an_ask() -> None:
    ask = chat_request(
        _chat(
            max_completion_tokens=20,
            temperature=0.5,
            top_p=0.9,
            stop="\n",
            seed=3,
            stream=True,
            stream_options={"include_usage": True},
            user="someone",  # unknown fields are ignored
        ),
        MODEL,
        8192,
    )
    assert ask.chat and ask.messages == HI and ask.max_tokens == 20
    assert ask.sampling == {"temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": ["\n"]}
    assert ask.stream and ask.include_usage


def test_content_parts_are_joined_and_defaults_fill_in() -> None:
    parts = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ]
    ask = chat_request({"model": MODEL, "messages": parts, "max_tokens": 5}, MODEL, 8192)
    assert ask.messages == [{"role": "user", "content": "ab"}] and ask.max_tokens == 5
    assert chat_request(_chat(), MODEL, 8192).max_tokens == 8192
    assert not chat_request(_chat(), MODEL, 8192).stream


def test_a_completion_takes_raw_text() -> None:
    ask = completion_request({"model": MODEL, "prompt": ["Once"]}, MODEL, 8192)
    assert not ask.chat and ask.prompt == "Once"
    assert ask.max_tokens == DEFAULT_COMPLETION_TOKENS


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"messages": HI}, 400, "model"),
        ({"model": 5, "messages": HI}, 400, "model"),
        ({"model": "gpt-4o", "messages": HI}, 404, "model"),
        (_chat(messages=[]), 400, "messages"),
        (_chat(messages="hi"), 400, "messages"),
        (_chat(messages=[{"role": "wizard", "content": "x"}]), 400, "messages[0].role"),
        (_chat(messages=[{"role": [], "content": ""}]), 400, "messages[0].role"),  # unhashable
        (_chat(messages=[{"role": {"a": 1}, "content": ""}]), 400, "messages[0].role"),
        (_chat(messages=[{"role": "user", "content": 5}]), 400, "messages[0].content"),
        (
            _chat(messages=[{"role": "user", "content": [{"type": "image_url"}]}]),
            400,
            "messages[0].content",
        ),
        (_chat(max_tokens="ten"), 400, "max_tokens"),
        (_chat(max_tokens=0), 400, "max_tokens"),
        (_chat(max_tokens=10**9), 400, "max_tokens"),
        (_chat(max_completion_tokens=True), 400, "max_completion_tokens"),
        (_chat(temperature="hot"), 400, "temperature"),
        (_chat(temperature=3), 400, "temperature"),
        (_chat(top_p=-0.1), 400, "top_p"),
        (_chat(stop=[1]), 400, "stop"),
        (_chat(stop=["a", "b", "c", "d", "e"]), 400, "stop"),
        (_chat(seed="x"), 400, "seed"),
        (_chat(seed=2**70), 400, "seed"),
        (_chat(stream="yes"), 400, "stream"),
        (_chat(stream_options=[]), 400, "stream_options"),
        (_chat(n=2), 400, "n"),
    ],
)
def test_each_bad_field_is_a_4xx_naming_it(body: dict, status: int, param: str) -> None:
    with pytest.raises(APIError) as caught:
        chat_request(body, MODEL, 8192)
    error = caught.value
    assert error.status == status and error.param == param
    shape = error.body()["error"]
    assert set(shape) == {"message", "type", "param", "code"} and shape["message"]


def test_max_tokens_past_the_context_says_the_context() -> None:
    with pytest.raises(APIError, match="context is 8192") as caught:
        chat_request(_chat(max_tokens=10**9), MODEL, 8192)
    assert caught.value.code == "context_length_exceeded"


@pytest.mark.parametrize(
    "raw", [b"{", b"[1]", b'"text"', b"\xff\xfe", b"", b"[" * 100_000 + b"]" * 100_000]
)
def test_a_body_that_is_not_a_json_object_is_a_400(raw: bytes) -> None:
    with pytest.raises(APIError) as caught:
        parse_json(raw)
    assert caught.value.status == 400


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)
FIELDS = st.sampled_from(
    [
        "model",
        "messages",
        "max_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "stream",
        "stream_options",
        "n",
        "prompt",
        "max_completion_tokens",
        "system",  # Anthropic's
        "stop_sequences",
        "options",  # Ollama's
    ]
)


# Messages shaped as clients send them, each field anything: a role that is a list or an
# object once reached a set lookup and crashed the API (unhashable; found by the e2e fuzz).
MESSAGES = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant", "robot"]) | JSON},
        optional={"content": st.text(max_size=8) | JSON},
    ),
    max_size=3,
)


@settings(suppress_health_check=[HealthCheck.too_slow])  # a busy shared machine
@given(
    st.dictionaries(FIELDS, JSON | st.just(MODEL) | st.just(HI) | MESSAGES, max_size=8)
    | st.fixed_dictionaries(
        {"model": st.just(MODEL), "messages": MESSAGES},
        optional={name: JSON for name in ("max_tokens", "stop", "system", "options")},
    )
)
def test_any_body_is_an_ask_or_a_4xx_never_a_crash(body: dict) -> None:
    for parse in (chat_request, completion_request, anthropic_request, ollama_request):
        try:
            ask = parse(json.loads(json.dumps(body)), MODEL, 8192)
        except APIError as error:
            assert 400 <= error.status < 500
        else:
            assert 1 <= ask.max_tokens <= 8192


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b'{"model": ' + b"[" * 1000 + b"]" * 1000 + b"}", "nested too deeply"),
        (b"[" * 100_000, "nested too deeply"),
        (b'{"model": "\\ud800"}', "lone surrogate"),
        (b'{"model": "x", "messages": [{"content": "a\\uDFFFb"}]}', "lone surrogate"),
        (b'{"model": "\\ude00\\ud83d"}', "lone surrogate"),  # a pair in the wrong order
    ],
)
def test_deep_nesting_and_lone_surrogates_are_a_400_not_a_crash(raw: bytes, words: str) -> None:
    with pytest.raises(APIError) as refused:
        parse_json(raw)
    assert refused.value.status == 400 and words in refused.value.message


def test_a_surrogate_pair_is_one_character_and_welcome() -> None:
    body = parse_json(b'{"model": "\\ud83d\\ude00", "note": "\\\\ud800 is only text here"}')
    assert body["model"] == "\U0001f600" and body["note"] == "\\ud800 is only text here"


def test_the_question_is_the_last_user_message_or_the_prompt() -> None:
    """What the window's chat shows under the API client who asked it."""
    conversation = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And of Italy?"},
    ]
    assert chat_request(_chat(messages=conversation), MODEL, None).question == "And of Italy?"
    only_system = [{"role": "system", "content": "Be brief."}]
    assert chat_request(_chat(messages=only_system), MODEL, None).question == ""
    completion = {"model": MODEL, "prompt": "Once upon a time"}
    assert completion_request(completion, MODEL, None).question == "Once upon a time"
