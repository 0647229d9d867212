"""A quantized KV cache that batches: what ``--kv-bits 8|4`` runs.

mlx-lm has ``QuantizedKVCache`` (one request's keys and values stored as ``mx.quantize``
gives them: packed integers, scales and biases) and its attention on it (``base.
scaled_dot_product_attention`` takes the quantized path for a cache with ``bits``), but
no batch version: its ``BatchGenerator`` merges per-request caches into a batch cache,
extends and filters that batch as requests join and leave, and extracts one request's
cache when it ends (the prompt cache keeps it). This module is that batch cache:

- ``QuantKV``: mlx-lm's ``QuantizedKVCache`` with the ``merge`` (and ``size``) it lacks,
  the per-request cache a quantized layer gets (``install``).
- ``BatchQuantKV``: a left-padded batch of them, ``BatchKVCache``'s protocol (prepare,
  finalize, filter, extend, extract, merge, trim, make_mask) on the three quantized parts.

Quantization groups run along each head's width, never along the tokens, so every move
along the token axis (padding, merging, extracting, trimming, rolling) is exact: a
request's quantized values are the same bits in a batch as alone. Only full-attention
layers are quantized: sliding-window (rotating) and recurrent caches, layers with
attention sinks (quantized attention has none) and a pipeline rank's absent layers
(zero-width, ``core.worker.absent``) keep mlx-lm's own caches.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx.utils import tree_map
from mlx_lm.models.base import create_causal_mask
from mlx_lm.models.cache import KVCache, QuantizedKVCache, _BaseCache, dynamic_roll

from core.worker import kvbits
from core.worker.absent import AbsentLayer

Parts = tuple[mx.array, mx.array, mx.array]  # packed, scales, biases: (B, H, T, width)


class QuantKV(QuantizedKVCache):
    """One request's quantized cache (mlx-lm's), which a batch can merge."""

    def size(self) -> int:
        return int(self.offset)

    @classmethod
    def merge(cls, caches: list[Any]) -> BatchQuantKV:
        return BatchQuantKV.merge(caches)


class BatchQuantKV(_BaseCache):
    """Left-padded quantized keys and values of a batch, as ``BatchKVCache`` lays out its
    plain ones: ``left_padding`` per row, ``offset`` per row (its tokens), ``_idx`` the
    filled width."""

    step = 256

    def __init__(self, left_padding: list[int], group_size: int = 64, bits: int = 8) -> None:
        self.keys: Parts | None = None
        self.values: Parts | None = None
        self.left_padding = mx.array(left_padding)
        self.offset = mx.array([-n for n in left_padding])
        self._idx = 0
        self._right_padding: mx.array | None = None
        self.group_size, self.bits = group_size, bits

    # -- attention -------------------------------------------------------------------------

    def _zeros(self, like: Parts, batch: int, length: int) -> Parts:
        a, s, b = (mx.zeros((batch, x.shape[1], length, x.shape[3]), dtype=x.dtype) for x in like)
        return a, s, b

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Parts, Parts]:
        qk = mx.quantize(keys, group_size=self.group_size, bits=self.bits)
        qv = mx.quantize(values, group_size=self.group_size, bits=self.bits)
        prev, steps = self._idx, int(keys.shape[2])
        if self.keys is None or self.values is None or prev + steps > self.keys[0].shape[2]:
            width = (self.step + steps - 1) // self.step * self.step
            batch = int(keys.shape[0])
            new_k, new_v = self._zeros(qk, batch, width), self._zeros(qv, batch, width)
            if self.keys is not None and self.values is not None:
                kept = self._slice(self.keys, 0, prev), self._slice(self.values, 0, prev)
                self.keys = _cat(kept[0], new_k)
                self.values = _cat(kept[1], new_v)
            else:
                self.keys, self.values = new_k, new_v
        self.offset = self.offset + steps
        self._idx += steps
        for part, new in zip((*self.keys, *self.values), (*qk, *qv), strict=True):
            part[..., prev : self._idx, :] = new
        return self.keys_and_values()

    @staticmethod
    def _slice(parts: Parts, start: int, end: int) -> Parts:
        a, s, b = (x[..., start:end, :] for x in parts)
        return a, s, b

    def keys_and_values(self) -> tuple[Parts, Parts]:
        assert self.keys is not None and self.values is not None
        return self._slice(self.keys, 0, self._idx), self._slice(self.values, 0, self._idx)

    def make_mask(self, N: int, return_array: bool = False, **kwargs: Any) -> Any:
        return create_causal_mask(N, offset=self._idx, left_padding=self.left_padding, **kwargs)

    # -- a prompt's padding ----------------------------------------------------------------

    def prepare(
        self,
        *,
        left_padding: list[int] | None = None,
        lengths: list[int] | None = None,
        right_padding: list[int] | None = None,
    ) -> None:
        if left_padding is not None:
            if self.keys is not None:
                raise ValueError("Left padding can only be added to an empty batch cache")
            added = mx.array(left_padding)
            self.left_padding = self.left_padding + added
            self.offset = self.offset - added
        if right_padding is not None and max(right_padding) > 0:
            self._right_padding = mx.array(right_padding)

    def finalize(self) -> None:
        """The right padding of prompts read together rolled to the left (BatchKVCache's)."""
        if self._right_padding is None or self.keys is None or self.values is None:
            return
        shift = self._right_padding[:, None]
        self.keys = tree_map(lambda x: dynamic_roll(x, shift, axis=2), self.keys)
        self.values = tree_map(lambda x: dynamic_roll(x, shift, axis=2), self.values)
        self.offset = self.offset - self._right_padding
        self.left_padding = self.left_padding + self._right_padding
        self._right_padding = None

    # -- the batch's rows --------------------------------------------------------------------

    def filter(self, batch_indices: Any) -> None:
        """Keep these rows (in place), then drop the padding columns every row has."""
        if self.keys is not None and self.values is not None:
            self.keys = tree_map(lambda x: x[batch_indices], self.keys)
            self.values = tree_map(lambda x: x[batch_indices], self.values)
        self.offset = self.offset[batch_indices]
        self.left_padding = self.left_padding[batch_indices]
        shared = _int(self.left_padding.min()) if self.left_padding.size else 0
        if shared > 0:
            if self.keys is not None and self.values is not None:
                self.keys = self._slice(self.keys, shared, self.keys[0].shape[2])
                self.values = self._slice(self.values, shared, self.values[0].shape[2])
            self._idx -= shared
            self.left_padding = self.left_padding - shared

    def extend(self, other: BatchQuantKV) -> None:
        """``other``'s rows after these (in place), both right-aligned at the longer fill."""
        like = self if self.keys is not None else other
        if like.keys is None or like.values is None:
            self.left_padding = mx.concatenate([self.left_padding, other.left_padding])
            self.offset = mx.concatenate([self.offset, other.offset])
            return
        fill = max(self._idx, other._idx)
        width = max(c.keys[0].shape[2] for c in (self, other) if c.keys is not None)
        ref_k, ref_v = like.keys, like.values

        def aligned(c: BatchQuantKV) -> tuple[Parts, Parts, mx.array]:
            rows = int(c.offset.shape[0])
            k = c.keys if c.keys is not None else self._zeros(ref_k, rows, 0)
            v = c.values if c.values is not None else self._zeros(ref_v, rows, 0)
            left = fill - c._idx
            right = width - k[0].shape[2] - left
            if right < 0:
                k, v = (
                    self._slice(k, 0, k[0].shape[2] + right),
                    self._slice(v, 0, v[0].shape[2] + right),
                )
                right = 0
            if left or right:
                pad = [(0, 0), (0, 0), (left, right), (0, 0)]
                k = tree_map(lambda x: mx.pad(x, pad), k)
                v = tree_map(lambda x: mx.pad(x, pad), v)
            return k, v, c.left_padding + left

        (k1, v1, p1), (k2, v2, p2) = aligned(self), aligned(other)
        self.keys, self.values = _cat(k1, k2, axis=0), _cat(v1, v2, axis=0)
        self.left_padding = mx.concatenate([p1, p2])
        self.offset = mx.concatenate([self.offset, other.offset])
        self._idx = fill

    def extract(self, idx: int) -> QuantKV:
        """Row ``idx`` alone, without its padding: what that request's own cache holds."""
        cache = QuantKV(group_size=self.group_size, bits=self.bits)
        if self.keys is None or self.values is None:
            return cache
        padding = _int(self.left_padding[idx])
        keys = tree_map(
            lambda x: mx.contiguous(x[idx : idx + 1, :, padding : self._idx]), self.keys
        )
        values = tree_map(
            lambda x: mx.contiguous(x[idx : idx + 1, :, padding : self._idx]), self.values
        )
        cache.keys, cache.values = keys, values
        cache.offset = self._idx - padding
        return cache

    @classmethod
    def merge(cls, caches: list[Any]) -> BatchQuantKV:
        """Per-request ``QuantKV`` caches as one batch, left-padded to the longest."""
        first = caches[0]
        lengths = [int(c.offset) if c.keys is not None else 0 for c in caches]
        longest = max(lengths)
        if longest == 0:
            return cls([0] * len(caches), first.group_size, first.bits)
        held = next(c for c in caches if c.keys is not None)
        padding = [longest - n for n in lengths]
        batch = cls(padding, held.group_size, held.bits)
        keys, values = (
            batch._zeros(held.keys, len(caches), longest),
            batch._zeros(held.values, len(caches), longest),
        )
        for row, (pad, c) in enumerate(zip(padding, caches, strict=True)):
            if c.keys is None:
                continue
            if (c.group_size, c.bits) != (held.group_size, held.bits):
                raise ValueError("the caches of one batch are quantized alike")
            for part, own in zip((*keys, *values), (*c.keys, *c.values), strict=True):
                part[row : row + 1, :, pad : pad + c.offset] = own[..., : c.offset, :]
        batch.keys, batch.values = keys, values
        batch.offset = batch.offset + longest
        batch._idx = longest
        return batch

    # -- the cache protocol ------------------------------------------------------------------

    @property
    def state(self) -> Any:
        return self.keys, self.values, self.offset, self.left_padding, self._idx

    @state.setter
    def state(self, v: Any) -> None:
        self.keys, self.values, self.offset, self.left_padding, self._idx = v

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        n = min(self._idx, n)
        self._idx -= n
        self.offset = self.offset - n
        return n

    def size(self) -> int:
        return self._idx

    def empty(self) -> bool:
        return self.keys is None

    @property
    def nbytes(self) -> int:
        if self.keys is None or self.values is None:
            return 0
        return sum(int(x.nbytes) for x in (*self.keys, *self.values))


def _int(value: mx.array) -> int:
    number = value.item()
    assert isinstance(number, int)
    return number


def _cat(a: Parts, b: Parts, axis: int = 2) -> Parts:
    x, y, z = (mx.concatenate([p, q], axis=axis) for p, q in zip(a, b, strict=True))
    return x, y, z


def quantizable(layer: Any) -> bool:
    """A layer whose plain KV cache may be quantized: held here, no attention sinks."""
    if isinstance(layer, AbsentLayer):
        return False
    attention = getattr(layer, "self_attn", None) or getattr(layer, "attention", None)
    return getattr(attention, "sinks", None) is None


def install(model: Any, bits: int, group_size: int, config: dict[str, Any]) -> int:
    """Make ``model``'s caches (mlx-lm's ``make_prompt_cache`` asks ``model.make_cache``)
    quantized where a layer's cache is a plain ``KVCache``: ``QuantKV`` alone, merged into
    ``BatchQuantKV`` by the batching ranks. Returns how many layers are quantized (0 at 16
    bits). ValueError, saying why, when the heads' width does not split into groups."""
    kvbits.check(bits, group_size)
    if bits == kvbits.NONE:
        return 0
    width = kvbits.head_dim(config)
    if width is not None and width % group_size:
        fitting = ", ".join(str(g) for g in kvbits.GROUP_SIZES if width % g == 0) or "none"
        raise ValueError(
            f"this model's attention heads are {width} wide, which --kv-group-size "
            f"{group_size} does not divide: choose {fitting}"
        )
    own = getattr(model, "make_cache", None)
    layers = list(getattr(model, "layers", []))
    quantized = [
        i
        for i, c in enumerate(own() if own is not None else [KVCache() for _ in layers])
        if type(c) is KVCache and (len(layers) <= i or quantizable(layers[i]))
    ]
    absent = any(isinstance(layer, AbsentLayer) for layer in layers)
    if absent and own is not None and len(own()) != len(layers):
        return 0  # no way to tell which layer a cache is: leave them all

    def make_cache() -> list[Any]:
        caches = own() if own is not None else [KVCache() for _ in layers]
        for i in quantized:
            caches[i] = QuantKV(group_size=group_size, bits=bits)
        return caches

    object.__setattr__(model, "make_cache", make_cache)
    return len(quantized)
