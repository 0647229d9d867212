"""The memory side of planning: what each Mac can give the GPU, and what a model takes.

Inputs (Node, Link, PlanOptions) and the per-node budget live here so the planner's
strategy logic stays short. Pure functions, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.model.info import ModelInfo
from core.units import GIB as GIB  # re-exported: plans are written with node sizes in GIB
from core.units import MIB as MIB
from core.worker import kvbits
from core.worker.vocab import Strategy

# macOS lets the GPU wire about 2/3 of RAM on Macs up to 36 GB and 3/4 above (Metal's
# recommendedMaxWorkingSetSize); iogpu.wired_limit_mb overrides it when set (0 = unset).
SMALL_MAC_BYTES = 36 * GIB
DEFAULT_LIMIT_SOURCE = "macOS default: 2/3 of RAM up to 36 GB, 3/4 above"
WIRED_LIMIT_SOURCE = "iogpu.wired_limit_mb"
KV_CACHE_STEP = 256  # mlx-lm's KVCache grows in blocks of 256 tokens
# What a CPU rank's layout timing holds at once for a small weight: ``COLD_BYTES`` of
# copies and as much again in the layout timed (core.worker.layout, kept equal by a test).
LAYOUT_TIMING_BYTES = 2 * (32 << 20)
CPU_FLOAT_BYTES = 4  # MLX's CPU computes in float32 (no fast half precision there)


def default_gpu_limit_bytes(memory_bytes: int) -> int:
    """What macOS lets the GPU wire when iogpu.wired_limit_mb is not set.

    The one place the rule lives: 2/3 of RAM up to 36 GB, 3/4 above.
    """
    if memory_bytes <= SMALL_MAC_BYTES:
        return memory_bytes * 2 // 3
    return memory_bytes * 3 // 4


@dataclass(frozen=True)
class Node:
    """A Mac as the planner sees it. ``wired_limit_mb`` is the sysctl (None or 0: unset)."""

    name: str
    memory_bytes: int
    wired_limit_mb: int | None = None
    chip: str | None = None
    rdma: bool | None = None
    cpu: bool = False  # MLX runs on its CPU (a Linux host, the demo on Linux): no Metal


@dataclass(frozen=True)
class Link:
    """A cable between two nodes, with its speed and whether RDMA runs over it."""

    a: str
    b: str
    gbps: float
    rdma: bool


@dataclass(frozen=True)
class PlanOptions:
    """What the user chose. The margin is ``margin_fraction`` of the GPU limit, at least
    ``min_margin_bytes``: kept free for MLX's buffer cache, fragmentation and surprises."""

    strategy: Strategy = Strategy.AUTO
    context_length: int = 4096
    batch: int = 1
    margin_fraction: float = 0.05
    min_margin_bytes: int = 512 * MIB
    prefill_chunk: int = 2048  # mlx-lm's default prefill_step_size
    # The ranks' prompt cache bound (the worker's --prompt-cache-mb, in bytes; 0: none):
    # conversations' KV caches kept between requests, beside the batch's own.
    prompt_cache_bytes: int = 0
    # The KV cache's bits (16: as computed; 8 or 4: quantized, core.worker.kvquant) and
    # quantization group size: the batch's and the prompt cache's bytes both shrink.
    kv_bits: int = kvbits.NONE
    kv_group_size: int = kvbits.DEFAULT_GROUP_SIZE
    # A pipeline split set by hand: layers per rank, rank order (as a plan lists its
    # ranks); None: the planner's. Given with strategy auto, it asks for a pipeline.
    split: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategy", Strategy(self.strategy))  # "pipeline" too
        if self.split is not None:
            object.__setattr__(self, "split", tuple(int(n) for n in self.split))
            if self.strategy is Strategy.AUTO:
                object.__setattr__(self, "strategy", Strategy.PIPELINE)


@dataclass(frozen=True)
class NodeBudget:
    """How much a node can give the model, and where that number comes from."""

    node: str
    memory_bytes: int
    gpu_limit_bytes: int
    gpu_limit_source: str
    margin_bytes: int

    @property
    def usable_bytes(self) -> int:
        return max(0, self.gpu_limit_bytes - self.margin_bytes)


