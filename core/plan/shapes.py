"""Published models' shapes as the estimate reads them: each layer's bytes (and of those,
its routed experts'), the head, the KV cache per token and the activation vector, from
the model's config.json values and its storage format, for the calibration figures
(``core/plan/calibration.py``). No file is read: the shapes are written out here.

MLX's affine quantization keeps a 16-bit scale and bias per group of 64 weights, so
4-bit is 4.5 bits a weight, 6-bit 6.5, 8-bit 8.5; norms and biases are left out (under
0.1 % of any model here).
"""

from __future__ import annotations

from collections.abc import Sequence

from core.model.experts import Experts
from core.plan.estimate import Workload

__all__ = [
    "dense_workload",
    "gpt_oss_120b",
    "llama4",
    "minimax_m2",
    "qwen3_moe",
    "qwen35_moe",
]


def dense_workload(
    *,
    params: float,
    embedding_params: float,
    layers: int,
    hidden: int,
    kv_heads: int,
    head_dim: int,
    bits_per_weight: float,
    tied: bool,
    heads: int,
) -> Workload:
    """A dense transformer's workload from its published shape: the layers share the
    parameters that are neither embeddings nor (untied) head, evenly; KV cache in 16 bits."""
    heads_params = embedding_params if tied else 2 * embedding_params
    per_layer = (params - heads_params) * bits_per_weight / 8 / layers
    return Workload(
        layer_bytes=(int(per_layer),) * layers,
        head_bytes=int(embedding_params * bits_per_weight / 8),
        kv_bytes_per_token_layer=2 * kv_heads * head_dim * 2,
        exchange_bytes=hidden * 2,
        kv_group=heads / kv_heads,
    )


def _moe(
    *,
    bits: float,
    hidden: int,
    vocab: int,
    other: Sequence[float],
    routed: Sequence[float],
    experts: int,
    k: int,
    kv_bytes_per_token_layer: int,
    kv_group: float,
    kv_split_by_tensor: bool = True,
) -> Workload:
    """A mixture of experts from parameter counts per layer: ``other`` (attention, dense
    MLP, shared experts, router) and ``routed`` (all routed experts, 0 in a dense layer);
    an untied head of ``vocab`` × ``hidden`` plus one embedding row."""
    byte = bits / 8
    routed_bytes = tuple(int(r * byte) for r in routed)
    layer_bytes = tuple(int(o * byte) + r for o, r in zip(other, routed_bytes, strict=True))
    return Workload(
        layer_bytes=layer_bytes,
        head_bytes=int((vocab + 1) * hidden * byte),
        kv_bytes_per_token_layer=kv_bytes_per_token_layer,
        exchange_bytes=hidden * 2,
        kv_split_by_tensor=kv_split_by_tensor,
        experts=Experts(experts, k, routed_bytes),
        kv_group=kv_group,
    )


def _attention(hidden: int, heads: int, kv_heads: int, head_dim: int, gate: bool = False) -> int:
    """q, k, v, o projections (``gate``: q_proj also makes the output gate, Qwen3-Next)."""
    q = heads * head_dim * (2 if gate else 1)
    return hidden * q + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden


def qwen3_moe(
    *, layers: int, hidden: int, heads: int, kv_heads: int, moe_inter: int, bits: float
) -> Workload:
    """Qwen3 MoE (qwen3_moe): 128 experts, 8 a token, no shared expert, head_dim 128,
    vocabulary 151,936, untied (Qwen3-30B-A3B: 48 layers, hidden 2,048, 32 heads, 4 KV
    heads, experts 768 wide; Qwen3-235B-A22B: 94, 4,096, 64, 4, 1,536)."""
    attention = _attention(hidden, heads, kv_heads, 128)
    return _moe(
        bits=bits,
        hidden=hidden,
        vocab=151936,
        other=[attention + hidden * 128] * layers,
        routed=[128 * 3 * hidden * moe_inter] * layers,
        experts=128,
        k=8,
        kv_bytes_per_token_layer=2 * kv_heads * 128 * 2,
        kv_group=heads / kv_heads,
    )


