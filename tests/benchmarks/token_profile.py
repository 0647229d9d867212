"""Where one generated token's time goes on a CPU rank: the demo model, one process, in
the environment a local CPU rank gets (its BLAS preload, threads, ring-wait library).

Prints JSON: a whole token (forward with a 300-token cache), the decoder layers alone,
the vocabulary head alone, the one-row products of the layers' weights (each shape
timed as the rank stores it, times its count), and the rest (norms, attention, rope, op
dispatch); the bytes of weights a token reads and the rate that makes; and this
machine's memory read rate (numpy summing 256 MiB), the ceiling for reading them.

Run: ``python -m tests.benchmarks.token_profile`` (it re-runs itself with the rank's
environment); ``bench_blas`` includes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CHILD = "MACMESH_TOKEN_PROFILE_CHILD"


def _median_s(step: Any, repeats: int) -> float:
    from core.worker.layout import median_seconds

    return median_seconds(step, repeats)


def _profile(model_path: Path) -> dict[str, Any]:
    import mlx.core as mx
    import mlx.nn as nn
    import numpy as np
    from mlx_lm.models.cache import make_prompt_cache

    from core.worker.layout import BlockedLinear, TransposedLinear
    from core.worker.sharding import load_shard

    class _One:
        def size(self) -> int:
            return 1

        def rank(self) -> int:
            return 0

    shard = load_shard(model_path, _One(), "single")  # type: ignore[arg-type]
    model = shard.model
    inner = model.model
    cache = make_prompt_cache(model)
    mx.eval(model(mx.array([[1] * 300]), cache=cache))
    token = mx.array([[42]])

    def trimmed(step: Any) -> Any:
        def run() -> Any:
            out = step()
            for c in cache:  # keep the cache at 300 tokens: every step alike
                c.offset = 300
            return out

        return run

    whole = _median_s(trimmed(lambda: model(token, cache=cache)), 30)

    def body() -> Any:
        h = inner.embed_tokens(token)
        for layer, c in zip(inner.layers, cache, strict=True):
            h = layer(h, mask=None, cache=c)
        return inner.norm(h)

    layers = _median_s(trimmed(body), 30)
    hidden = body()
    mx.eval(hidden)
    head_module = getattr(model, "lm_head", None) or inner.embed_tokens.as_linear
    head = _median_s(lambda: head_module(hidden), 30)

    # The layers' weight products, each module once with one row, as a token streams
    # them (every weight read from memory, not one matrix kept in cache), by layout.
    groups: dict[str, list[Any]] = {}
    weight_bytes = 0
    for layer in inner.layers:
        for _, module in layer.named_modules():
            if isinstance(module, BlockedLinear):
                first = module.blocks[0]
                rows = sum(int(b.shape[0]) for b in module.blocks)
                key, width = f"{rows}x{first.shape[1]} rows of {first.shape[0]}", first.shape[1]
                weight_bytes += sum(b.nbytes for b in module.blocks)
            elif isinstance(module, TransposedLinear):
                into, out = module.weight_t.shape
                key, width = f"{out}x{into} transposed", into
                weight_bytes += module.weight_t.nbytes
            elif type(module) is nn.Linear:
                out, into = module.weight.shape
                key, width = f"{out}x{into} as is", into
                weight_bytes += module.weight.nbytes
            else:
                continue
            groups.setdefault(key, []).append((module, int(width)))
    products = {}
    products_s = 0.0
    for key, members in groups.items():
        rows = {w: mx.random.normal((1, w)) for _, w in members}
        mx.eval(list(rows.values()))
        each = _median_s(lambda members=members, rows=rows: [m(rows[w]) for m, w in members], 15)
        products[key] = {"ms_all": round(each * 1e3, 2), "count": len(members)}
        products_s += each
    head_owner = vars(inner.embed_tokens).get("as_linear", inner.embed_tokens)  # float blocks
    head_bytes = sum(p.nbytes for _, p in _flat(head_owner.parameters()))
    block = np.ones(64 << 20, dtype=np.float32)  # 256 MiB
    block.sum()
    began = time.perf_counter()
    for _ in range(5):
        block.sum()
    read_gb_s = 5 * block.nbytes / (time.perf_counter() - began) / 1e9
    return {
        "token_ms": round(whole * 1e3, 1),
        "layers_ms": round(layers * 1e3, 1),
        "head_ms": round(head * 1e3, 1),
        "layer_products_ms": round(products_s * 1e3, 1),
        "layers_rest_ms": round((layers - products_s) * 1e3, 1),
        "products": products,
        "weight_bytes_per_token": weight_bytes + head_bytes,
        "weights_gb_per_s": round((weight_bytes + head_bytes) / whole / 1e9, 2),
        "memory_read_gb_per_s": round(read_gb_s, 2),
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "weights": shard.weights,
    }


def _flat(tree: Any, prefix: str = "") -> list[tuple[str, Any]]:
    from mlx.utils import tree_flatten

    return list(tree_flatten(tree, prefix=prefix))


def token_profile(model_path: Path, local_ranks: int = 2) -> dict[str, Any]:
    """The profile, measured in a child process with a CPU rank's environment (one of
    ``local_ranks`` on this machine, as the 2-rank demo has it)."""
    from core.run.job import cpu

    env = {**os.environ, CHILD: str(model_path)}
    env.update(cpu.local_cpu_env(local_ranks, env))
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks.token_profile"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=root,
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    if os.environ.get(CHILD):
        print(json.dumps(_profile(Path(os.environ[CHILD]))))
        return 0
    from core.model.demo_model import ensure_demo_model

    print(json.dumps(token_profile(ensure_demo_model()), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
