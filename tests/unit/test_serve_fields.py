"""Fields a dialect defines and this server does not act on: a 400 naming the field ("not
supported yet") when its value would change the answer's meaning; the do-nothing values
and the fields ignored on purpose pass (core.serve.fields, the README's table)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from core.serve.dialects import anthropic_request, ollama_request
from core.serve.errors import APIError
from core.serve.fields import ANTHROPIC as ANTHROPIC_FIELDS
from core.serve.fields import IGNORED, OLLAMA, OLLAMA_OPTIONS, OPENAI_CHAT, OPENAI_COMPLETIONS
from core.serve.requests import chat_request, completion_request
from core.serve.tool_routes import openai_chat_request

M = "m"
CHAT: dict[str, Any] = {"model": M, "messages": [{"role": "user", "content": "hi"}]}
COMPLETION: dict[str, Any] = {"model": M, "prompt": "hi"}
ANTHROPIC: dict[str, Any] = {**CHAT, "max_tokens": 8}


def _refused(parse: Any, body: dict[str, Any]) -> APIError:
    with pytest.raises(APIError) as refused:
        parse(body, M, 2048)
    return refused.value


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("logit_bias", {"42": 5}),
        ("frequency_penalty", 0.5),
        ("presence_penalty", 1),
        ("functions", [{"name": "f"}]),
        ("modalities", ["text", "audio"]),
        ("verbosity", "low"),
    ],
)
def test_a_chat_field_that_changes_the_answer_is_refused_by_name(field: str, value: Any) -> None:
    error = _refused(chat_request, {**CHAT, field: value})
    assert error.status == 400 and error.param == field
    assert f"'{field}' is not supported yet" in error.message


@pytest.mark.parametrize(
    ("field", "value"),
    [("echo", True), ("suffix", "end"), ("best_of", 3), ("logit_bias", {"1": 1})],
)
def test_a_completions_field_that_changes_the_answer_is_refused_by_name(
    field: str, value: Any
) -> None:
    error = _refused(completion_request, {**COMPLETION, field: value})
    assert error.param == field and "not supported yet" in error.message


def test_do_nothing_values_and_fields_ignored_on_purpose_pass() -> None:
    quiet = {
        "logprobs": False,
        "frequency_penalty": 0,
        "presence_penalty": 0.0,
        "response_format": {"type": "text"},
        "tool_choice": "none",
        "tools": [],
        "user": "u-1",
        "metadata": {"a": "b"},
        "store": False,
        "parallel_tool_calls": True,
    }
    assert chat_request({**CHAT, **quiet}, M, 2048).messages == CHAT["messages"]
    assert completion_request({**COMPLETION, "echo": False, "best_of": 1}, M, 2048).prompt == "hi"


def test_a_chat_message_with_a_malformed_tool_call_is_refused_naming_it() -> None:
    body = {**CHAT, "messages": [{"role": "assistant", "content": "", "tool_calls": [{}]}]}
    body["messages"][0]["tool_calls"] = [{"id": "c1"}]
    assert _refused(openai_chat_request, body).param == "messages[0].tool_calls[0]"
    legacy = {**CHAT, "messages": [{"role": "assistant", "function_call": {"name": "f"}}]}
    assert _refused(chat_request, legacy).param == "messages[0].function_call"


@pytest.mark.parametrize(
    ("field", "value"),
    [("thinking", {"type": "enabled"}), ("top_k", 5)],
)
def test_anthropic_fields_that_change_the_answer_are_refused_by_name(
    field: str, value: Any
) -> None:
    error = _refused(anthropic_request, {**ANTHROPIC, field: value})
    assert error.param == field and "not supported yet" in error.message
    assert anthropic_request({**ANTHROPIC, "metadata": {"user_id": "u"}}, M, 2048).max_tokens == 8


def test_anthropic_server_tools_are_refused_naming_their_type() -> None:
    web = {**ANTHROPIC, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}
    error = _refused(anthropic_request, web)
    assert error.param == "tools[0].type" and error.code == "unsupported_parameter"


def test_ollama_fields_and_options_that_change_the_answer_are_refused_by_name() -> None:
    assert _refused(ollama_request, {**CHAT, "think": True}).param == "think"
    assert _refused(ollama_request, {**CHAT, "logprobs": True}).param == "logprobs"
    assert _refused(ollama_request, {**CHAT, "options": {"top_k": 20}}).param == "options.top_k"
    images = {**CHAT, "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}
    assert _refused(ollama_request, images).param == "messages[0].images"
    kept = {**CHAT, "keep_alive": "5m", "options": {"num_ctx": 4096, "repeat_penalty": 1}}
    assert ollama_request(kept, M, 2048).messages == CHAT["messages"]


def _readme_rows() -> dict[str, list[str]]:
    """The README's table of fields: each dialect's row, its cells."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    start = readme.index("| dialect | read | ignored on purpose | refused")
    rows = {}
    for line in readme[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        rows[cells[0].split(" (")[0]] = cells[1:]
    return rows


def _names(cell: str) -> set[str]:
    return set(re.findall(r"`([a-z_.]+)`", cell))


def test_the_readme_table_is_these_lists() -> None:
    """Every field refused here is in its row's refused cell and no other; every field
    ignored on purpose in its ignored cell; the tool fields read (issue 34, item 5)."""
    rows = _readme_rows()
    lists = {
        "OpenAI chat": (OPENAI_CHAT, IGNORED["OpenAI"]),
        "OpenAI completions": (OPENAI_COMPLETIONS, ("user",)),
        "Anthropic": (ANTHROPIC_FIELDS, IGNORED["Anthropic"]),
        "Ollama": ({**OLLAMA, **OLLAMA_OPTIONS}, IGNORED["Ollama"]),
    }
    for dialect, (refused, ignored) in lists.items():
        read, quiet, said = (_names(cell) for cell in rows[dialect])
        bare = {name.removeprefix("options.") for name in said}
        for name in refused:
            assert name in said or name in bare, (dialect, name)
            assert name not in read, (dialect, name)
        for name in ignored:
            assert name in quiet, (dialect, name)
    tools = {
        "OpenAI chat": ("tools", "tool_choice", "parallel_tool_calls"),
        "Anthropic": ("tools", "tool_choice"),
        "Ollama": ("tools",),
    }
    for dialect, names in tools.items():
        read, _quiet, said = (_names(cell) for cell in rows[dialect])
        assert set(names) <= read and not set(names) & said, dialect


def test_every_field_of_the_clients_calls_has_its_row() -> None:
    """Each field the official ``openai``, ``anthropic`` and ``ollama`` packages can send
    is read, ignored on purpose or refused in its dialect's row (issue 34, item 5): a
    client's new field shows up here, not as silence."""
    import inspect

    import anthropic
    import ollama
    import openai

    rows = _readme_rows()
    calls = {
        "OpenAI chat": openai.OpenAI(api_key="x").chat.completions.create,
        "OpenAI completions": openai.OpenAI(api_key="x").completions.create,
        "Anthropic": anthropic.Anthropic(api_key="x").messages.create,
        "Ollama": ollama.Client().chat,
    }
    transport = {"extra_body", "extra_headers", "extra_query", "timeout", "options"}
    for dialect, call in calls.items():
        named = set().union(*(_names(cell) for cell in rows[dialect]))
        named |= {name.split(".")[0] for name in named}
        fields = set(inspect.signature(call).parameters) - transport
        assert fields <= named, (dialect, sorted(fields - named))