def node_budget(node: Node, options: PlanOptions) -> NodeBudget:
    """The node's GPU limit (the sysctl when set, else the macOS default) and its margin."""
    if node.wired_limit_mb:
        limit, source = node.wired_limit_mb * MIB, WIRED_LIMIT_SOURCE
    else:
        limit, source = default_gpu_limit_bytes(node.memory_bytes), DEFAULT_LIMIT_SOURCE
    margin = min(limit, max(options.min_margin_bytes, int(limit * options.margin_fraction)))
    return NodeBudget(node.name, node.memory_bytes, limit, source, margin)


def kv_bytes_per_layer(model: ModelInfo, options: PlanOptions) -> int:
    """KV cache of one layer for the whole context and batch (keys and values together),
    rounded up to mlx-lm's 256-token allocation blocks."""
    tokens = -(-options.context_length // KV_CACHE_STEP) * KV_CACHE_STEP
    return _at_bits(model.kv_elements_per_token * tokens * options.batch, model, options)


def _at_bits(elements: int, model: ModelInfo, options: PlanOptions) -> int:
    """Bytes of ``elements`` KV cache elements at the options' bits."""
    plain = elements * model.dtype_bytes
    return kvbits.scaled(plain, options.kv_bits, options.kv_group_size, model.dtype_bytes)


def prompt_cache_tokens(model: ModelInfo, options: PlanOptions) -> int:
    """Tokens the ranks' prompt cache keeps at most: the bound over the whole model's KV
    bytes per token counted in float32, as every rank counts it (``core.worker.promptcache``:
    one count on every rank, so they evict alike)."""
    per_token = 2 * model.kv_heads * model.head_dim * CPU_FLOAT_BYTES * model.layers
    per_token = kvbits.scaled(per_token, options.kv_bits, options.kv_group_size, CPU_FLOAT_BYTES)
    return options.prompt_cache_bytes // per_token if per_token > 0 else 0


def prompt_cache_bytes_per_layer(model: ModelInfo, options: PlanOptions) -> int:
    """One layer's part of a full prompt cache, in the model's KV dtype (a node's share is
    this times its layers, or its tensor slice of every layer)."""
    return _at_bits(
        prompt_cache_tokens(model, options) * model.kv_elements_per_token, model, options
    )


def activation_bytes(model: ModelInfo, options: PlanOptions, shards: int = 1) -> int:
    """Working buffers of one prefill step, an estimate: the residual stream and norms,
    Q/K/V, the MLP's hidden units (split ``shards`` ways under tensor parallelism), plus
    float32 logits. MLX's fused attention does not materialise the score matrix, so it
    is left to the margin."""
    tokens = min(options.prefill_chunk, options.context_length) * options.batch
    qkv = (model.heads + 2 * model.kv_heads) * model.head_dim // shards
    width = 4 * model.hidden_size + qkv + 3 * model.intermediate_size // shards
    return tokens * width * model.dtype_bytes + options.batch * model.vocab_size * 4


def cpu_weight_bytes(model: ModelInfo, stored_bytes: int) -> int:
    """``stored_bytes`` of ``model``'s weights as a CPU rank holds them: float32. A
    quantized model's are dequantized (``float_weight_bytes``, when the rank has room);
    a float16 or bfloat16 one's always converted (``sharding.load_shard``)."""
    if model.quantization:
        return float_weight_bytes(model, stored_bytes)
    return stored_bytes * CPU_FLOAT_BYTES // min(model.dtype_bytes, CPU_FLOAT_BYTES)


def cpu_load_bytes(model: ModelInfo) -> int:
    """What a CPU rank holds beyond its weights at the peak of its load: its weights are
    made real one tensor at a time (``core.worker.streaming``), then each float32 weight
    is timed and stored again in its fastest layout, one at a time, and the output head
    gets float32 blocks beside the float32 weight they are cut from. So at most two
    float32 copies of the largest tensor (the vocabulary head or an MLP matrix) and the
    layout timing's small copies."""
    largest = max(model.vocab_size, model.intermediate_size) * model.hidden_size
    return 2 * largest * CPU_FLOAT_BYTES + LAYOUT_TIMING_BYTES


def float_weight_bytes(model: ModelInfo, quantized_bytes: int) -> int:
    """``quantized_bytes`` of ``model``'s weights once dequantized to float32 (a CPU rank
    does that when it has room): each packed ``bits``-bit value plus its group's
    float16 scale and bias becomes 4 bytes."""
    quantization = model.quantization
    if not quantization:
        return quantized_bytes
    stored_bits = quantization["bits"] + 2 * 16 / quantization["group_size"]
    return int(quantized_bytes * 32 / stored_bits)
