"""Conversations' KV caches kept between requests, so a request whose tokens extend a
cached prefix prefills only what is new (the next turn of a chat, a shared system prompt).

Every rank keeps its own layers' caches of the same token sequences, and every rank must
reuse the same prefix for a request, or their model calls would differ in shape and their
collectives fall out of step. So the decisions depend only on what every rank sees alike:
the token ids and the order of requests. The bound is counted in tokens (the setting in
bytes divided by the whole model's KV bytes per token), not in each rank's bytes (a
pipeline rank holds fewer layers than another), so every rank evicts the same entries;
each rank's own bytes stay under the bound.

Tenants: a request may name one (the API sends its key's id; ``core.serve``). A tenant's
entries are its own: another tenant's request never reuses, measures or evicts them (no
``cached_tokens`` and no time to first token across tenants). Each named tenant may hold
at most ``max_tokens // shares`` tokens, and at most ``shares`` tenants hold entries at
once; a newcomer beyond that takes the share of a tenant idle for ``IDLE_AFTER`` requests,
else its answers are not kept. Requests that name none (the window's chat, or every
request with ``--shared-prompt-cache``) share the common entries, which hold what the
named shares leave. Every decision depends on the commands' order alone (identical on
every rank).
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

DEFAULT_BYTES = 256 << 20  # the worker's --prompt-cache-mb default (protocol's)
SHARES = 4  # named tenants holding entries at once, each at most max_tokens // SHARES
IDLE_AFTER = 64  # requests after which an idle tenant's share may go to a newcomer


class _Entries:
    """One tenant's least recently used token sequences and their KV caches."""

    def __init__(self) -> None:
        self.entries: OrderedDict[tuple[int, ...], list[Any]] = OrderedDict()
        self.tokens = 0
        self.used = 0  # the request count at its last use

    def drop(self, key: tuple[int, ...]) -> None:
        del self.entries[key]
        self.tokens -= len(key)

    def trim(self, bound: int) -> None:
        while self.tokens > bound:
            self.drop(next(iter(self.entries)))


class PromptCache:
    """Least recently used token sequences and their KV caches, at most ``max_tokens``
    tokens in all, partitioned by tenant (the module's doc)."""

    def __init__(self, max_tokens: int, shares: int = SHARES) -> None:
        self.max_tokens = max(0, max_tokens)
        self.share = self.max_tokens // max(1, shares)
        self.shares = max(1, shares)
        self._common = _Entries()
        self._tenants: dict[str, _Entries] = {}
        self._requests = 0

    @property
    def tokens(self) -> int:
        return self._common.tokens + sum(t.tokens for t in self._tenants.values())

    def __len__(self) -> int:
        return len(self._common.entries) + sum(len(t.entries) for t in self._tenants.values())

    def _bound(self, tenant: str | None) -> int:
        if tenant is None:
            return self.max_tokens - self.share * len(self._tenants)
        return self.share

    def _own(self, tenant: str | None, claim: bool) -> _Entries | None:
        """The tenant's entries; with ``claim``, a share taken for a newcomer when one is
        free or idle (else None: its answers are not kept)."""
        if tenant is None:
            return self._common
        own = self._tenants.get(tenant)
        if own is not None or not claim:
            return own
        if len(self._tenants) >= self.shares:
            idle = [n for n, t in self._tenants.items() if t.used <= self._requests - IDLE_AFTER]
            if not idle:
                return None
            del self._tenants[min(idle, key=lambda n: self._tenants[n].used)]
        own = self._tenants[tenant] = _Entries()
        self._common.trim(self._bound(None))
        return own

    def fetch(self, ids: list[int], tenant: str | None = None) -> tuple[int, list[Any] | None]:
        """The longest prefix of ``ids`` that ``tenant`` has cached (leaving at least one
        token to compute): how many tokens it covers and a copy of its caches trimmed to
        them, or (0, None). Called once per request, in the commands' order."""
        self._requests += 1
        own = self._own(tenant, claim=False)
        if own is None:
            return 0, None
        own.used = self._requests
        best, best_key = 0, None
        for key in own.entries:
            shared = _common(key, ids)
            if shared > best:
                best, best_key = shared, key
        best = min(best, len(ids) - 1)
        if best_key is None or best <= 0:
            return 0, None
        caches = own.entries[best_key]
        if best < len(best_key) and not can_trim_prompt_cache(caches):
            return 0, None
        own.entries.move_to_end(best_key)
        copied = copy.deepcopy(caches)
        if best < len(best_key):
            trim_prompt_cache(copied, len(best_key) - best)
        return best, copied

    def store(self, tokens: list[int], caches: list[Any], tenant: str | None = None) -> None:
        """Keep ``caches`` (holding ``tokens``) among ``tenant``'s entries; entries it
        extends go (their tokens are in it), then its least recently used until its bound
        holds. Nothing of another tenant moves."""
        key = tuple(tokens)
        if not key or len(key) > self._bound(tenant):
            return
        own = self._own(tenant, claim=True)
        if own is None or len(key) > self._bound(tenant):
            return
        own.used = self._requests
        for old in [k for k in own.entries if len(k) <= len(key) and key[: len(k)] == k]:
            own.drop(old)
        own.entries[key] = caches
        own.tokens += len(key)
        own.trim(self._bound(tenant))


def _common(a: tuple[int, ...], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def kv_bytes_per_token(
    config: dict[str, Any], dtype_bytes: int = 4, layers: int | None = None
) -> int:
    """The whole model's KV cache bytes per token (keys and values, every layer), from its
    config: the same figure on every rank, whatever its share; of ``layers`` of them only
    when given (a pipeline rank's)."""
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    if layers is None:
        layers = int(text.get("num_hidden_layers") or 1)
    heads = int(text.get("num_attention_heads") or 1)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    hidden = int(text.get("hidden_size") or 0)
    head_dim = int(text.get("head_dim") or (hidden // heads if heads else 0) or 1)
    return max(1, 2 * layers * kv_heads * head_dim * dtype_bytes)
