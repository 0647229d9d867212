"""The KV cache quantized (``MACMESH_BENCH_ONLY=kv_cache``; issue 37, item 4), on the demo
model:

- bytes per token of the whole model's KV cache at 16, 8 and 4 bits (group 64), measured
  on the caches themselves (``nbytes`` after 512 tokens, a whole number of mlx-lm's
  256-token blocks) against ``core.worker.kvbits``'s count;
- aggregate tokens/s of the demo's 2-rank pipeline (the CPU path: float32 weights,
  OpenBLAS preloaded by the launcher, ``core.worker.blas``) serving 8 requests at once
  (``--batch 8``, the prompt cache off: the same prompts come back round after round), at
  16, 8 and 4 bits, in alternating rounds; the cost of each against 16 bits;
- perplexity of the demo model on a fixed text (``tests/fixtures/text/harbour.txt``,
  about 1,100 tokens) read in the worker's 512-token chunks with the cache at 16, 8 and 4
  bits: every chunk's attention reads the cache as it is stored;
- ``greedy_agreement``: the demo prompts' greedy tokens at 8 and 4 bits and with the cache
  stored in float16 / bfloat16, against the cache as computed, teacher-forced and
  free-running up to the first difference (``tests.benchmarks.kv_agreement``).

    .venv/bin/python -m tests.benchmarks.bench_kv_cache   (one JSON document)
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache
from mlx_lm.utils import load

from core.run.job.launcher import Job, JobSpec
from core.worker import kvbits
from core.worker.kvquant import QuantKV
from core.worker.protocol import PREFILL_STEP
from tests.benchmarks.bench_batching import _prompt, _Watch
from tests.benchmarks.kv_agreement import measure as measure_agreement

BITS = (16, 8, 4)
GROUP = kvbits.DEFAULT_GROUP_SIZE
TEXT = Path(__file__).parents[1] / "fixtures" / "text" / "harbour.txt"


def _caches(layers: int, bits: int) -> list[Any]:
    if bits == kvbits.NONE:
        return [KVCache() for _ in range(layers)]
    return [QuantKV(group_size=GROUP, bits=bits) for _ in range(layers)]


def _read(model: Any, ids: list[int], bits: int) -> tuple[float, float]:
    """Mean negative log-likelihood of each next token, and the cache's bytes a token
    (its bytes over the tokens it has room for: mlx-lm allocates 256 at a time)."""
    caches = _caches(len(model.layers), bits)
    nll, count = 0.0, 0
    for start in range(0, len(ids) - 1, PREFILL_STEP):
        chunk = ids[start : start + PREFILL_STEP + 1]
        logits = model(mx.array(chunk[:-1])[None], cache=caches).astype(mx.float32)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        targets = mx.array(chunk[1:])
        picked = mx.take_along_axis(logprobs[0], targets[:, None], axis=-1)
        nll -= float(picked.sum().item())
        count += len(chunk) - 1
    room = sum(int((c.keys[0] if isinstance(c.keys, tuple) else c.keys).shape[2]) for c in caches)
    return nll / count, len(caches) * sum(int(c.nbytes) for c in caches) / room


def _quality_here(model_dir: Path) -> dict[str, Any]:
    """In this process: the demo model as a CPU rank holds it (float32 weights)."""
    from core.worker.sharding import load_shard

    shard = load_shard(model_dir, mx.distributed.init(), "single", float_weights=True)
    model, tokenizer = shard.model, shard.tokenizer
    ids = list(tokenizer.encode(TEXT.read_text()))
    figures: dict[str, Any] = {"text_tokens": len(ids)}
    for bits in BITS:
        nll, per_token = _read(model, ids, bits)
        figures[str(bits)] = {
            "perplexity": round(math.exp(nll), 4),
            "bytes_per_token": round(per_token),
        }
    plain = figures["16"]
    for bits in BITS[1:]:
        row = figures[str(bits)]
        # What the planner counts (the demo's activations are float32: its CPU path).
        row["bytes_per_token_counted"] = kvbits.scaled(plain["bytes_per_token"], bits, GROUP, 4)
        row["bytes_vs_16"] = round(row["bytes_per_token"] / plain["bytes_per_token"], 4)
        row["perplexity_change_pct"] = round(100 * (row["perplexity"] / plain["perplexity"] - 1), 3)
    return figures


def _at_once(job: Job, watch: _Watch, clients: int, max_tokens: int) -> tuple[float, list[str]]:
    """Aggregate tokens/s of ``clients`` requests sent at once, and their greedy texts."""
    started = time.monotonic()
    requests = [job.generate(_prompt(n), max_tokens=max_tokens) for n in range(clients)]
    watch.wait(requests)
    ended = max(watch.done[r]["at"] for r in requests)
    tokens = sum(int(watch.done[r]["generation_tokens"]) for r in requests)
    return tokens / (ended - started), [str(watch.done[r]["text"]) for r in requests]


def same_share(tokenizer: Any, plain: list[str], other: list[str]) -> float:
    """The 16-bit answers' tokens the other answers share, each up to its first
    difference (every token after one counts as lost)."""
    same = total = 0
    for a, b in zip(plain, other, strict=True):
        ids_a, ids_b = tokenizer.encode(a), tokenizer.encode(b)
        total += len(ids_a)
        for x, y in zip(ids_a, ids_b, strict=False):
            if x != y:
                break
            same += 1
    return same / max(1, total)


def _quality(model_dir: Path) -> dict[str, Any]:
    """``_quality_here`` in a process with OpenBLAS preloaded, as a CPU rank runs."""
    from core.run.job.mlxenv import cpu_rank_env
    from core.worker.blas import find_openblas

    found = find_openblas()
    env = dict(os.environ)
    env.update(
        cpu_rank_env(
            found["path"] if found else None, os.cpu_count() or 1, 1, env.get("LD_PRELOAD")
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks.bench_kv_cache", "quality", str(model_dir)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["blas_preloaded"] = found["path"] if found else None
    return figures


def _speed(model: Path, bits: int, clients: int, max_tokens: int) -> tuple[float, list[str]]:
    spec = JobSpec(
        model=model, strategy="pipeline", nodes=2, batch=clients, prompt_cache_mb=0, kv_bits=bits
    )
    job = Job(spec)
    watch = _Watch(job)
    job.start()
    try:
        job.wait_ready(timeout=600)
        _at_once(job, watch, clients, 4)  # warm up
        return _at_once(job, watch, clients, max_tokens)
    finally:
        job.stop()


def bench_kv_cache(
    model: Path, rounds: int = 2, clients: int = 8, max_tokens: int = 32
) -> dict[str, Any]:
    load_before = os.getloadavg()
    figures = _quality(model)
    figures["greedy_agreement"] = measure_agreement(model)
    runs: dict[int, list[float]] = {b: [] for b in BITS}
    texts: dict[int, list[str]] = {}
    for round_ in range(rounds):
        order = BITS if round_ % 2 == 0 else tuple(reversed(BITS))
        for bits in order:
            tps, texts[bits] = _speed(model, bits, clients, max_tokens)
            runs[bits].append(tps)
            print(
                f"kv_cache: round {round_ + 1}, {bits} bits: {runs[bits][-1]:.2f} tok/s",
                file=sys.stderr,
            )
    _, tokenizer = load(str(model))
    plain = statistics.median(runs[16])
    for bits in BITS:
        tps = statistics.median(runs[bits])
        figures[str(bits)]["aggregate_tps"] = round(tps, 2)
        figures[str(bits)]["aggregate_tps_runs"] = [round(r, 2) for r in runs[bits]]
        if bits != 16:
            figures[str(bits)]["tps_cost_pct"] = round(100 * (1 - tps / plain), 2)
            share = same_share(tokenizer, texts[16], texts[bits])
            figures[str(bits)]["greedy_tokens_as_16_bit_pct"] = round(100 * share, 1)
    figures["setup"] = {
        "pipeline_ranks": 2,
        "clients": clients,
        "max_tokens": max_tokens,
        "group_size": GROUP,
        "rounds": rounds,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }
    return figures


if __name__ == "__main__":
    if sys.argv[1:2] == ["quality"]:
        print(json.dumps(_quality_here(Path(sys.argv[2]))))
    else:
        from core.model.demo_model import ensure_demo_model

        print(json.dumps(bench_kv_cache(ensure_demo_model()), indent=2))
