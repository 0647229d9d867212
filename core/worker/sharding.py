"""Load one rank's shard of a model: whole (single), tensor slices, or pipeline layers.

Pipeline sharding works for every architecture mlx-lm loads. Where mlx-lm has
its own ``model.model.pipeline(group, split)`` we use it; elsewhere (llama,
qwen3, ...) ``PipelineStage`` wraps the rank's first and last local layers
with the same protocol mlx-lm uses: receive the hidden state from rank+1
before the first local layer, send it to rank-1 after the last. Unlike mlx-lm's
(an ``all_gather`` of rank 0's output, then the head on every rank), only rank 0
(the last layers) computes logits and samples; ``core.worker.serve`` sums its token
to the others, which skip the head (``_skip_head``).

Weights are loaded lazily and only the local layers' tensors are evaluated,
so a rank reads from disk only the weights of its layers (and the shared
embeddings, norm and head), and a node needs only the files holding them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import ArraysCache, CacheList, make_prompt_cache
from mlx_lm.utils import dequantize_model, load_config, load_model, load_tokenizer

from core.worker.absent import hold_only
from core.worker.layout import arrange_for_one_row
from core.worker.residency import METER
from core.worker.shardfiles import (
    even_split,
    files_for_layers,
    layer_ranges,
    read_weight_map,
    validate_split,
)
from core.worker.streaming import evaluate_each, release
from core.worker.vocab import LoadingStage, Strategy


class ShardError(Exception):
    """A shard cannot be built; the message says why, for a person."""


@dataclass
class Shard:
    model: nn.Module
    tokenizer: Any
    config: dict[str, Any]
    strategy: Strategy
    layers: tuple[int, int] | None  # [start, end) for pipeline; None otherwise
    # precision on this rank (describe_weights)
    weights: dict[str, Any] = field(default_factory=dict)
    adapter: dict[str, Any] | None = None  # the adapter fused in (core.worker.adapter)
    # Only rank 0 computes logits (PipelineStage): the sampled token goes to the others
    # (core.worker.serve's sampler), not the hidden state.
    token_from_rank0: bool = False


def load_shard(
    path: Path,
    group: mx.distributed.Group,
    strategy: Strategy | str,
    split: list[int] | None = None,
    progress: Callable[[LoadingStage], None] = lambda stage: None,
    float_weights: bool | None = None,
    adapter: Path | None = None,
) -> Shard:
    """This rank's part of the model at ``path``, evaluated; ``progress`` hears each stage
    as it begins. ``single`` runs the whole model on one rank, so it refuses a larger
    group. On the CPU, quantized layers become float32 when ``float_weights`` (None: when
    this machine's memory has room, ``_cpu_weights``): MLX's CPU quantized matmul gains
    nothing from a fast BLAS. ``adapter``: an mlx-lm adapter folder, fused into the whole
    model before it is sharded (``core.worker.adapter``)."""
    strategy = _strategy(strategy, group.size())
    progress(LoadingStage.READING)
    tokenizer = _tokenizer_first(Path(path))
    model, config = load_model(Path(path), lazy=True, strict=False)
    fused = _apply_adapter(model, adapter, float_weights) if adapter else None
    layers = None
    own_head = False
    if group.size() > 1 and strategy is Strategy.TENSOR:
        progress(LoadingStage.SLICING)
        _shard_tensor(model, group, config)
    elif group.size() > 1 and strategy is Strategy.PIPELINE:
        progress(LoadingStage.PLACING)
        layers, own_head = _shard_pipeline(model, group, split)
    _check_files(Path(path), layers)
    weights = describe_weights(config)
    if mx.default_device() == mx.cpu:
        weights = _cpu_weights(model, config, weights, float_weights, keep_vocab=True)
        # CPUs have no fast half-precision arithmetic: a float16 model runs ~30x
        # slower than in float32 there (MLX on Linux, or a Mac without Metal).
        model.set_dtype(mx.float32)
    progress(LoadingStage.WEIGHTS)
    evaluate_each(model)  # one tensor at a time: never the model twice (streaming)
    if mx.default_device() == mx.cpu:
        available = _available_bytes()
        layout = arrange_for_one_row(model, available // 4 if available else None)
        release()
        if layout:
            weights = {**weights, "layout": layout}
    return Shard(model, tokenizer, config, strategy, layers, weights, fused, own_head)


def _tokenizer_first(path: Path) -> Any:
    """The tokenizer, loaded before any weight so the memory held then is the base the
    rank's planned bytes sit on (``core.worker.residency``): its libraries are no part of
    the plan, the weights are."""
    config = load_config(path)
    tokenizer = load_tokenizer(path, eos_token_ids=config.get("eos_token_id"))
    METER.mark_base()
    return tokenizer


def _apply_adapter(model: nn.Module, folder: Path, float_weights: bool | None) -> dict[str, Any]:
    """Fuse the adapter into the whole model; its quantized layers stay float where this
    rank dequantizes anyway (the CPU, unless told to keep them quantized)."""
    # lazy (start-up order): only a rank given an adapter imports mlx-lm's tuner
    from core.worker.adapter import AdapterError, apply_adapter

    dequantize = mx.default_device() == mx.cpu and float_weights is not False
    try:
        return apply_adapter(model, Path(folder), dequantize=dequantize)
    except AdapterError as exc:
        raise ShardError(str(exc)) from None


def load_whole(
    path: Path,
    progress: Callable[[LoadingStage], None] = lambda stage: None,
    float_weights: bool | None = None,
) -> Shard:
    """The whole model at ``path`` on this rank, whatever the group (a fine-tune's rank:
    data parallel), evaluated; on the CPU in float32 as ``load_shard`` has it."""
    progress(LoadingStage.READING)
    model, config = load_model(Path(path), lazy=True, strict=False)
    tokenizer = load_tokenizer(Path(path), eos_token_ids=config.get("eos_token_id"))
    _check_files(Path(path), None)
    weights = describe_weights(config)
    if mx.default_device() == mx.cpu:
        weights = _cpu_weights(model, config, weights, float_weights)
        model.set_dtype(mx.float32)
    progress(LoadingStage.WEIGHTS)
    evaluate_each(model)
    return Shard(model, tokenizer, config, Strategy.SINGLE, None, weights)


def describe_weights(config: dict[str, Any]) -> dict[str, Any]:
    """The weights' precision as the model folder has them: ``{"precision",
    "dequantized": False}``, precision as "4-bit" or the config's dtype."""
    quantization = config.get("quantization") or config.get("quantization_config")
    if isinstance(quantization, dict) and "bits" in quantization:
        return {"precision": f"{quantization['bits']}-bit", "dequantized": False}
    return {"precision": str(config.get("torch_dtype") or "float"), "dequantized": False}


