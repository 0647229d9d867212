"""What base + adapter costs a rank at load: time and memory, with and without it.

Each rank applies the adapter to the whole model and fuses it before taking its shard
(core/worker/adapter.py). On the demo model (4-bit) on the CPU the adapted layers are
fused in float32, as the CPU's fast path holds every layer anyway. The adapter is mlx-lm's
LoRA on every layer (rank 8, random weights: the worst case for fusing; a trained one
costs the same), made by ``synthetic_adapter``. Figures: each variant's load time (the
slowest rank) and memory (the largest rank), pipeline on 2 ranks, the demo's default;
after one unmeasured load (the files in the page cache for both). ``kept_quantized``:
the same with the ranks told to keep 4-bit weights (as on Metal), where the adapted
layers are quantized again after fusing.

``bench_adapter(model)`` returns JSON-able figures; run this file to print them.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from core.run.job.launcher import Job, JobSpec


def synthetic_adapter(model: Path, out: Path, rank: int = 8) -> Path:
    """An mlx-lm LoRA adapter of every layer of ``model`` with random weights."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.tuner.utils import linear_to_lora_layers
    from mlx_lm.utils import load_model

    network, _ = load_model(model, lazy=True)
    layers = len(network.layers)
    lora = {"rank": rank, "scale": 20.0, "dropout": 0.0}
    linear_to_lora_layers(network, layers, lora)
    weights = {
        name: mx.random.normal(value.shape) * 0.01
        for name, value in tree_flatten(network.parameters())
        if name.endswith((".lora_a", ".lora_b"))
    }
    out.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(out / "adapters.safetensors"), weights)
    config = {"fine_tune_type": "lora", "num_layers": layers, "lora_parameters": lora}
    (out / "adapter_config.json").write_text(json.dumps(config))
    return out


def _load(model: Path, adapter: Path | None, weights: str = "auto") -> dict:
    job = Job(JobSpec(model=model, nodes=2, adapter=adapter, weights=[weights] * 2))
    loaded: list[dict] = []
    job.event.connect(lambda e: e["event"] == "loaded" and loaded.append(e))
    job.start()
    try:
        job.wait_ready(timeout=600)
    finally:
        job.stop()
    return {
        "load_s": max(e["load_s"] for e in loaded),
        "memory_bytes": max(e["memory_bytes"] for e in loaded),
        "fused_layers": sum((e.get("adapter") or {}).get("fused", 0) for e in loaded),
    }


def bench_adapter(model: Path) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        adapter = synthetic_adapter(model, Path(folder) / "adapter")
        _load(model, None)  # warm: the files in the page cache for every variant
        figures = {}
        for name, weights in (("pipeline_2_ranks", "auto"), ("kept_quantized", "quantized")):
            base = _load(model, None, weights)
            adapted = _load(model, adapter, weights)
            figures[name] = {
                "base": base,
                "with_adapter": adapted,
                "load_ratio": round(adapted["load_s"] / base["load_s"], 2),
                "memory_ratio": round(adapted["memory_bytes"] / base["memory_bytes"], 3),
            }
    return figures


if __name__ == "__main__":
    from core.model.demo_model import ensure_demo_model

    print(json.dumps(bench_adapter(ensure_demo_model()), indent=2))
