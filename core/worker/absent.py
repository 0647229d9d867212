"""The layers a pipeline rank does not hold, kept in its layer list as placeholders.

A pipeline rank runs only its own layers, but the model around them (mlx-lm's code for
each architecture) is written for the whole list: it makes one cache per layer of the
type that layer needs (``make_cache`` from ``layer_types``, a sliding-window pattern,
each layer's flags), takes its attention masks from ``cache[i]`` for a layer index found
at init, and counts ``i % pattern`` over the list. Cutting the list to the rank's own
layers shifts all of that (a Gemma 3 rank whose layers start at 31 gave its global layers
the sliding mask), and leaving the other layers' caches empty broke every batch
operation that reads them (``BatchRotatingKVCache.extract`` on a gpt-oss pipeline,
issue 39).

So the list keeps its length: each layer another rank holds becomes an ``AbsentLayer``,
which carries the original layer's plain flags (``use_sliding``, ``is_linear``,
``block_type``...), holds no weight, and passes the hidden state through. Its cache is the
type the whole model gives that layer, and the placeholder keeps it *in step with no
data*: each call appends the step's tokens at zero width (keys and values of head size
0; a recurrent layer's states of width 0). The cache's offset, left padding, rotation
and lengths move as a real layer's would, so a mask made from it is the real one, and
every batch operation (merge, extend, filter, extract, trim, prepare, finalize, the
prompt cache's copy, trim and store) works on it as on any cache, for every cache type,
batched or not, without a patch to any of them. It costs a few tiny array operations a
layer a step and no memory.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import ArraysCache, CacheList, QuantizedKVCache, _BaseCache

_FLAG_TYPES = (bool, int, float, str)


class AbsentLayer(nn.Module):
    """A layer another pipeline rank holds: the hidden state through unchanged, its cache
    kept in step at zero width."""

    def __init__(self, layer: nn.Module | None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        if layer is not None:
            _copy_flags(layer, self)

    def __call__(self, x: mx.array, *args: Any, **kwargs: Any) -> mx.array:
        caches = [a for a in (*args, *kwargs.values()) if isinstance(a, _BaseCache)]
        for cache in caches:
            keep_in_step(cache, x)
        return x


class _Flags:
    """A sub-module's plain flags, without its weights (``layer.self_attn.is_local``)."""


def _copy_flags(source: nn.Module, target: object, depth: int = 2) -> None:
    """``source``'s plain attributes onto ``target``, and its sub-modules' as ``_Flags``
    (``depth`` levels down): what a model's code reads off a layer it does not run."""
    for key, value in vars(source).items():
        if not key.startswith("_") and isinstance(value, _FLAG_TYPES):
            object.__setattr__(target, key, value)
    if depth <= 0:
        return
    for key, value in source.items():
        if isinstance(value, nn.Module) and not key.startswith("_"):
            flags = _Flags()
            _copy_flags(value, flags, depth - 1)
            object.__setattr__(target, key, flags)


def keep_in_step(cache: Any, x: mx.array) -> None:
    """Advance ``cache`` by ``x``'s tokens (batch, length, ...) with zero-width data."""
    if isinstance(cache, CacheList):
        for inner in cache.caches:
            keep_in_step(inner, x)
        return
    batch, length = int(x.shape[0]), int(x.shape[1])
    if isinstance(cache, ArraysCache):
        # A recurrent layer's states: each slot of width 0 (the lengths and left
        # padding that its masks read are set by the batch's prepare and finalize).
        for slot, value in enumerate(cache.cache):
            if value is None:
                cache[slot] = mx.zeros((batch, 0), dtype=x.dtype)
        return
    if isinstance(cache, QuantizedKVCache):
        # Quantizing needs whole groups: its offset alone (it never batches).
        cache.offset += length
        return
    if hasattr(cache, "update_and_fetch"):
        empty = mx.zeros((batch, 1, length, 0), dtype=x.dtype)
        cache.update_and_fetch(empty, empty)


def hold_only(layers: list[Any], start: int, end: int) -> list[Any]:
    """``layers`` with every one outside ``[start, end)`` an ``AbsentLayer``."""
    return [
        layer if start <= i < end else AbsentLayer(layer if isinstance(layer, nn.Module) else None)
        for i, layer in enumerate(layers)
    ]
