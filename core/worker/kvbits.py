"""The KV cache's quantization choice (``--kv-bits``, ``--kv-group-size``): its values and
what a token's KV costs at each, without MLX (the planner, the settings and the command
lines read it; ``core.worker.kvquant`` runs it).

Keys and values are quantized along each head's width in groups of ``group_size``
elements, as ``mx.quantize`` does: each element takes ``bits / 8`` bytes and each group
one scale and one bias in the activations' dtype. So at 8 bits and group 64 a float16
cache takes 1 + 4/64 = 1.0625 bytes an element instead of 2 (53 %), at 4 bits 0.5625
(28 %); a float32 one (the demo's CPU ranks) 1.125 and 0.625 of 4 (28 % and 16 %).
"""

from __future__ import annotations

NONE = 16  # "16": the cache as the model computes it (not quantized)
KV_BITS = (NONE, 8, 4)  # the choices: the command lines' and the window's
QUANTIZED_BITS = (8, 4)
DEFAULT_GROUP_SIZE = 64  # mlx-lm's QuantizedKVCache default
GROUP_SIZES = (32, 64, 128)  # mx.quantize's


def check(bits: int, group_size: int) -> None:
    """ValueError, saying what is allowed, for a choice the ranks cannot run."""
    if bits not in KV_BITS:
        raise ValueError(
            f"the KV cache bits (--kv-bits) must be 16 (not quantized), 8 or 4, not {bits}"
        )
    if group_size not in GROUP_SIZES:
        raise ValueError(
            f"the KV cache group size (--kv-group-size) must be 32, 64 or 128, not {group_size}"
        )


def element_bytes(bits: int, group_size: int, dtype_bytes: int) -> float:
    """Bytes one cached key or value element takes: ``dtype_bytes`` when not quantized."""
    if bits == NONE:
        return float(dtype_bytes)
    return bits / 8 + 2 * dtype_bytes / group_size


def scaled(bytes_16: int, bits: int, group_size: int, dtype_bytes: int) -> int:
    """A KV byte count made at the model's own dtype, at ``bits`` instead."""
    if bits == NONE or dtype_bytes <= 0:
        return bytes_16
    factor = element_bytes(bits, group_size, dtype_bytes) / dtype_bytes
    return max(1, int(bytes_16 * factor + 0.5))


def head_dim(config: dict[str, object]) -> int | None:
    """The attention heads' width from a model's config, when it says."""
    nested = config.get("text_config")
    text = nested if isinstance(nested, dict) else config
    given = text.get("head_dim")
    if isinstance(given, int) and given > 0:
        return given
    hidden, heads = text.get("hidden_size"), text.get("num_attention_heads")
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        return hidden // heads
    return None
