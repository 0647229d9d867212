"""Planned vs peak memory per rank, from a real demo job (issue 26): the e2e test that
fails above 1.1x the plan and the benchmark that prints the table share these."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import mlx.core as mx

from core.worker.shardfiles import LAYER_PATTERN
from tests.helpers.tiny_models import EOS_TOKEN, _save_tokenizer, build_tokenizer

TOLERANCE = 1.1  # issue 26: peak <= 1.1 x planned


def demo_summary(
    model: Path, strategy: str, nodes: int, cache: Path, max_tokens: int = 8
) -> dict[str, Any]:
    """The JSON summary of one real ``macmesh demo --headless --json`` job of ``model``."""
    args = ["demo", "--headless", "--json", "--max-tokens", str(max_tokens)]
    args += ["--model", str(model), "--nodes", str(nodes)]
    args += ["--strategy", strategy] if nodes > 1 else []
    env = dict(os.environ, MACMESH_CACHE_DIR=str(cache), HF_HUB_OFFLINE="1")
    run = subprocess.run(
        [sys.executable, "-m", "gui.cli", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    if run.returncode != 0:
        raise AssertionError(f"the demo job failed: {run.stderr[-2000:]}")
    summary: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return summary


def rank_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Each rank's planned and measured bytes (MB), and its peak over its plan."""
    rows = []
    for rank in summary["ranks"]:
        base = rank["base_bytes"] or 0
        rows.append(
            {
                "rank": rank["rank"],
                "node": rank["node"],
                "weights": rank.get("weights"),
                "planned_mb": _mb(rank["planned_bytes"]),
                "base_mb": _mb(base),
                "peak_load_mb": _mb(rank["peak_load_bytes"], base),
                "peak_generation_mb": _mb(rank["peak_generation_bytes"], base),
                "peak_over_plan": rank["peak_over_plan"],
            }
        )
    return rows


def _mb(value: int | None, base: int = 0) -> float | None:
    return None if value is None else round((value - base) / (1 << 20), 1)


def make_float16_llama(
    path: Path,
    *,
    layers: int = 16,
    hidden: int = 2048,
    heads: int = 16,
    kv_heads: int = 4,
    intermediate: int = 6144,
    vocab: int = 32000,
) -> Path:
    """A random float16 llama mlx-lm loads (about 1.8 GB at the defaults: 16 layers,
    hidden 2048, like issue 26's), written one layer at a time so making it never holds
    the whole model, one weight file per layer plus one for the vocabulary."""
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    head_dim = hidden // heads
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "intermediate_size": intermediate,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab,
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "eos_token_id": tokenizer.token_to_id(EOS_TOKEN),
        "bos_token_id": tokenizer.token_to_id("<|endoftext|>"),
    }
    shapes: dict[str, tuple[int, ...]] = {}
    for i in range(layers):
        prefix = f"model.layers.{i}."
        shapes |= {
            prefix + "self_attn.q_proj.weight": (heads * head_dim, hidden),
            prefix + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
            prefix + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
            prefix + "self_attn.o_proj.weight": (hidden, heads * head_dim),
            prefix + "mlp.gate_proj.weight": (intermediate, hidden),
            prefix + "mlp.up_proj.weight": (intermediate, hidden),
            prefix + "mlp.down_proj.weight": (hidden, intermediate),
            prefix + "input_layernorm.weight": (hidden,),
            prefix + "post_attention_layernorm.weight": (hidden,),
        }
    shapes |= {
        "model.embed_tokens.weight": (vocab, hidden),
        "model.norm.weight": (hidden,),
        "lm_head.weight": (vocab, hidden),
    }
    files: dict[str, list[str]] = {}
    for name in shapes:
        match = LAYER_PATTERN.search(name)
        file = f"layer-{int(match.group(1)):03d}" if match else "vocab"
        files.setdefault(file, []).append(name)
    count = len(files)
    weight_map, total = {}, 0
    for n, (stem, names) in enumerate(sorted(files.items())):
        file = f"model-{n + 1:05d}-of-{count:05d}.safetensors"
        part = {name: _random(shapes[name]) for name in names}
        mx.save_safetensors(str(path / file), part, metadata={"format": "mlx"})
        total += sum(v.nbytes for v in part.values())
        weight_map |= dict.fromkeys(names, file)
        del part, stem
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    _save_tokenizer(path, tokenizer)
    return path


def _random(shape: tuple[int, ...]) -> mx.array:
    if len(shape) == 1:
        return mx.ones(shape, dtype=mx.float16)
    weight = mx.random.normal(shape, scale=shape[1] ** -0.5).astype(mx.float16)
    mx.eval(weight)
    return weight
