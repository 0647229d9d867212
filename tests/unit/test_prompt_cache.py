"""The ranks' prompt cache (``core.worker.promptcache``): the longest cached prefix, a
trimmed copy (the kept entry stays whole), entries a longer one extends dropped, and the
least recently used evicted once the tokens exceed the bound."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from core.worker.promptcache import IDLE_AFTER, PromptCache, kv_bytes_per_token


def _caches(tokens: int, layers: int = 2) -> list[KVCache]:
    made = []
    for _ in range(layers):
        cache = KVCache()
        cache.update_and_fetch(mx.ones((1, 2, tokens, 4)), mx.ones((1, 2, tokens, 4)))
        made.append(cache)
    return made


def test_the_longest_prefix_is_reused_trimmed_and_at_least_one_token_is_left() -> None:
    cache = PromptCache(max_tokens=100)
    cache.store([1, 2, 3, 4, 5], _caches(5))
    cache.store([9, 9, 9], _caches(3))
    n, copied = cache.fetch([1, 2, 3, 7, 8])
    assert n == 3 and copied is not None and all(c.offset == 3 for c in copied)
    n, again = cache.fetch([1, 2, 3, 4, 5, 6])
    assert n == 5 and again is not None and again[0].offset == 5  # the entry is whole
    assert cache.fetch([1, 2, 3, 4, 5])[0] == 4  # the last token is always computed
    assert cache.fetch([5, 1]) == (0, None)


def test_an_entry_extended_by_a_longer_one_goes_and_the_bound_evicts_the_oldest() -> None:
    cache = PromptCache(max_tokens=10)
    cache.store([1, 2, 3], _caches(3))
    cache.store([1, 2, 3, 4, 5], _caches(5))  # the next turn: holds the first's tokens
    assert len(cache) == 1 and cache.tokens == 5
    cache.store([7, 7, 7, 7], _caches(4))
    cache.fetch([1, 2, 3, 4, 5, 6])  # used: the newest now
    cache.store([8, 8, 8], _caches(3))  # 12 tokens > 10: the least recently used goes
    assert cache.tokens <= 10
    assert cache.fetch([7, 7, 7, 7, 1])[0] == 0
    assert cache.fetch([1, 2, 3, 4, 5, 6])[0] == 5
    cache.store(list(range(20)), _caches(20))  # larger than the whole bound: not kept
    assert cache.fetch(list(range(21)))[0] == 0


def test_the_bound_is_the_whole_models_kv_bytes_per_token_the_same_on_every_rank() -> None:
    config = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3}
    config["hidden_size"] = 576
    assert kv_bytes_per_token(config) == 2 * 30 * 3 * 64 * 4
    assert kv_bytes_per_token(config, layers=12) == 2 * 12 * 3 * 64 * 4  # a pipeline rank's


def test_a_tenant_never_reuses_another_tenants_entries() -> None:
    cache = PromptCache(max_tokens=100)
    cache.store([1, 2, 3, 4, 5], _caches(5), tenant="key_a")
    assert cache.fetch([1, 2, 3, 4, 5, 6], tenant="key_b") == (0, None)
    assert cache.fetch([1, 2, 3, 4, 5, 6])[0] == 0  # nor the common entries (the window)
    assert cache.fetch([1, 2, 3, 4, 5, 6], tenant="key_a")[0] == 5
    cache.store([1, 2, 3, 4, 5, 6, 7], _caches(7), tenant="key_b")
    assert cache.fetch([1, 2, 3, 4, 5, 6, 7, 8], tenant="key_a")[0] == 5  # a's own, whole


def test_a_tenant_evicts_only_its_own_entries_within_its_share() -> None:
    cache = PromptCache(max_tokens=40, shares=4)  # 10 tokens a tenant
    cache.store([1] * 8, _caches(8), tenant="key_a")
    for n in range(2, 30):  # b fills and refills its share over and over
        cache.store([n] * 9, _caches(9), tenant="key_b")
    assert cache.fetch([1] * 9, tenant="key_a")[0] == 8
    cache.store(list(range(11)), _caches(11), tenant="key_b")  # above its share: not kept
    assert cache.fetch([*range(11), 99], tenant="key_b")[0] == 0
    assert cache.tokens <= 40


def test_a_newcomer_beyond_the_shares_waits_for_an_idle_share_and_never_evicts_a_busy_one() -> None:
    cache = PromptCache(max_tokens=40, shares=2)
    cache.store([1, 1, 1], _caches(3), tenant="a")
    cache.store([2, 2, 2], _caches(3), tenant="b")
    cache.fetch([3, 3, 3, 3], tenant="c")
    cache.store([3, 3, 3], _caches(3), tenant="c")  # no share free: not kept
    assert cache.fetch([3, 3, 3, 3], tenant="c")[0] == 0
    assert cache.fetch([1, 1, 1, 1], tenant="a")[0] == 3
    for _ in range(IDLE_AFTER):  # b is idle for that many requests; a stays busy
        cache.fetch([1, 1, 1, 1], tenant="a")
    cache.store([3, 3, 3], _caches(3), tenant="c")  # b's idle share goes to c
    assert cache.fetch([3, 3, 3, 3], tenant="c")[0] == 3
    assert cache.fetch([1, 1, 1, 1], tenant="a")[0] == 3
    assert cache.fetch([2, 2, 2, 2], tenant="b")[0] == 0


def test_the_common_entries_hold_what_the_tenants_shares_leave() -> None:
    cache = PromptCache(max_tokens=40, shares=4)
    cache.store(list(range(35)), _caches(35))  # alone, the common entries have it all
    assert cache.fetch([*range(35), 99])[0] == 35
    cache.store([7, 7], _caches(2), tenant="key_a")  # a share claimed: 30 left in common
    assert cache.fetch([*range(35), 99])[0] == 0 and cache.tokens <= 40