def _cpu_weights(
    model: nn.Module,
    config: dict[str, Any],
    weights: dict[str, Any],
    wanted: bool | None,
    keep_vocab: bool = False,
) -> dict[str, Any]:
    """Dequantize the quantized layers to float32 when wanted (or, with ``wanted`` None,
    when the extra memory is under a quarter of what this machine has available);
    ``keep_vocab`` (generation, one token at a time) keeps the embedding and output head
    quantized (``_vocab_modules``). Training keeps none: its head multiplies whole
    batches, where the BLAS wins."""
    quantized = [
        m
        for _, m in model.named_modules()
        if isinstance(m, nn.QuantizedLinear | nn.QuantizedEmbedding)
    ]
    if not quantized or wanted is False:
        reason = "kept as planned" if quantized else "not quantized"
        return {**weights, "reason": reason} if quantized else weights
    vocab = _vocab_modules(model) if keep_vocab else []
    kept = {id(module) for _, _, module in vocab}
    extra = sum(_float_bytes(m) - _quantized_bytes(m) for m in quantized if id(m) not in kept)
    available = _available_bytes()
    if wanted is None and available is not None and extra > available // 4:
        return {**weights, "reason": f"kept: float32 needs {extra >> 20} MB more"}
    for parent, key, _ in vocab:
        setattr(parent, key, None)
    try:
        dequantize_model(model)
    finally:
        for parent, key, module in vocab:
            setattr(parent, key, module)
    described = {"precision": "float32", "dequantized": True, "from": weights["precision"]}
    if vocab:
        described["reason"] = _kept_vocab_reason([(key, m) for _, key, m in vocab])
    return described