def qwen35_moe(bits: float) -> Workload:
    """Qwen3.5 / 3.6 35B-A3B (qwen3_5_moe): 40 layers of hidden 2,048, three Gated DeltaNet
    layers (16 key and 32 value heads of 128) for each attention layer (16 heads of 256
    with an output gate, 2 KV heads); 256 experts 512 wide, 8 a token, one shared expert
    512 wide; vocabulary 248,320, untied. Only the attention layers keep a KV cache (the
    others a fixed state), so the cache per layer is a quarter of theirs."""
    hidden, layers = 2048, 40
    linear = hidden * (16 * 128 * 2 + 32 * 128 * 2) + hidden * 64 + 32 * 128 * hidden
    full = _attention(hidden, 16, 2, 256, gate=True)
    shared = 3 * hidden * 512 + hidden + hidden * 256
    other = [(full if i % 4 == 3 else linear) + shared for i in range(layers)]
    return _moe(
        bits=bits,
        hidden=hidden,
        vocab=248320,
        other=other,
        routed=[256 * 3 * hidden * 512] * layers,
        experts=256,
        k=8,
        kv_bytes_per_token_layer=2 * 2 * 256 * 2 // 4,
        kv_group=8,
    )


def gpt_oss_120b(bits: float) -> Workload:
    """gpt-oss-120b (gpt_oss): 36 layers of hidden 2,880, 64 heads of 64, 8 KV heads, 128
    experts 2,880 wide, 4 a token; vocabulary 201,088, untied. Every other layer attends
    over a 128-token window, so at short contexts the cache is as if all were full."""
    hidden, layers = 2880, 36
    attention = _attention(hidden, 64, 8, 64)
    return _moe(
        bits=bits,
        hidden=hidden,
        vocab=201088,
        other=[attention + hidden * 128] * layers,
        routed=[128 * 3 * hidden * 2880] * layers,
        experts=128,
        k=4,
        kv_bytes_per_token_layer=2 * 8 * 64 * 2,
        kv_group=8,
    )


def minimax_m2(bits: float) -> Workload:
    """MiniMax-M2 / M2.1 (minimax): 62 layers of hidden 3,072, 48 heads of 128, 8 KV heads,
    full attention in every layer; 256 experts 1,536 wide, 8 a token; vocabulary 200,064,
    untied."""
    hidden, layers = 3072, 62
    attention = _attention(hidden, 48, 8, 128)
    return _moe(
        bits=bits,
        hidden=hidden,
        vocab=200064,
        other=[attention + hidden * 256] * layers,
        routed=[256 * 3 * hidden * 1536] * layers,
        experts=256,
        k=8,
        kv_bytes_per_token_layer=2 * 8 * 128 * 2,
        kv_group=6,
    )


def llama4(*, maverick: bool, bits: float) -> Workload:
    """Llama 4 (llama4): 48 layers of hidden 5,120, 40 heads of 128, 8 KV heads; experts
    8,192 wide, 1 a token, plus a shared expert as wide; vocabulary 202,048, untied. Scout:
    16 experts in every layer. Maverick: 128 experts in every other layer (1, 3, ...), the
    others a dense MLP 16,384 wide. Three layers in four attend in 8,192-token chunks, so at
    short contexts the cache is as if all were full."""
    hidden, layers = 5120, 48
    attention = _attention(hidden, 40, 8, 128)
    expert = 3 * hidden * 8192
    moe = [i % 2 == 1 for i in range(layers)] if maverick else [True] * layers
    count = 128 if maverick else 16
    return _moe(
        bits=bits,
        hidden=hidden,
        vocab=202048,
        other=[attention + (expert + hidden * count if m else 3 * hidden * 16384) for m in moe],
        routed=[count * expert if m else 0 for m in moe],
        experts=count,
        k=1,
        kv_bytes_per_token_layer=2 * 8 * 128 * 2,
        kv_group=5,
    )
