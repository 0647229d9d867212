"""What the join of a long prompt costs a rank (``MACMESH_BENCH_ONLY=join_cost``, issue 33).

When a prompt's first token joins the batch that is generating, mlx-lm's
``BatchKVCache.extend`` pads the other rows' caches to the prompt's length and copies both
into one. This times that merge for one pipeline rank of the demo model (half its layers,
its KV heads and head size, float32 as on the CPU path): a 7,575-token cache joining a
1,100-token one, in a fresh process and then again in the same process (memory it has
used before), and, for scale, touching 1 GiB of new memory in a fresh process, then again.
Then the rank's own remedy (``core.worker.joinmemory``), pair by pair with a fresh
process without it: malloc told to keep freed memory, the join's memory touched a slice at
a time and given back, then the first merge timed. Every child runs with the glibc
tunables a CPU rank gets (transparent huge pages).

    .venv/bin/python -m tests.benchmarks.bench_join_cost [MODEL]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from core.run.job import mlxenv

LONG, SHORT = 7_575, 1_100
ROUNDS = 3


def _merge_seconds(layers: int, kv_heads: int, head_dim: int, reserve: bool = False) -> float:
    """One merge; with ``reserve``, after the rank's join memory was made ready."""
    import mlx.core as mx
    from mlx_lm.models.cache import BatchKVCache

    def cache(tokens: int) -> BatchKVCache:
        made = BatchKVCache([0])
        shape = (1, kv_heads, tokens, head_dim)
        made.update_and_fetch(mx.random.normal(shape), mx.random.normal(shape))
        mx.eval(made.keys, made.values)
        return made

    short = [cache(SHORT) for _ in range(layers)]
    long = [cache(LONG) for _ in range(layers)]
    if reserve:
        from core.worker.joinmemory import JoinReserve, join_bytes, keep_freed_memory

        ready = JoinReserve(keep_freed_memory())
        wanted = join_bytes(1, LONG + 1, 2 * layers * kv_heads * head_dim * 4)
        while ready.grow(wanted):
            pass
        ready.release()
    started = time.perf_counter()
    for mine, joining in zip(short, long, strict=True):
        mine.extend(joining)
    mx.eval([c.keys for c in short] + [c.values for c in short])
    return time.perf_counter() - started


def _touch_seconds() -> float:
    import numpy as np

    started = time.perf_counter()
    block = np.empty(1 << 28, dtype=np.float32)  # 1 GiB
    block.fill(1.0)
    seconds = time.perf_counter() - started
    del block
    return seconds


def child(layers: int, kv_heads: int, head_dim: int) -> dict[str, Any]:
    """In a fresh process: each measure first, then again (its memory used before)."""
    merges = [_merge_seconds(layers, kv_heads, head_dim) for _ in range(ROUNDS)]
    touches = [_touch_seconds() for _ in range(ROUNDS)]
    return {
        "merge_fresh_s": round(merges[0], 3),
        "merge_again_s": [round(s, 3) for s in merges[1:]],
        "touch_1gib_fresh_s": round(touches[0], 3),
        "touch_1gib_again_s": [round(s, 3) for s in touches[1:]],
    }


def child_reserve(layers: int, kv_heads: int, head_dim: int) -> dict[str, Any]:
    """In a fresh process: the first merge after the join memory was made ready."""
    return {"merge_fresh_ready_s": round(_merge_seconds(layers, kv_heads, head_dim, True), 3)}


def _child(mode: str, shape: tuple[int, int, int]) -> dict[str, Any]:
    tunables = mlxenv.cpu_rank_env(None, 1, 1, huge_pages=True).get("GLIBC_TUNABLES", "")
    out = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks.bench_join_cost", mode, *map(str, shape)],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
        env={**os.environ, "GLIBC_TUNABLES": tunables},
    )
    figures: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


def bench_join_cost(model: Path) -> dict[str, Any]:
    config = json.loads((model / "config.json").read_text())
    heads = int(config["num_attention_heads"])
    shape = (
        int(config["num_hidden_layers"]) // 2,  # one rank of the demo's 2-rank pipeline
        int(config.get("num_key_value_heads") or heads),
        int(config.get("head_dim") or int(config["hidden_size"]) // heads),
    )
    # Pair by pair: a fresh process without the remedy, then one with it.
    pairs = [(_child("child", shape), _child("reserve", shape)) for _ in range(ROUNDS)]
    return {
        "layers": shape[0],
        "kv_heads": shape[1],
        "head_dim": shape[2],
        **pairs[0][0],
        "pairs_merge_fresh_s": [plain["merge_fresh_s"] for plain, _ in pairs],
        "pairs_merge_fresh_ready_s": [ready["merge_fresh_ready_s"] for _, ready in pairs],
    }


if __name__ == "__main__":
    if sys.argv[1:2] in (["child"], ["reserve"]):
        layers, kv_heads, head_dim = (int(v) for v in sys.argv[2:5])
        measure = child if sys.argv[1] == "child" else child_reserve
        print(json.dumps(measure(layers, kv_heads, head_dim)))
    else:
        from core.model.demo_model import ensure_demo_model

        path = Path(sys.argv[1]) if len(sys.argv) > 1 else ensure_demo_model()
        print(json.dumps(bench_join_cost(path)))