def _kept_vocab_reason(kept: list[tuple[str, nn.Module]]) -> str:
    """Why the vocabulary modules stayed quantized: an embedding's lookup reads a row; an
    untied head's kernel is timed against float32 blocks later (``core.worker.layout``)."""
    lookups = sorted(
        f"{key} {m.bits}-bit" for key, m in kept if isinstance(m, nn.QuantizedEmbedding)
    )
    heads = sorted(
        f"{key} {m.bits}-bit" for key, m in kept if not isinstance(m, nn.QuantizedEmbedding)
    )
    parts = []
    if lookups:
        parts.append(f"{', '.join(lookups)} kept quantized: the lookup reads a row")
    if heads:
        parts.append(f"{', '.join(heads)} kept quantized until timed against float32 blocks")
    return "; ".join(parts)


def _vocab_modules(model: nn.Module) -> list[tuple[Any, str, nn.Module]]:
    """The quantized embedding and output head, as (parent, attribute, module): kept
    quantized on the CPU. A token's lookup reads one row, and a whole float32 copy would
    hold a vocabulary-sized matrix (SmolLM2's 49152x576: 113 MB) for it. A tied model's
    head may still get float32 blocks of its own (``core.worker.layout``: 8 against 22
    ms a token for the 8-bit kernel on this project's 2-core machine)."""
    found = []
    for name, module in model.named_modules():
        vocab = isinstance(module, nn.QuantizedEmbedding) or (
            isinstance(module, nn.QuantizedLinear) and name.split(".")[-1] == "lm_head"
        )
        if not vocab or not name:
            continue
        *path, key = name.split(".")
        parent: Any = model
        for part in path:
            parent = parent[int(part)] if isinstance(parent, list) else getattr(parent, part)
        found.append((parent, key, module))
    return found


