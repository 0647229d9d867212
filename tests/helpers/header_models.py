"""Model folders that hold only safetensors headers: a 400 GB layout in a few kB.

A header states each tensor's dtype, shape and byte range, which is everything
``read_model_info`` measures. Files written here stop right after their header, so they
are truncated by definition: read them with ``read_model_info(folder, check_data=False)``,
which keeps every other check (config, index, layers present) and skips only the one that
compares byte ranges with the file size.
"""

from __future__ import annotations

import json
import math
import os
import random
import struct
from pathlib import Path

from core.model.info import ModelInfo
from core.model.safetensors_headers import DTYPE_BYTES
from core.plan.memory import GIB, Node, PlanOptions, node_budget
from core.worker.shardfiles import LAYER_PATTERN

TensorSpec = tuple[str, tuple[int, ...]]


def write_header_only_model(
    folder: Path, config: dict, tensors: dict[str, TensorSpec], *, files: int = 2
) -> Path:
    """Write config.json, an index and ``files`` header-only safetensors files.

    Layers are split in order over the files; shared tensors go to the first file.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    layers = int(config.get("num_hidden_layers") or config["text_config"]["num_hidden_layers"])
    files = max(1, min(files, layers))
    names = [f"model-{i + 1:05d}-of-{files:05d}.safetensors" for i in range(files)]
    parts: list[dict[str, TensorSpec]] = [{} for _ in names]
    for name, spec in sorted(tensors.items()):
        match = LAYER_PATTERN.search(name)
        index = min(int(match.group(1)), layers - 1) * files // layers if match else 0
        parts[index][name] = spec
    weight_map = {}
    for file_name, part in zip(names, parts, strict=True):
        write_header_only_file(folder / file_name, part)
        weight_map.update(dict.fromkeys(part, file_name))
    index = {"metadata": {}, "weight_map": dict(sorted(weight_map.items()))}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def write_sparse_model(folder: Path, config: dict, tensors: dict[str, TensorSpec]) -> Path:
    """A model folder whose files hold every byte their headers describe, all zeros and
    sparse (a 50 GB model in a few kB of disk): it passes every check a model to run
    passes, so the planner and the CLI take it as downloaded; loading it is not meant."""
    write_header_only_model(folder, config, tensors)
    for file in Path(folder).glob("*.safetensors"):
        raw = file.read_bytes()
        (length,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + length])
        data = max(
            (v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0
        )
        os.truncate(file, 8 + length + data)
    return Path(folder)


def write_header_only_file(path: Path, tensors: dict[str, TensorSpec]) -> int:
    """A safetensors header with consecutive byte ranges and no data; returns the data size."""
    header: dict[str, object] = {"__metadata__": {"format": "mlx"}}
    offset = 0
    for name, (dtype, shape) in sorted(tensors.items()):
        size = math.ceil(math.prod(shape) * DTYPE_BYTES[dtype])
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    return offset


def as_sparse_weights(folder: Path) -> Path:
    """Extend each header-only file of ``folder`` to the size its header declares, as a
    sparse file (holes, not bytes on the disk): a model that ``read_model_info`` takes
    whole, for a plan that must see its full size without a download."""
    for path in Path(folder).glob("*.safetensors"):
        with path.open("rb") as file:
            (length,) = struct.unpack("<Q", file.read(8))
            header = json.loads(file.read(length))
        end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
        with path.open("r+b") as file:
            file.truncate(8 + length + end)
    return Path(folder)


def linear(out: int, inputs: int, bits: int | None, group: int, dtype: str) -> dict:
    """A Linear's tensors: one float weight, or MLX's packed weight + scales + biases."""
    if bits is None:
        return {"weight": (dtype, (out, inputs))}
    return {
        "weight": ("U32", (out, inputs * bits // 32)),
        "scales": (dtype, (out, inputs // group)),
        "biases": (dtype, (out, inputs // group)),
    }


def llama_config(
    *,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    vocab: int,
    tie: bool = False,
    bits: int | None = None,
    group: int = 64,
    context: int = 131072,
    model_type: str = "llama",
) -> dict:
    config = {
        "model_type": model_type,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": intermediate,
        "vocab_size": vocab,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "max_position_embeddings": context,
        "tie_word_embeddings": tie,
        "torch_dtype": "bfloat16",
    }
    if bits is not None:
        config["quantization"] = {"group_size": group, "bits": bits}
    return config


def llama_tensors(config: dict, dtype: str = "BF16") -> dict[str, TensorSpec]:
    """Every tensor of a llama-layout model as mlx-lm saves it (quantized when config says)."""
    q = config.get("quantization") or {}
    bits, group = q.get("bits"), q.get("group_size", 64)
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    q_out = config["num_attention_heads"] * head_dim
    kv_out = config["num_key_value_heads"] * head_dim
    tensors: dict[str, TensorSpec] = {}

    def add(prefix: str, parts: dict) -> None:
        tensors.update({f"{prefix}.{leaf}": spec for leaf, spec in parts.items()})

    add("model.embed_tokens", linear(config["vocab_size"], hidden, bits, group, dtype))
    if not config.get("tie_word_embeddings"):
        add("lm_head", linear(config["vocab_size"], hidden, bits, group, dtype))
    tensors["model.norm.weight"] = (dtype, (hidden,))
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}"
        add(f"{p}.self_attn.q_proj", linear(q_out, hidden, bits, group, dtype))
        add(f"{p}.self_attn.k_proj", linear(kv_out, hidden, bits, group, dtype))
        add(f"{p}.self_attn.v_proj", linear(kv_out, hidden, bits, group, dtype))
        add(f"{p}.self_attn.o_proj", linear(hidden, q_out, bits, group, dtype))
        add(f"{p}.mlp.gate_proj", linear(inter, hidden, bits, group, dtype))
        add(f"{p}.mlp.up_proj", linear(inter, hidden, bits, group, dtype))
        add(f"{p}.mlp.down_proj", linear(hidden, inter, bits, group, dtype))
        tensors[f"{p}.input_layernorm.weight"] = (dtype, (hidden,))
        tensors[f"{p}.post_attention_layernorm.weight"] = (dtype, (hidden,))
    return tensors


def moe_mla_tensors(config: dict, dtype: str = "BF16") -> dict[str, TensorSpec]:
    """A DeepSeek-V3 / Kimi-K2-layout model: latent attention, stacked experts (switch_mlp)."""
    q = config.get("quantization") or {}
    bits, group = q.get("bits"), q.get("group_size", 64)
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    nope, rope, v_dim = config["qk_nope_head_dim"], config["qk_rope_head_dim"], config["v_head_dim"]
    q_rank, kv_rank = config["q_lora_rank"], config["kv_lora_rank"]
    experts, moe_inter = config["n_routed_experts"], config["moe_intermediate_size"]
    shared_inter = moe_inter * config.get("n_shared_experts", 1)
    tensors: dict[str, TensorSpec] = {}

    def add(prefix: str, parts: dict, stack: int = 0) -> None:
        for leaf, (dt, shape) in parts.items():
            tensors[f"{prefix}.{leaf}"] = (dt, (stack, *shape) if stack else shape)

    add("model.embed_tokens", linear(config["vocab_size"], hidden, bits, group, dtype))
    add("lm_head", linear(config["vocab_size"], hidden, bits, group, dtype))
    tensors["model.norm.weight"] = (dtype, (hidden,))
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}"
        add(f"{p}.self_attn.q_a_proj", linear(q_rank, hidden, bits, group, dtype))
        add(f"{p}.self_attn.q_b_proj", linear(heads * (nope + rope), q_rank, bits, group, dtype))
        add(f"{p}.self_attn.kv_a_proj_with_mqa", linear(kv_rank + rope, hidden, bits, group, dtype))
        add(f"{p}.self_attn.kv_b_proj", linear(heads * (nope + v_dim), kv_rank, bits, group, dtype))
        add(f"{p}.self_attn.o_proj", linear(hidden, heads * v_dim, bits, group, dtype))
        tensors[f"{p}.self_attn.q_a_layernorm.weight"] = (dtype, (q_rank,))
        tensors[f"{p}.self_attn.kv_a_layernorm.weight"] = (dtype, (kv_rank,))
        tensors[f"{p}.input_layernorm.weight"] = (dtype, (hidden,))
        tensors[f"{p}.post_attention_layernorm.weight"] = (dtype, (hidden,))
        if n < config.get("first_k_dense_replace", 0):
            inter = config["intermediate_size"]
            add(f"{p}.mlp.gate_proj", linear(inter, hidden, bits, group, dtype))
            add(f"{p}.mlp.up_proj", linear(inter, hidden, bits, group, dtype))
            add(f"{p}.mlp.down_proj", linear(hidden, inter, bits, group, dtype))
            continue
        tensors[f"{p}.mlp.gate.weight"] = (dtype, (experts, hidden))
        tensors[f"{p}.mlp.gate.e_score_correction_bias"] = ("F32", (experts,))
        for proj, shape in (
            ("gate_proj", (moe_inter, hidden)),
            ("up_proj", (moe_inter, hidden)),
            ("down_proj", (hidden, moe_inter)),
        ):
            add(f"{p}.mlp.switch_mlp.{proj}", linear(*shape, bits, group, dtype), stack=experts)
        add(f"{p}.mlp.shared_experts.gate_proj", linear(shared_inter, hidden, bits, group, dtype))
        add(f"{p}.mlp.shared_experts.up_proj", linear(shared_inter, hidden, bits, group, dtype))
        add(f"{p}.mlp.shared_experts.down_proj", linear(hidden, shared_inter, bits, group, dtype))
    return tensors


def synthetic_model_info(
    *,
    layers: int,
    layer_bytes: int | list[int],
    shared_bytes: int,
    heads: int = 64,
    kv_heads: int = 8,
    head_dim: int = 128,
    hidden: int = 8192,
    intermediate: int = 28672,
    vocab: int = 128256,
    dtype: str = "bfloat16",
    quantization: dict | None = None,
    name: str = "synthetic",
) -> ModelInfo:
    """A ModelInfo with no folder at all, for planner tests that need odd layer sizes."""
    per_layer = [layer_bytes] * layers if isinstance(layer_bytes, int) else list(layer_bytes)
    return ModelInfo(
        path=Path("/nonexistent") / name,
        name=name,
        architecture="llama",
        layers=layers,
        hidden_size=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=vocab,
        parameter_count=sum(per_layer) + shared_bytes,
        bytes_on_disk=sum(per_layer) + shared_bytes,
        quantization=quantization,
        tie_word_embeddings=False,
        dtype=dtype,
        context_length=131072,
        can_tensor_shard=True,
        has_native_pipeline=False,
        weight_files=(),
        layer_bytes=tuple(per_layer),
        shared_bytes=shared_bytes,
        kv_elements_per_token=2 * kv_heads * head_dim,
    )


def kimi_k2_config(*, layers: int = 61, experts: int = 384) -> dict:
    """Kimi K2's shape (DeepSeek-V3 architecture), 8-bit; layers/experts shrinkable."""
    return {
        "model_type": "deepseek_v3",
        "vocab_size": 163840,
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": layers,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "n_shared_experts": 1,
        "n_routed_experts": experts,
        "num_experts_per_tok": 8,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "qk_nope_head_dim": 128,
        "first_k_dense_replace": 1,
        "max_position_embeddings": 131072,
        "rope_theta": 50000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "quantization": {"group_size": 64, "bits": 8},
    }


