"""``core.worker.constrain`` on a real tokenizer (the tiny llama's byte-level BPE): a
grammar's mask, driven by random logits the way mlx-lm's batch drives a logits
processor, always ends in text that validates; the recorded logprobs are the sampled
distribution's; the generate command's new fields are checked."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import jsonschema
import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.utils import load_tokenizer

from core.serve.structured import json_object_constraint, json_schema_constraint
from core.worker import protocol as p
from core.worker.constrain import GrammarRefused, Grammars, prepare
from core.worker.jsonclose import MAX_GROWTH, JsonCloser

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "size": {"enum": ["S", "M", "L"]},
        "dims": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
        "inner": {
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "size", "inner"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def tokenizer(tiny_models: dict[str, Path]) -> Any:
    return load_tokenizer(tiny_models["llama"])


def _decode(
    tokenizer: Any,
    grammar: str,
    seed: int,
    limit: int = 400,
    json_object: bool = False,
    grammars: Grammars | None = None,
) -> tuple[str, bool]:
    """Drive one request's processor and sampler as mlx-lm's batch does (the processor
    sees the last token fed, then masks): its text and whether it ended with EOS (the
    end-of-sequence token among the ``limit`` tokens)."""
    grammars = grammars or Grammars(tokenizer, None)
    command = {"grammar": grammar, "temperature": 1.0, "seed": seed, "logprobs": 3}
    if json_object:
        command["json_object"] = True

    def sampler(logprobs: mx.array) -> mx.array:
        return mx.random.categorical(logprobs, key=mx.random.key(rng.randrange(1 << 30)))[None]

    rng = random.Random(seed)
    prepared, unmet = prepare(
        command, sampler, grammars, 0, 1, False, lambda own: own, budget=limit
    )
    assert unmet is None
    vocab = grammars.ll.vocab_size
    fed = mx.array([1])
    out: list[int] = []
    for _ in range(limit):
        logits = mx.random.normal((1, vocab), key=mx.random.key(rng.randrange(1 << 30))) * 4
        for processor in prepared.processors:
            logits = processor(fed, logits)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        token = int(prepared.sampler(logprobs).item())
        entry = prepared.logprobs(token, grammars)
        assert entry is not None
        tops = [t["logprob"] for t in entry["top_logprobs"]]
        assert tops == sorted(tops, reverse=True)
        assert sum(2.718281828**v for v in tops) <= 1 + 1e-4
        if token in tokenizer.eos_token_ids:
            return tokenizer.decode(out), True
        out.append(token)
        fed = mx.array([token])
    return tokenizer.decode(out), False


def test_the_mask_makes_random_logits_write_valid_json(tokenizer: Any) -> None:
    grammar = json_schema_constraint(SCHEMA, True, "schema").grammar
    for seed in range(6):
        text, ended = _decode(tokenizer, grammar, seed)
        assert ended, f"no end within the limit: {text!r}"
        jsonschema.validate(json.loads(text), SCHEMA)


@pytest.mark.parametrize("budget", [3, 4, 5, 8, 13, 21, 34])
def test_a_json_object_closes_within_its_budget(tokenizer: Any, budget: int) -> None:
    """Random logits (which nest and leave strings open at will) under ``json_object``:
    every answer ends with the end-of-sequence token within ``budget`` tokens and parses
    as an object; without the closing, the same logits run out of tokens."""
    grammar = json_object_constraint().grammar
    grammars = Grammars(tokenizer, None)
    unclosed = 0
    for seed in range(12):
        text, ended = _decode(tokenizer, grammar, seed, budget, True, grammars)
        assert ended, f"no end within {budget} tokens: {text!r}"
        assert isinstance(json.loads(text), dict), text
        unclosed += not _decode(tokenizer, grammar, seed, budget, False, grammars)[1]
    assert unclosed >= 6  # the closing did it, not the logits


def test_the_vocabulary_index_bounds_each_token_as_its_bytes_say(tokenizer: Any) -> None:
    index = Grammars(tokenizer, None).index
    for token, data in enumerate(index.tokens):
        most = sum(MAX_GROWTH[b] for b in data)
        assert index.anywhere[token] == most, data
        closer = JsonCloser()
        closer.feed(b'{"a":"')  # inside a string, between whole characters
        if closer.feed(data) and b'"' not in data and b"\\" not in data:
            assert index.in_string[token] == len(closer.suffix()) - 2, data
        else:
            assert index.in_string[token] in (most, 0), data
    found = {index.tokens[t] for t in index.prefixes(b'":0}')}
    assert b'"' in found and all(b'":0}'.startswith(data) for data in found)


def test_a_json_schema_is_not_closed_early(tokenizer: Any) -> None:
    """Only ``json_object`` is closed (a schema's required fields are the schema's): a
    schema request with ``json_object`` unset runs as before."""
    grammar = json_schema_constraint(SCHEMA, True, "schema").grammar
    command = {"grammar": grammar}
    prepared, _ = prepare(command, lambda x: x, Grammars(tokenizer, None), 0, 1, False, id, 9)
    assert prepared.processors[0].closing is None  # type: ignore[attr-defined]


def test_a_grammar_the_rank_cannot_compile_is_refused(tokenizer: Any) -> None:
    with pytest.raises(GrammarRefused):
        Grammars(tokenizer, None).processor('{"grammars": [{"json_schema": {"type": 5}}]}')


def test_on_several_ranks_rank_0_alone_masks_and_the_others_take_its_token(
    tokenizer: Any,
) -> None:
    grammar = json_schema_constraint(SCHEMA, True, "schema").grammar
    wrapped: list[Any] = []

    def sampler(logprobs: mx.array) -> mx.array:
        return mx.argmax(logprobs, axis=-1)

    def to_rank0(own: Any) -> Any:
        wrapped.append(own)
        return own

    command = {"grammar": grammar, "logprobs": 2}
    other, unmet = prepare(command, sampler, Grammars(tokenizer, None), 1, 2, False, to_rank0)
    assert other.processors == [] and other.recorded is None and unmet is None
    assert wrapped == [sampler]  # a tensor group's other rank takes rank 0's token
    first, unmet = prepare(command, sampler, Grammars(tokenizer, None), 0, 2, False, to_rank0)
    assert len(first.processors) == 1 and first.recorded is not None and unmet is None
    plain, _ = prepare({}, sampler, Grammars(tokenizer, None), 1, 2, False, to_rank0)
    assert plain.sampler is sampler and len(wrapped) == 2  # no grammar: its own sample
    bad = {"grammar": '{"grammars": [{"json_schema": {"type": 5}}]}'}
    _, unmet = prepare(bad, sampler, Grammars(tokenizer, None), 0, 2, False, to_rank0)
    assert unmet is not None and "compile" in unmet  # rank 0 of two: joins, then ended


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"grammar": ""}, "grammar"),
        ({"grammar": 3}, "grammar"),
        ({"logprobs": 21}, "logprobs"),
        ({"json_object": True}, "json_object"),
        ({"grammar": "g", "json_object": 1}, "json_object"),
    ],
)
def test_the_generate_command_checks_grammar_and_logprobs(
    fields: dict[str, Any], said: str
) -> None:
    with pytest.raises(ValueError, match=said):
        p.parse_command(p.encode_command(p.OP_GENERATE, id="r", prompt="x", **fields))
    ok = p.parse_command(p.encode_command(p.OP_GENERATE, id="r", grammar="g", logprobs=20))
    assert ok["logprobs"] == 20


def test_logprobs_at_temperature_half_are_the_masked_distribution_sharpened(
    tokenizer: Any,
) -> None:
    """The figures come from the distribution sampled (issue 34, item 4): after the
    grammar's mask and the temperature. At 0.5 each entry is the top-k of
    log_softmax(masked_logits / 0.5), and no token the mask ruled out is an alternative."""
    grammars = Grammars(tokenizer, None)
    grammar = json_schema_constraint(SCHEMA, True, "schema").grammar
    command = {"grammar": grammar, "temperature": 0.5, "seed": 7, "logprobs": 5}
    rng = random.Random(7)

    def sampler(logprobs: mx.array) -> mx.array:
        key = mx.random.key(rng.randrange(1 << 30))
        return mx.random.categorical(logprobs * (1 / 0.5), key=key)[None]

    prepared, unmet = prepare(command, sampler, grammars, 0, 1, False, lambda own: own)
    assert unmet is None
    vocab = grammars.ll.vocab_size
    fed = mx.array([1])
    widths, ruled_out = set(), 0
    for _ in range(12):
        logits = mx.random.normal((1, vocab), key=mx.random.key(rng.randrange(1 << 30))) * 4
        raw = np.array(logits[0].astype(mx.float32))
        for processor in prepared.processors:
            logits = processor(fed, logits)
        masked = np.array(logits[0].astype(mx.float32))
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        token = int(prepared.sampler(logprobs).item())
        entry = prepared.logprobs(token, grammars)
        assert entry is not None

        allowed = np.isfinite(masked)
        scaled = np.where(allowed, masked / 0.5, -np.inf)
        dist = scaled - np.logaddexp.reduce(scaled[allowed])
        assert allowed[token] and entry["logprob"] == pytest.approx(dist[token], abs=1e-3)
        top = [i for i in np.argsort(-dist, kind="stable")[:5] if allowed[i]]
        assert [t["logprob"] for t in entry["top_logprobs"]] == pytest.approx(
            [dist[i] for i in top], abs=1e-3
        )
        assert [t["bytes"] for t in entry["top_logprobs"]] == [
            list(grammars.token_bytes(int(i))) for i in top
        ]
        # The list is the allowed top ids exactly, so no masked id is in it, though the
        # unmasked logits' own top 5 were (mostly) masked ids:
        ruled_out += sum(not allowed[i] for i in np.argsort(-raw)[:5])
        widths.add(int(allowed.sum()))
        if token in tokenizer.eos_token_ids:
            break
        fed = mx.array([token])
    assert max(widths) > 5 and ruled_out > 0, "the mask changed nothing: the test shows nothing"
