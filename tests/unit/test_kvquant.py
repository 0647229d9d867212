"""The batched quantized KV cache (``core.worker.kvquant``) against mlx-lm's per-request
``QuantizedKVCache``: the same keys and values give the same quantized bits, through
merge, prefill padding, steps, filter, extend, extract and trim; its attention gives each
row what that request alone gets; and a model served by ``BatchGenerator`` with it
answers what mlx-lm's own ``--kv-bits`` generation answers."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm.generate import BatchGenerator, generate_step
from mlx_lm.models.base import scaled_dot_product_attention
from mlx_lm.models.cache import (
    KVCache,
    QuantizedKVCache,
    can_trim_prompt_cache,
    make_prompt_cache,
    trim_prompt_cache,
)
from mlx_lm.utils import load

from core.worker import kvbits
from core.worker.absent import hold_only
from core.worker.kvquant import BatchQuantKV, QuantKV, install
from tests.helpers.tiny_models import make_tiny_model

H, D = 2, 64


def _kv(length: int, seed: int) -> tuple[mx.array, mx.array]:
    key = mx.random.key(seed)
    a, b = mx.random.split(key)
    return mx.random.normal((1, H, length, D), key=a), mx.random.normal((1, H, length, D), key=b)


def _same(cache: Any, reference: QuantizedKVCache) -> None:
    """``cache`` holds exactly the quantized keys and values ``reference`` holds."""
    assert cache.offset == reference.offset
    ours, theirs = cache.keys_and_values(), reference.keys_and_values()
    for mine, own in zip((*ours[0], *ours[1]), (*theirs[0], *theirs[1]), strict=True):
        assert mine.shape == own.shape
        assert mx.array_equal(mine, own).item()


def _pair(lengths: list[int], bits: int = 8, seed: int = 0) -> tuple[list[Any], list[Any]]:
    refs = [QuantizedKVCache(group_size=64, bits=bits) for _ in lengths]
    ours = [QuantKV(group_size=64, bits=bits) for _ in lengths]
    for i, (n, ref, own) in enumerate(zip(lengths, refs, ours, strict=True)):
        k, v = _kv(n, seed + i)
        ref.update_and_fetch(k, v)
        own.update_and_fetch(k, v)
    return refs, ours


def _step(batch: BatchQuantKV, refs: list[Any], seed: int, rows: list[int] | None = None) -> None:
    """One token for every row: the batch and each row's reference alike."""
    rows = rows if rows is not None else list(range(len(refs)))
    steps = [_kv(1, seed + 100 * r) for r in rows]
    batch.update_and_fetch(
        mx.concatenate([k for k, _ in steps]), mx.concatenate([v for _, v in steps])
    )
    for r, (k, v) in zip(rows, steps, strict=True):
        refs[r].update_and_fetch(k, v)


@pytest.mark.parametrize("bits", [8, 4])
def test_merge_steps_and_extract_keep_each_requests_bits(bits: int) -> None:
    refs, ours = _pair([3, 300, 1], bits)
    batch = QuantKV.merge(ours)
    assert isinstance(batch, BatchQuantKV) and batch.bits == bits
    assert batch.left_padding.tolist() == [297, 0, 299]
    for s in range(3):
        _step(batch, refs, seed=10 + s)
    mx.eval(batch.state)
    for row, ref in enumerate(refs):
        _same(batch.extract(row), ref)


def test_a_prompt_read_with_right_padding_is_rolled_into_place() -> None:
    """``BatchGenerator`` reads prompts of different lengths together, right-padded, then
    ``finalize`` rolls them: each row then holds what its request alone holds."""
    batch = QuantKV.merge([QuantKV(), QuantKV()])
    refs = [QuantizedKVCache(), QuantizedKVCache()]
    lengths = [5, 2]
    batch.prepare(lengths=lengths, right_padding=[0, 3])
    parts = [_kv(n, 7 + i) for i, n in enumerate(lengths)]
    for ref, (k, v) in zip(refs, parts, strict=True):
        ref.update_and_fetch(k, v)
    padded = [
        (
            mx.pad(k, [(0, 0), (0, 0), (0, 5 - k.shape[2]), (0, 0)]),
            mx.pad(v, [(0, 0), (0, 0), (0, 5 - v.shape[2]), (0, 0)]),
        )
        for k, v in parts
    ]
    batch.update_and_fetch(
        mx.concatenate([k for k, _ in padded]), mx.concatenate([v for _, v in padded])
    )
    batch.finalize()
    assert batch.left_padding.tolist() == [0, 3] and batch.offset.tolist() == [5, 2]
    _step(batch, refs, seed=3)
    for row, ref in enumerate(refs):
        _same(batch.extract(row), ref)


def test_filter_extend_trim_and_the_prompt_caches_copy() -> None:
    refs, ours = _pair([4, 9, 2])
    batch = QuantKV.merge(ours)
    _step(batch, refs, seed=1)
    batch.filter([0, 2])  # the longest leaves: the shared padding goes
    assert batch.left_padding.tolist() == [0, 2]
    more_refs, more = _pair([12], seed=40)
    batch.extend(QuantKV.merge(more))
    refs = [refs[0], refs[2], more_refs[0]]
    _step(batch, refs, seed=2)
    mx.eval(batch.state)
    extracted = [batch.extract(r) for r in range(3)]
    for cache, ref in zip(extracted, refs, strict=True):
        _same(cache, ref)
    kept = copy.deepcopy([extracted[2]])  # the prompt cache's fetch: a copy, trimmed
    assert can_trim_prompt_cache(kept)
    trim_prompt_cache(kept, 4)
    ref_k, ref_v = refs[2].keys_and_values()
    assert kept[0].offset == refs[2].offset - 4
    again = QuantKV.merge([kept[0]])  # and merged back in for the next turn
    k, v = again.keys_and_values()
    assert mx.array_equal(k[0], ref_k[0][..., :-4, :]).item()
    assert mx.array_equal(v[2], ref_v[2][..., :-4, :]).item()
    assert batch.trim(1) == 1 and batch.size() == extracted[2].offset - 1


