"""A pipeline rank's absent layers keep caches of every type in step at zero width, so
every batch operation mlx-lm's BatchGenerator and the prompt cache run on them works
(issue 39: BatchRotatingKVCache.extract failed on an empty cache)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm.models.cache import (
    ArraysCache,
    CacheList,
    ChunkedKVCache,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    can_trim_prompt_cache,
    trim_prompt_cache,
)

from core.worker.absent import AbsentLayer, hold_only, keep_in_step

BATCHED: dict[str, Callable[[], Any]] = {
    "KVCache": KVCache,
    "RotatingKVCache": lambda: RotatingKVCache(max_size=4),
    "ArraysCache": lambda: ArraysCache(2),
    "CacheList": lambda: CacheList(ArraysCache(2), KVCache()),
    "CacheList of KV (MLA + indexer)": lambda: CacheList(KVCache(), KVCache()),
}


def _offset(cache: Any) -> Any:
    inner = cache.caches[-1] if isinstance(cache, CacheList) else cache
    offset = getattr(inner, "offset", None)
    return offset.tolist() if isinstance(offset, mx.array) else offset


@pytest.mark.parametrize("kind", list(BATCHED))
def test_merge_step_extract_filter_extend_trim_and_copy(kind: str) -> None:
    make = BATCHED[kind]
    singles = [make(), make()]
    for cache, length in zip(singles, (3, 5), strict=True):
        keep_in_step(cache, mx.zeros((1, length, 8)))
    batch = type(singles[0]).merge(singles)
    batch.prepare(lengths=[1, 1], right_padding=[0, 0]) if hasattr(batch, "prepare") else None
    keep_in_step(batch, mx.zeros((2, 1, 8)))
    if hasattr(batch, "finalize"):
        batch.finalize()
    keep_in_step(batch, mx.zeros((2, 1, 8)))
    mx.eval([batch.state])
    first = batch.extract(0)
    second = batch.extract(1)
    if not isinstance(first, ArraysCache):
        assert _offset(first) == 5 and _offset(second) == 7
    kept = copy.deepcopy([second])
    if can_trim_prompt_cache(kept):
        trim_prompt_cache(kept, 2)
        assert _offset(kept[0]) == 5
    other = type(singles[0]).merge([make()])
    batch.filter([1])
    batch.extend(other)
    keep_in_step(batch, mx.zeros((2, 1, 8)))
    mx.eval([batch.state])
    batch.extract(1)


def test_a_rotating_cache_past_its_window_gives_the_real_masks() -> None:
    real, absent = RotatingKVCache(max_size=4), RotatingKVCache(max_size=4)
    for length in (6, 1, 1):
        keys = mx.random.normal((1, 2, length, 8))
        real.update_and_fetch(keys, keys)
        keep_in_step(absent, mx.zeros((1, length, 8)))
        for n in (1, 3):
            ours, theirs = absent.make_mask(n, window_size=4), real.make_mask(n, window_size=4)
            if isinstance(ours, mx.array) or isinstance(theirs, mx.array):
                assert mx.array_equal(mx.array(ours), mx.array(theirs))
            else:
                assert ours == theirs
    assert absent.offset == real.offset == 8


def test_quantized_and_chunked_caches_move_their_offset() -> None:
    quantized, chunked = QuantizedKVCache(), ChunkedKVCache(chunk_size=4)
    for cache in (quantized, chunked):
        keep_in_step(cache, mx.zeros((1, 3, 8)))
        assert cache.offset == 3


def test_an_absent_layer_keeps_the_flags_passes_x_through_and_holds_no_weight() -> None:
    import mlx.nn as nn

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)
            self.self_attn = nn.Linear(8, 8)
            self.self_attn.is_local = True
            self.use_sliding = True
            self.block_type = "M"

    layers = hold_only([Layer(), Layer(), Layer()], 1, 2)
    absent = layers[0]
    assert isinstance(absent, AbsentLayer) and isinstance(layers[1], Layer)
    assert (absent.use_sliding, absent.block_type) == (True, "M")
    assert absent.self_attn.is_local is True  # a sub-module's flag (exaone4's make_cache)
    assert not dict(absent.parameters())
    x, cache = mx.ones((1, 2, 8)), KVCache()
    assert absent(x, None, cache) is x
    assert cache.offset == 2
    layers[2](x, mask=None, cache=cache)
    assert cache.offset == 4
