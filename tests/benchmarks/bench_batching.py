"""Would batching concurrent API requests raise total tokens/s? (``MACMESH_BENCH_ONLY=
batching``). One process, the demo model: N prompts answered one after another vs at once
with mlx-lm's ``batch_generate``. Sharded ranks add a collective per step on top, so if a
single process gains nothing from batching on this CPU, the cluster does not either.

    .venv/bin/python -m tests.benchmarks.bench_batching   (one JSON document)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

TOPICS = ("the sea", "a cat", "the moon", "a city")


def bench_batching(model_path: Path, max_tokens: int = 48) -> dict[str, Any]:
    from mlx_lm import load
    from mlx_lm.generate import batch_generate, generate

    model, tokenizer = load(str(model_path))
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"Tell me a long story about {topic}."}],
            add_generation_prompt=True,
        )
        for topic in TOPICS
    ]
    generate(model, tokenizer, prompts[0], max_tokens=8)  # warm up
    results: dict[str, Any] = {}
    for count in (1, 2, 4):
        started, tokens = time.perf_counter(), 0
        for prompt in prompts[:count]:
            text = generate(model, tokenizer, prompt, max_tokens=max_tokens)
            tokens += len(tokenizer.encode(text))
        sequential = tokens / (time.perf_counter() - started)
        started = time.perf_counter()
        batch = batch_generate(
            model, tokenizer, prompts[:count], max_tokens=max_tokens, return_token_ids=True
        )
        batched_tokens = sum(len(ids) for ids in batch.token_ids)
        batched = batched_tokens / (time.perf_counter() - started)
        results[str(count)] = {
            "sequential_tps": round(sequential, 2),
            "batched_tps": round(batched, 2),
            "ratio": round(batched / sequential, 3),
        }
    return {"max_tokens": max_tokens, "prompts": results}


if __name__ == "__main__":
    from core.model.demo_model import ensure_demo_model

    print(json.dumps(bench_batching(ensure_demo_model()), indent=2))
    sys.exit(0)