def _float_bytes(module: nn.Module) -> int:
    rows, packed = module.weight.shape
    return int(rows * packed * 32 // module.bits * 4)


def _quantized_bytes(module: nn.Module) -> int:
    parts = [module.weight, module.scales, getattr(module, "biases", None)]
    return sum(part.nbytes for part in parts if part is not None)


def _available_bytes() -> int | None:
    """This machine's available memory (Linux's MemAvailable), or None when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _strategy(requested: Strategy | str, size: int) -> Strategy:
    """``requested`` as a strategy a rank can run in a group of ``size``."""
    runnable = [s for s in Strategy if s is not Strategy.AUTO]
    try:
        strategy = Strategy(requested)
    except ValueError:
        strategy = None
    if strategy not in runnable:
        choices = ", ".join(runnable)
        raise ShardError(f"unknown strategy {requested!r}; choose one of {choices}")
    if strategy is Strategy.SINGLE and size > 1:
        raise ShardError(
            f"the single strategy runs the whole model on one node, not {size}; "
            "use pipeline or tensor sharding"
        )
    return strategy


def synchronise(group: mx.distributed.Group) -> None:
    """Every rank has loaded: a tiny all_sum so no rank starts generating alone."""
    mx.eval(mx.distributed.all_sum(mx.array(1.0), group=group, stream=mx.cpu))


def _shard_tensor(model: nn.Module, group: mx.distributed.Group, config: dict[str, Any]) -> None:
    """mlx-lm's ``model.shard`` where it has one; MacMesh's own (``tensor_shard``) for the
    rest, which splits attention and MLPs and keeps the other parts whole on every rank."""
    n = group.size()
    heads = config.get("num_attention_heads")
    kv_heads = config.get("num_key_value_heads", heads)
    for label, count in (("attention heads", heads), ("key/value heads", kv_heads)):
        if isinstance(count, int) and count % n:
            raise ShardError(
                f"tensor sharding needs the {count} {label} to divide by {n} nodes; "
                "use pipeline sharding or a node count that divides them"
            )
    if hasattr(model, "shard"):
        model.shard(group)
        return
    # lazy (start-up order): only tensor ranks without mlx-lm's own shard need it
    from core.worker.tensor_shard import shard_layers

    done = shard_layers(list(model.layers), group)
    if done.whole:  # the plan counted them split: holding them whole would break it
        raise ShardError(
            f"MacMesh cannot split the attention heads of {', '.join(done.whole[:3])} in the "
            f"{config.get('model_type')!r} architecture over {n} nodes; use pipeline sharding"
        )
    if not done.attention and not done.mlp:
        raise ShardError(
            f"MacMesh finds no attention or MLP to split in the {config.get('model_type')!r} "
            "architecture; use pipeline sharding instead"
        )


def _shard_pipeline(
    model: nn.Module, group: mx.distributed.Group, split: list[int] | None
) -> tuple[tuple[int, int], bool]:
    """This rank's layers, and whether only rank 0 computes logits (our PipelineStage;
    mlx-lm's own ``pipeline`` gathers the hidden state to every rank instead)."""
    inner: Any = _layer_owner(model)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, list):
        raise ShardError("this architecture has no layer list that can be pipelined")
    size, rank = group.size(), group.rank()
    split = list(split) if split else even_split(len(layers), size)
    try:
        validate_split(split, len(layers), size)
    except ValueError as exc:
        raise ShardError(str(exc)) from None
    start, end = layer_ranges(split)[rank]
    if hasattr(inner, "pipeline"):
        inner.pipeline(group, split=split)
        _own_caches_only(model, start, end, len(layers))
        return (start, end), False
    _wrap_pipeline(inner, group, start, end)
    if rank != 0:
        _skip_head(model, inner)
    return (start, end), True


def _own_caches_only(model: nn.Module, start: int, end: int, total: int) -> None:
    """After mlx-lm's own ``pipeline``, the model runs only layers ``[start, end)`` with
    one cache each; a wrapper whose ``layers`` still lists the others (qwen2_vl over
    qwen2) would make caches for them too, which stay empty and break the batch's
    extract. Its caches then are those of ``[start, end)`` alone."""
    made = make_prompt_cache(model)
    if len(made) == end - start or len(made) not in (end, total):
        return
    template = made[start:end]

    def make_cache() -> list[Any]:
        return [copy.deepcopy(cache) for cache in template]

    object.__setattr__(model, "make_cache", make_cache)


def _layer_owner(model: nn.Module) -> Any:
    """The module whose ``layers`` list holds the decoder layers: ``model.model`` in most
    architectures, ``backbone`` in the Mamba family, the shallowest one found."""
    inner = getattr(model, "model", None)
    if isinstance(getattr(inner, "layers", None), list):
        return inner
    found: tuple[int, Any] | None = None
    for name, module in model.named_modules():
        layers = module.get("layers") if isinstance(module, dict) else None
        towers = ("vision", "audio", "visual")
        if any(t in name for t in towers) or not isinstance(layers, list) or not layers:
            continue
        if all(isinstance(m, nn.Module) for m in layers):
            depth = name.count(".") if name else -1
            if found is None or depth < found[0]:
                found = (depth, module)
    return found[1] if found else inner


def _skip_head(model: nn.Module, inner: nn.Module) -> None:
    """A rank other than 0 computes no logits: its head gives zeros once the hidden state
    is sent (they keep the send in the graph that generation evaluates). Rank 0 samples
    and the token reaches the others (``core.worker.serve``). The head is the costliest
    step of a token on a CPU (a vocabulary-sized matrix read from memory), and every rank
    computing it at once made them compete for the memory bandwidth."""
    head = getattr(model, "lm_head", None)
    if isinstance(head, nn.Module):
        vocab = int(head.weight.shape[0])
        model.lm_head = _NoLogits(vocab)
    embed = getattr(inner, "embed_tokens", None)
    if embed is not None and hasattr(embed, "as_linear"):
        skipped = _NoLogits(int(embed.weight.shape[0]))
        # Tied models call embed_tokens.as_linear for their logits.
        object.__setattr__(embed, "as_linear", skipped)


