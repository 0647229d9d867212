"""Structured output and logprobs through the real ``openai`` client, on ``macmesh serve
--demo`` on one rank, a 2-rank pipeline (the demo model) and 2-rank tensor parallelism
(the tiny llama: the demo model's 9 heads do not split in two), issue 34:

- ``response_format`` with a schema of nested objects, arrays, enums and required fields:
  20 answers at temperature 1, sent at once beside plain requests (so requests with and
  without a grammar share the batch's steps); every one validates (``jsonschema``), a
  streamed one too; the plain greedy answer is the same as when it runs alone (the mask
  is its neighbours' only).
- ``json_object``: 20 answers at temperature 1 within 48 tokens, every one ends
  ("stop") and parses as an object (closed before ``max_tokens``), in Ollama's dialect
  too.
- ``logprobs``: ``top_logprobs`` sorted, the sampled token the most likely at greedy, one
  distribution's probabilities summing to at most 1; streamed the same tokens.
- A schema the library cannot compile: a 400 naming the part.
- ``--batch 1`` (one request at a time, ``stream_generate``): the same.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest

from tests.helpers.serving import Served, serve_command, start_serving

pytestmark = pytest.mark.slow

RUNS = 20
JSON_OBJECT_TOKENS = 48  # short: without the closing, some answers would not end in time
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "kind": {"enum": ["city", "town", "village"]},
        "population": {"type": "integer", "minimum": 0, "maximum": 99999},
        "tags": {
            "type": "array",
            "items": {"type": "string", "maxLength": 6},
            "maxItems": 3,
        },
        "place": {
            "type": "object",
            "properties": {
                "country": {"type": "string", "maxLength": 10},
                "coastal": {"type": "boolean"},
            },
            "required": ["country", "coastal"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "kind", "population", "tags", "place"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "place", "schema": SCHEMA, "strict": True}}
ASK = [{"role": "user", "content": "Describe a place you like, as JSON."}]


@pytest.fixture(scope="module", params=["single", "pipeline", "tensor"])
def served(
    request: pytest.FixtureRequest,
    demo_model: Path,
    tiny_models: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Served, str]]:
    home = tmp_path_factory.mktemp(f"structured-{request.param}")
    if request.param == "tensor":
        model = tiny_models["llama"]
        env = {
            "MACMESH_DATA_DIR": str(home / "data"),
            "MACMESH_LOG_DIR": str(home / "logs"),
            "MACMESH_CONFIG_DIR": str(home / "config"),
            "MACMESH_CACHE_DIR": str(home / "cache"),
            "HF_HUB_OFFLINE": "1",
        }
        args = ["--demo", str(model), "--nodes", "2", "--strategy", "tensor"]
        server = serve_command(args, home, dict(os.environ, **env))
        name = model.name
    else:
        nodes = ["--nodes", "1"] if request.param == "single" else ["--nodes", "2"]
        strategy = ["--strategy", "pipeline"] if request.param == "pipeline" else []
        server = start_serving(demo_model, home, *nodes, *strategy)
        name = "SmolLM2-135M-Instruct-mlx-q4"
    try:
        yield server, name
    finally:
        assert server.stop() == 0, "\n".join(server.err)


def _client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.base_url, api_key=served.key, max_retries=0, timeout=600)


def test_every_answer_to_a_schema_validates_beside_plain_requests(
    served: tuple[Served, str],
) -> None:
    server, model = served
    client = _client(server)

    def plain() -> str:
        answer = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=24
        )
        return answer.choices[0].message.content or ""

    def constrained(seed: int) -> tuple[str | None, str]:
        answer = client.chat.completions.create(
            model=model,
            messages=ASK,
            response_format=FORMAT,  # type: ignore[arg-type]
            temperature=1.0,
            seed=seed,
            max_tokens=200,
        )
        return answer.choices[0].finish_reason, answer.choices[0].message.content or ""

    alone = plain()
    with ThreadPoolExecutor(10) as pool:  # 8 a batch; the line holds the rest
        plains = [pool.submit(plain) for _ in range(2)]
        answers = list(pool.map(constrained, range(RUNS)))
    for reason, text in answers:
        assert reason == "stop", text
        jsonschema.validate(json.loads(text), SCHEMA)
    assert len({text for _, text in answers}) > 1  # temperature 1: not one answer 20 times
    assert [f.result() for f in plains] == [alone, alone]  # no mask on its neighbours

    pieces = client.chat.completions.create(
        model=model,
        messages=ASK,
        response_format=FORMAT,  # type: ignore[arg-type]
        temperature=1.0,
        seed=99,
        max_tokens=200,
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in pieces if c.choices)
    jsonschema.validate(json.loads(text), SCHEMA)


def _json_object(client: openai.OpenAI, model: str, seed: int) -> tuple[str | None, str]:
    answer = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "A city and its country, as a JSON object."}],
        response_format={"type": "json_object"},
        temperature=1.0,
        seed=seed,
        max_tokens=JSON_OBJECT_TOKENS,
    )
    assert answer.usage is not None and answer.usage.completion_tokens <= JSON_OBJECT_TOKENS
    return answer.choices[0].finish_reason, answer.choices[0].message.content or ""


def test_every_json_object_answer_parses(served: tuple[Served, str]) -> None:
    """The model nests objects at will at temperature 1; near ``max_tokens`` the mask
    closes what it wrote (``core.worker.closing``), so every answer ends and parses."""
    server, model = served
    client = _client(server)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda seed: _json_object(client, model, seed), range(RUNS)))
    unparsed = [(reason, text) for reason, text in answers if not _is_object(text)]
    assert not unparsed, f"{len(unparsed)} of {RUNS} do not parse: {unparsed}"
    assert [reason for reason, _ in answers] == ["stop"] * RUNS, answers


def _is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _check_distribution(entry: Any) -> None:
    tops = [t.logprob for t in entry.top_logprobs]
    assert tops == sorted(tops, reverse=True)
    assert sum(math.exp(v) for v in tops) <= 1 + 1e-4
    assert entry.token in [t.token for t in entry.top_logprobs]  # greedy: among them
    assert math.isclose(entry.logprob, tops[0], abs_tol=1e-4)  # ... and the likeliest


def test_logprobs_whole_and_streamed(served: tuple[Served, str]) -> None:
    server, model = served
    client = _client(server)
    asked: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": "Name a colour."}],
        "max_tokens": 12,
        "logprobs": True,
        "top_logprobs": 5,
    }
    whole = client.chat.completions.create(**asked)
    content = whole.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content and len(content) <= 12
    for entry in content:
        assert len(entry.top_logprobs) == 5
        _check_distribution(entry)
    assert "".join(e.token for e in content) == whole.choices[0].message.content

    streamed = [
        e
        for chunk in client.chat.completions.create(**asked, stream=True)
        if chunk.choices and chunk.choices[0].logprobs is not None
        for e in chunk.choices[0].logprobs.content or []
    ]
    assert [e.token for e in streamed] == [e.token for e in content]

    text = client.completions.create(model=model, prompt="One, two,", max_tokens=6, logprobs=3)
    legacy = text.choices[0].logprobs
    assert legacy is not None and legacy.tokens and legacy.top_logprobs
    # the tokens' own bytes; the answer's text drops the first token's leading space
    assert "".join(legacy.tokens).lstrip() == text.choices[0].text.lstrip()
    for token, value, top in zip(
        legacy.tokens, legacy.token_logprobs, legacy.top_logprobs, strict=True
    ):
        if "\ufffd" in token:  # part of a character: such tokens share one key there
            continue
        assert math.isclose(value, max(top.values()), abs_tol=1e-4) and token in top


def test_a_schema_the_library_refuses_is_a_400_naming_it(served: tuple[Served, str]) -> None:
    server, model = served
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "tuple"}}}
    with pytest.raises(openai.BadRequestError) as refused:
        _client(server).chat.completions.create(
            model=model,
            messages=ASK,
            response_format=bad,  # type: ignore[arg-type]
        )
    assert refused.value.body["param"] == "response_format.json_schema.schema"  # type: ignore[index]
    assert "tuple" in refused.value.body["message"]  # type: ignore[index]


def test_one_request_at_a_time_enforces_the_schema_and_gives_logprobs(
    demo_model: Path, tmp_path: Path
) -> None:
    """``--batch 1`` (``core.worker.serve.generate``, mlx-lm's ``stream_generate``) on a
    2-rank pipeline: the same grammar, ``json_object``'s closing and logprobs as the
    batch's."""
    server = start_serving(demo_model, tmp_path, "--nodes", "2", "--batch", "1")
    try:
        client = _client(server)
        model = "SmolLM2-135M-Instruct-mlx-q4"
        for seed in range(3):
            answer = client.chat.completions.create(
                model=model,
                messages=ASK,
                response_format=FORMAT,  # type: ignore[arg-type]
                temperature=1.0,
                seed=seed,
                max_tokens=200,
            )
            assert answer.choices[0].finish_reason == "stop"
            jsonschema.validate(json.loads(answer.choices[0].message.content or ""), SCHEMA)
            reason, text = _json_object(client, model, seed)
            assert reason == "stop" and _is_object(text), text
        whole = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Name a colour."}],
            max_tokens=8,
            logprobs=True,
            top_logprobs=4,
        )
        content = whole.choices[0].logprobs.content  # type: ignore[union-attr]
        assert content
        for entry in content:
            _check_distribution(entry)
    finally:
        assert server.stop() == 0, "\n".join(server.err)