def test_extend_an_empty_batch_and_merge_empties() -> None:
    empty = QuantKV.merge([QuantKV(), QuantKV()])
    assert empty.empty() and empty.nbytes == 0
    refs, ours = _pair([6])
    empty.extend(QuantKV.merge(ours))
    assert empty.keys is not None and empty.offset.tolist() == [0, 0, 6]
    _same(empty.extract(2), refs[0])


def test_the_batchs_attention_is_each_requests_alone() -> None:
    refs, ours = _pair([3, 8])
    batch = QuantKV.merge(ours)
    # 4 query heads, 2 KV heads; mlx-lm scales the queries in place: each call a copy
    q = mx.random.normal((2, 4, 1, D), key=mx.random.key(5))
    mask = batch.make_mask(1, return_array=True)
    _step(batch, refs, seed=9)
    k, v = batch.keys_and_values()
    out = scaled_dot_product_attention(q * 1, k, v, batch, scale=0.125, mask=mask)
    for row, ref in enumerate(refs):
        rk, rv = ref.keys_and_values()
        alone = scaled_dot_product_attention(
            q[row : row + 1] * 1, rk, rv, ref, scale=0.125, mask=None
        )
        assert mx.allclose(out[row : row + 1], alone, atol=1e-5).item()


def test_bytes_per_token_are_the_documented_fraction() -> None:
    _, ours = _pair([256])
    plain = KVCache()
    plain.update_and_fetch(*_kv(256, 0))
    measured = ours[0].nbytes / plain.nbytes
    assert measured == pytest.approx(kvbits.element_bytes(8, 64, 4) / 4)
    assert kvbits.scaled(1000, 4, 64, 2) == 281
    with pytest.raises(ValueError, match="must be 16"):
        kvbits.check(3, 64)


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama whose heads are 64 wide (a group of 64 fits them)."""
    return make_tiny_model(
        tmp_path_factory.mktemp("kv") / "llama", head_dim=64, hidden=128, heads=2, kv_heads=1
    )


def _alone(model: Any, prompt: list[int], n: int) -> list[int]:
    """mlx-lm's own generation with its ``--kv-bits 8`` quantized cache."""
    cache = [KVCache() for _ in model.layers]  # quantized by generate_step (kv_bits)
    steps = generate_step(
        mx.array(prompt),
        model,
        max_tokens=n,
        prompt_cache=cache,
        kv_bits=8,
        kv_group_size=64,
        quantized_kv_start=0,
    )
    return [int(t) for t, _ in steps]


def test_a_batch_of_requests_answers_what_each_alone_answers(wide_model: Path) -> None:
    model, _ = load(str(wide_model))
    prompts = [[5, 9, 13, 40, 41, 42, 7], [100, 3], [8, 8, 9, 10, 11]]
    expected = [_alone(model, p, 12) for p in prompts]
    config = {"hidden_size": 128, "num_attention_heads": 2, "head_dim": 64}
    assert install(model, 8, 64, config) == len(model.layers)
    assert all(isinstance(c, QuantKV) for c in make_prompt_cache(model))
    generator = BatchGenerator(model, completion_batch_size=3, prefill_batch_size=3)
    uids = generator.insert(prompts, max_tokens=[12] * 3)
    got: dict[int, list[int]] = {u: [] for u in uids}
    kept: dict[int, Any] = {}
    while len(kept) < 3:
        _, responses = generator.next()
        for r in responses:
            got[r.uid].append(int(r.token))
            if r.finish_reason is not None:
                kept[r.uid] = r.prompt_cache
    assert [got[u] for u in uids] == expected
    assert all(isinstance(c, QuantKV) for c in kept[uids[0]])
    # The next turn from the kept cache (the prompt cache's path) answers as from scratch.
    whole = prompts[0] + expected[0] + [17, 18]
    (uid,) = generator.insert(
        [[17, 18]], max_tokens=[6], caches=[kept[uids[0]]], all_tokens=[prompts[0] + expected[0]]
    )
    tokens: list[int] = []
    while len(tokens) < 6:
        _, responses = generator.next()
        tokens += [int(r.token) for r in responses if r.uid == uid]
    assert tokens == _alone(model, whole, 6)


def test_only_held_full_attention_layers_are_quantized(wide_model: Path) -> None:
    model, _ = load(str(wide_model))
    model.model.layers = hold_only(model.model.layers, 2, 4)
    config = {"head_dim": 64}
    assert install(model, 4, 64, config) == 2
    kinds = [type(c) for c in make_prompt_cache(model)]
    assert kinds == [KVCache, KVCache, QuantKV, QuantKV]
    assert install(model, 16, 64, config) == 0
    with pytest.raises(ValueError, match="does not divide"):
        install(model, 8, 128, {"head_dim": 96})
