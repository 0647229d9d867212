"""Conversations' KV caches kept between requests, so a request whose tokens extend a
cached prefix prefills only what is new (the next turn of a chat, a shared system prompt).

Every rank keeps its own layers' caches of the same token sequences, and every rank must
reuse the same prefix for a request, or their model calls would differ in shape and their
collectives fall out of step. So the decisions depend only on what every rank sees alike:
the token ids and the order of requests. The bound is counted in tokens (the setting in
bytes divided by the whole model's KV bytes per token), not in each rank's bytes (a
pipeline rank holds fewer layers than another), so every rank evicts the same entries;
each rank's own bytes stay under the bound.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

DEFAULT_BYTES = 256 << 20  # the worker's --prompt-cache-mb default (protocol's)


class PromptCache:
    """Least recently used token sequences and their KV caches, at most ``max_tokens``
    tokens in all."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max(0, max_tokens)
        self._entries: OrderedDict[tuple[int, ...], list[Any]] = OrderedDict()
        self._tokens = 0

    @property
    def tokens(self) -> int:
        return self._tokens

    def __len__(self) -> int:
        return len(self._entries)

    def fetch(self, ids: list[int]) -> tuple[int, list[Any] | None]:
        """The longest cached prefix of ``ids`` (leaving at least one token to compute):
        how many tokens it covers and a copy of its caches trimmed to them, or (0, None)."""
        best, best_key = 0, None
        for key in self._entries:
            shared = _common(key, ids)
            if shared > best:
                best, best_key = shared, key
        best = min(best, len(ids) - 1)
        if best_key is None or best <= 0:
            return 0, None
        caches = self._entries[best_key]
        if best < len(best_key) and not can_trim_prompt_cache(caches):
            return 0, None
        self._entries.move_to_end(best_key)
        copied = copy.deepcopy(caches)
        if best < len(best_key):
            trim_prompt_cache(copied, len(best_key) - best)
        return best, copied

    def store(self, tokens: list[int], caches: list[Any]) -> None:
        """Keep ``caches`` (holding ``tokens``); entries it extends go (their tokens are in
        it), then the least recently used until the bound holds."""
        key = tuple(tokens)
        if not key or len(key) > self.max_tokens:
            return
        for old in [k for k in self._entries if len(k) <= len(key) and key[: len(k)] == k]:
            self._drop(old)
        self._entries[key] = caches
        self._tokens += len(key)
        while self._tokens > self.max_tokens:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: tuple[int, ...]) -> None:
        del self._entries[key]
        self._tokens -= len(key)


def _common(a: tuple[int, ...], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def kv_bytes_per_token(config: dict[str, Any], dtype_bytes: int = 4) -> int:
    """The whole model's KV cache bytes per token (keys and values, every layer), from its
    config: the same figure on every rank, whatever its share."""
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    layers = int(text.get("num_hidden_layers") or 1)
    heads = int(text.get("num_attention_heads") or 1)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    hidden = int(text.get("hidden_size") or 0)
    head_dim = int(text.get("head_dim") or (hidden // heads if heads else 0) or 1)
    return max(1, 2 * layers * kv_heads * head_dim * dtype_bytes)