def thousand_layer_case() -> tuple[ModelInfo, list[Node]]:
    """1,000 layers of uneven sizes filling 8 uneven Macs to ~93%: the proportional split
    overflows and the repair search runs (the slow path)."""
    nodes = [Node(f"mac-{i}", (64 << i % 4) * GIB) for i in range(8)]
    usable = sum(node_budget(n, PlanOptions()).usable_bytes for n in nodes)
    rnd = random.Random(1000)
    raw = [i + 1 + rnd.randint(0, 200) for i in range(1000)]
    scale = (usable * 0.93 - 8 * 3 * GIB) / sum(raw)
    model = synthetic_model_info(
        layers=1000,
        layer_bytes=[int(r * scale) for r in raw],
        shared_bytes=2 * GIB,
        name="thousand-layers",
    )
    return model, nodes


def qwen3_moe_config(
    *,
    layers: int = 48,
    hidden: int = 2048,
    heads: int = 32,
    kv_heads: int = 4,
    experts: int = 128,
    moe_inter: int = 768,
    bits: int | None = 4,
) -> dict:
    """mlx-community/Qwen3-30B-A3B-4bit's config.json values (Qwen3-235B-A22B: 94 layers,
    hidden 4,096, 64 heads, experts 1,536 wide)."""
    config = {
        "model_type": "qwen3_moe",
        "architectures": ["Qwen3MoeForCausalLM"],
        "vocab_size": 151936,
        "hidden_size": hidden,
        "intermediate_size": 6144 if hidden == 2048 else 12288,
        "moe_intermediate_size": moe_inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": 128,
        "num_experts": experts,
        "num_experts_per_tok": 8,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    if bits is not None:
        config["quantization"] = {"group_size": 64, "bits": bits}
    return config


def qwen3_moe_tensors(config: dict, dtype: str = "BF16") -> dict[str, TensorSpec]:
    """Every tensor of a Qwen3 MoE model as mlx-lm saves it: experts stacked (switch_mlp)."""
    q = config.get("quantization") or {}
    bits, group = q.get("bits"), q.get("group_size", 64)
    hidden, head_dim = config["hidden_size"], config["head_dim"]
    q_out = config["num_attention_heads"] * head_dim
    kv_out = config["num_key_value_heads"] * head_dim
    experts, inter = config["num_experts"], config["moe_intermediate_size"]
    tensors: dict[str, TensorSpec] = {}

    def add(prefix: str, parts: dict, stack: int = 0) -> None:
        for leaf, (dt, shape) in parts.items():
            tensors[f"{prefix}.{leaf}"] = (dt, (stack, *shape) if stack else shape)

    add("model.embed_tokens", linear(config["vocab_size"], hidden, bits, group, dtype))
    add("lm_head", linear(config["vocab_size"], hidden, bits, group, dtype))
    tensors["model.norm.weight"] = (dtype, (hidden,))
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}"
        add(f"{p}.self_attn.q_proj", linear(q_out, hidden, bits, group, dtype))
        add(f"{p}.self_attn.k_proj", linear(kv_out, hidden, bits, group, dtype))
        add(f"{p}.self_attn.v_proj", linear(kv_out, hidden, bits, group, dtype))
        add(f"{p}.self_attn.o_proj", linear(hidden, q_out, bits, group, dtype))
        tensors[f"{p}.self_attn.q_norm.weight"] = (dtype, (head_dim,))
        tensors[f"{p}.self_attn.k_norm.weight"] = (dtype, (head_dim,))
        add(f"{p}.mlp.gate", linear(experts, hidden, bits, group, dtype))
        for proj, shape in (
            ("gate_proj", (inter, hidden)),
            ("up_proj", (inter, hidden)),
            ("down_proj", (hidden, inter)),
        ):
            add(f"{p}.mlp.switch_mlp.{proj}", linear(*shape, bits, group, dtype), stack=experts)
        tensors[f"{p}.input_layernorm.weight"] = (dtype, (hidden,))
        tensors[f"{p}.post_attention_layernorm.weight"] = (dtype, (hidden,))
    return tensors