class _NoLogits(nn.Module):
    """Zero logits after ``x`` is computed, in place of a head this rank does not run."""

    def __init__(self, vocab: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.vocab = vocab

    def __call__(self, x: mx.array) -> mx.array:
        zeros = mx.zeros((*x.shape[:-1], self.vocab), dtype=mx.float32)
        logits: mx.array = mx.depends(zeros, x)
        return logits


def _wrap_pipeline(inner: nn.Module, group: mx.distributed.Group, start: int, end: int) -> None:
    """Wrap the rank's first and last layers in ``PipelineStage``; every other rank's
    layer becomes an ``AbsentLayer`` (``core.worker.absent``: the list keeps its length,
    so the model's caches, masks and layer indices stay the whole model's)."""
    layers = list(inner.layers)
    rank, size = group.rank(), group.size()
    for i in (start, end - 1):
        if isinstance(layers[i], PipelineStage):
            continue
        layers[i] = PipelineStage(
            layers[i], group, receive=(i == start and rank < size - 1), send=(i == end - 1)
        )
    inner.layers = hold_only(layers, start, end)


class PipelineStage(nn.Module):
    """A decoder layer with the pipeline's receive before it and/or send after it.

    Rank 0 holds the last layers and ends with the model's output; the others end with
    their send (their logits are skipped: ``_skip_head``)."""

    def __init__(
        self, layer: nn.Module, group: mx.distributed.Group, *, receive: bool, send: bool
    ) -> None:
        # mlx leaves Module.__init__ unannotated; untyped_calls_exclude misses super() calls.
        super().__init__()  # type: ignore[no-untyped-call]
        self.layer = layer
        self._group = group
        self._receive = receive
        self._send = send

    def __getattr__(self, key: str) -> Any:
        # Models read flags such as ``use_sliding`` off their layers.
        try:
            return super().__getattr__(key)
        except AttributeError:
            if key == "layer" or "layer" not in self:
                raise
            return getattr(self["layer"], key)

    def __call__(self, x: mx.array, *args: Any, **kwargs: Any) -> mx.array:
        group = self._group
        rank = group.rank()
        if self._receive:
            x = mx.distributed.recv_like(x, rank + 1, group=group)
        h: mx.array = self.layer(x, *args, **kwargs)
        if not self._send:
            return h
        if rank != 0:
            h = mx.distributed.send(h, rank - 1, group=group)
            # Prefill evaluates only the caches: tie the send to them so it runs.
            cache = kwargs.get("cache", args[1] if len(args) > 1 else None)
            _tie(cache, h)
        return h


def _tie(cache: Any, h: mx.array) -> None:
    """Make ``cache``'s state depend on ``h`` (a KV cache's keys, a recurrent layer's
    first state, a cache list's first cache)."""
    if isinstance(cache, CacheList):
        _tie(cache.caches[0], h)
    elif isinstance(cache, ArraysCache):
        if cache[0] is not None:
            cache[0] = mx.depends(cache[0], h)
    elif cache is not None and getattr(cache, "keys", None) is not None:
        cache.keys = mx.depends(cache.keys, h)


def _check_files(path: Path, layers: tuple[int, int] | None) -> None:
    """Fail clearly when a weight file this shard needs is missing.

    Loading is not strict (a pipeline stage may hold only its own files), so
    a missing file would otherwise leave random weights in place silently.
    """
    weight_map = read_weight_map(path)
    if weight_map is None:
        return  # a single-file model: mlx-lm reports a missing file itself
    needed = files_for_layers(weight_map, *layers) if layers else set(weight_map.values())
    missing = sorted(f for f in needed if not (path / f).is_file())
    if missing:
        raise ShardError(
            f"the model folder {path} lacks {', '.join(missing)}, which this node's "
            "share of the model needs; copy the model again"
        )
