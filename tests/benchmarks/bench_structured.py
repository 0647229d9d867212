"""Structured output's cost (``MACMESH_BENCH_ONLY=structured``, issue 34):

- compile: a 50-property JSON schema compiled by llguidance, as the controller checks it
  (``core.serve.structured``) and as a rank compiles it against the demo model's
  tokenizer (``core.worker.constrain``, the tokenizer converted once first), and the
  per-token mask computed along a valid answer (median and p90, µs); and a
  ``json_object`` request's whole logits processor per token along it, without and with
  the closing that ends it within ``max_tokens`` (the token index it needs made once);
- throughput: the aggregate completion tokens/s of 8 concurrent clients, half of them
  with a JSON schema, against 8 without, on one ``serve --demo`` (alternating rounds,
  so a change of the machine's load falls on both).

    .venv/bin/python -m tests.benchmarks.bench_structured [MODEL] [compile|throughput]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

CLIENTS = 8
PER_CLIENT = 3  # requests each client sends, one after another
ROUNDS = 3  # alternating plain / mixed rounds (medians)
MAX_TOKENS = 64


def schema_50() -> dict[str, Any]:
    """A 50-property object of mixed kinds: strings, integers, booleans, enums, arrays,
    nested objects, every one required."""
    kinds: list[dict[str, Any]] = [
        {"type": "string", "maxLength": 20},
        {"type": "integer", "minimum": 0, "maximum": 1000},
        {"type": "boolean"},
        {"enum": ["red", "green", "blue"]},
        {"type": "array", "items": {"type": "number"}, "maxItems": 4},
        {
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
            "required": ["a"],
        },
    ]
    props = {f"field_{i:02d}": kinds[i % len(kinds)] for i in range(50)}
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


def _instance(schema: dict[str, Any]) -> str:
    values = {
        "string": "x",
        "integer": 1,
        "boolean": True,
        "array": [1.5],
        "object": {"a": "q", "b": 2},
    }
    out = {}
    for key, spec in schema["properties"].items():
        out[key] = spec["enum"][0] if "enum" in spec else values[spec["type"]]
    return json.dumps(out, separators=(",", ":"))


def bench_compile(model: Path) -> dict[str, Any]:
    import numpy as np
    from llguidance import LLMatcher
    from mlx_lm.utils import load_tokenizer

    from core.serve.structured import json_schema_constraint
    from core.worker.constrain import Grammars

    schema = schema_50()
    controller = []
    for _ in range(5):
        started = time.perf_counter()
        grammar = json_schema_constraint(schema, True, "schema").grammar
        controller.append(time.perf_counter() - started)
    tokenizer = load_tokenizer(model)
    grammars = Grammars(tokenizer, None)
    started = time.perf_counter()
    _ = grammars.ll
    tokenizer_s = time.perf_counter() - started
    ranks = []
    for _ in range(5):
        started = time.perf_counter()
        matcher = LLMatcher(grammars.ll, grammar, log_level=0)
        ranks.append(time.perf_counter() - started)
    assert not matcher.is_error(), matcher.get_error()
    bits = np.full(((grammars.ll.vocab_size + 31) // 32,), -1, dtype=np.int32)
    masks = []
    for token in tokenizer.encode(_instance(schema), add_special_tokens=False):
        started = time.perf_counter()
        matcher.unsafe_compute_mask_ptr(bits.ctypes.data, bits.nbytes)
        masks.append(time.perf_counter() - started)
        assert matcher.consume_token(token), matcher.get_error()
    masks.sort()
    processor = _processor_us(
        grammars, tokenizer.encode(_instance(schema), add_special_tokens=False)
    )
    return {
        "schema_properties": 50,
        "controller_compile_ms_median": round(statistics.median(controller) * 1e3, 2),
        "rank_compile_ms_median": round(statistics.median(ranks) * 1e3, 2),
        "rank_tokenizer_once_s": round(tokenizer_s, 3),
        "mask_us_median": round(statistics.median(masks) * 1e6, 1),
        "mask_us_p90": round(masks[int(len(masks) * 0.9)] * 1e6, 1),
        "tokens_masked": len(masks),
        **processor,
    }


def _processor_us(grammars: Any, tokens: list[int]) -> dict[str, Any]:
    """A ``json_object`` request's whole logits processor per token (the grammar's mask
    as mlx-lm applies it, evaluated), along a valid answer: without the closing, and
    with it, the budget so tight (the answer's tokens and one) that it narrows every
    step (``core.worker.closing``)."""
    import mlx.core as mx

    from core.serve.structured import json_object_constraint

    grammar = json_object_constraint().grammar
    started = time.perf_counter()
    _ = grammars.index  # made once per tokenizer, like the tokenizer's conversion
    out: dict[str, Any] = {"closing_index_once_s": round(time.perf_counter() - started, 3)}
    for name, budget in (("plain", None), ("closing", len(tokens) + 1)):
        processor = grammars.processor(grammar, budget)
        logits = mx.zeros((1, grammars.ll.vocab_size))
        mx.eval(logits)
        times = []
        for previous in [0, *tokens]:
            started = time.perf_counter()
            mx.eval(processor(mx.array([previous]), logits))
            times.append(time.perf_counter() - started)
        times.sort()
        out[f"json_object_{name}_us_median"] = round(statistics.median(times) * 1e6, 1)
        out[f"json_object_{name}_us_p90"] = round(times[int(len(times) * 0.9)] * 1e6, 1)
    return out


def bench_throughput(model: Path) -> dict[str, Any]:
    import openai

    from tests.helpers.serving import start_serving

    # Long enough that every answer runs to MAX_TOKENS, as the plain ones do: the rounds
    # then read as many prompts for as many tokens, and differ by the grammar alone.
    schema = {
        "type": "object",
        "properties": {
            "kind": {"enum": ["city", "town"]},
            "story": {"type": "string", "minLength": 600},
        },
        "required": ["kind", "story"],
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}
    with tempfile.TemporaryDirectory(prefix="macmesh-bench-structured-") as home:
        served = start_serving(model, Path(home), "--nodes", "1")
        try:
            client = openai.OpenAI(
                base_url=served.base_url, api_key=served.key, max_retries=0, timeout=900
            )
            name = model.name

            def one_client(index: int, mixed: bool) -> tuple[int, int]:
                tokens = requests = 0
                for n in range(PER_CLIENT):
                    extra: dict[str, Any] = {}
                    if mixed and index % 2 == 0:
                        extra["response_format"] = fmt
                    answer = client.chat.completions.create(
                        model=name,
                        messages=[{"role": "user", "content": "Write a long story of a town."}],
                        max_tokens=MAX_TOKENS,
                        temperature=1.0,
                        seed=index * 100 + n,
                        **extra,
                    )
                    assert answer.usage is not None
                    tokens += answer.usage.completion_tokens
                    requests += 1
                return tokens, requests

            def round_of(mixed: bool) -> float:
                started = time.monotonic()
                with ThreadPoolExecutor(CLIENTS) as pool:
                    done = list(pool.map(lambda i: one_client(i, mixed), range(CLIENTS)))
                total = sum(t for t, _ in done)
                lengths.append(total / sum(r for _, r in done))
                return total / (time.monotonic() - started)

            lengths: list[float] = []

            round_of(False)  # warm: the first requests load what they need
            round_of(True)
            plain, mixed = [], []
            for _ in range(ROUNDS):
                plain.append(round_of(False))
                mixed.append(round_of(True))
        finally:
            served.stop()
    p, m = statistics.median(plain), statistics.median(mixed)
    return {
        "clients": CLIENTS,
        "with_schema": CLIENTS // 2,
        "plain_tokens_per_s": [round(v, 2) for v in plain],
        "mixed_tokens_per_s": [round(v, 2) for v in mixed],
        "cost_fraction": round(1 - m / p, 3),
        "tokens_per_answer": [round(v, 1) for v in lengths],  # plain, mixed, ... (warm first)
        "goal": "cost_fraction <= 0.10",
    }


def bench_structured(model: Path, only: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if only in (None, "compile"):
        out["compile"] = bench_compile(model)
    if only in (None, "throughput"):
        out["throughput"] = bench_throughput(model)
    return out


if __name__ == "__main__":
    from core.model.demo_model import ensure_demo_model

    args = sys.argv[1:]
    path = Path(args[0]) if args and args[0] not in ("compile", "throughput") else None
    which = next((a for a in args if a in ("compile", "throughput")), None)
    print(json.dumps(bench_structured(path or ensure_demo_model(), which)))