def test_the_anthropic_and_ollama_clients_get_schema_answers(served: tuple[Served, str]) -> None:
    import anthropic
    import ollama

    server, model = served
    messages = anthropic.Anthropic(
        base_url=f"http://127.0.0.1:{server.port}", api_key=server.key, max_retries=0
    ).messages.create(
        model=model,
        max_tokens=200,
        messages=ASK,  # type: ignore[arg-type]
        output_config={"format": {"type": "json_schema", "schema": SCHEMA}},
    )
    assert messages.stop_reason == "end_turn"
    jsonschema.validate(json.loads(messages.content[0].text), SCHEMA)  # type: ignore[union-attr]

    client = ollama.Client(
        host=f"http://127.0.0.1:{server.port}", headers={"Authorization": f"Bearer {server.key}"}
    )
    answer = client.chat(
        model=model, messages=ASK, format=SCHEMA, options={"num_predict": 200, "temperature": 1}
    )
    jsonschema.validate(json.loads(answer.message.content or ""), SCHEMA)
    streamed = client.chat(
        model=model, messages=ASK, format="json", stream=True, options={"num_predict": 64}
    )
    text = "".join(p.message.content or "" for p in streamed)
    assert isinstance(json.loads(text), dict)  # json_object: closed within 64 tokens
