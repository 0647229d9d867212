"""The memory a long prompt's join takes, held while the prompt is read
(``core.worker.joinmemory``): its size, its growth a step at a time, and the malloc
settings that keep it in the process for the join to reuse."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.worker import joinmemory
from core.worker.batching import _rank_token_bytes
from core.worker.joinmemory import MAX_BYTES, MIB, PIECE_BYTES, SLICE_BYTES, JoinReserve
from core.worker.sharding import Shard
from core.worker.vocab import Strategy

DEMO = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3}
DEMO_TOKEN_BYTES = 2 * 30 * 3 * 64 * 4  # keys and values, float32, every layer


def test_a_context_sized_prompt_beside_one_stream_takes_three_padded_rows() -> None:
    # One row padded to the newcomer's 7,576 tokens (30 KV steps of 256), then both rows.
    assert joinmemory.join_bytes(1, 7576, 23_040) == 3 * 7680 * 23_040


def test_the_first_row_pads_nothing_and_nonsense_takes_nothing() -> None:
    assert joinmemory.join_bytes(0, 100, 1000) == 256 * 1000
    assert joinmemory.join_bytes(1, 0, 1000) == 0
    assert joinmemory.join_bytes(-1, 100, 1000) == 0
    assert joinmemory.join_bytes(1, 100, 0) == 0


@given(
    rows=st.integers(0, 64),
    longest=st.integers(1, 1 << 20),
    per_token=st.integers(1, 1 << 20),
)
def test_the_join_never_asks_more_than_the_ceiling_and_grows_with_its_rows(
    rows: int, longest: int, per_token: int
) -> None:
    size = joinmemory.join_bytes(rows, longest, per_token)
    assert 0 < size <= MAX_BYTES
    assert joinmemory.join_bytes(rows + 1, longest, per_token) >= size
    assert joinmemory.join_bytes(rows, longest + 256, per_token) >= size


def _shard(strategy: Strategy, layers: tuple[int, int] | None) -> Shard:
    return Shard(None, None, {**DEMO, "hidden_size": 576}, strategy, layers)  # type: ignore[arg-type]


def test_a_rank_sizes_the_join_at_its_own_share_of_each_tokens_kv() -> None:
    none = (16, 64)  # the KV cache at the model's dtype
    uneven = _shard(Strategy.PIPELINE, (0, 20))  # 20 of the 30 layers: --split 2,1
    assert _rank_token_bytes(uneven, none, 2) == DEMO_TOKEN_BYTES * 20 // 30
    assert _rank_token_bytes(_shard(Strategy.TENSOR, None), none, 3) == DEMO_TOKEN_BYTES // 3
    assert _rank_token_bytes(_shard(Strategy.SINGLE, None), none, 1) == DEMO_TOKEN_BYTES
    assert _rank_token_bytes(uneven, (4, 64), 2) < DEMO_TOKEN_BYTES * 20 // 30  # 4-bit KV


def test_the_reserve_grows_a_slice_a_step_up_to_what_the_join_takes() -> None:
    reserve = JoinReserve(enabled=True)
    wanted = 3 * SLICE_BYTES + 4 * MIB
    added = [reserve.grow(wanted) for _ in range(5)]
    assert added == [SLICE_BYTES, SLICE_BYTES, SLICE_BYTES, 4 * MIB, 0]
    assert reserve.held == wanted
    assert all(piece.nbytes <= PIECE_BYTES for piece in reserve._held)
    assert reserve.grow(wanted // 2) == 0  # a smaller join: nothing more, nothing dropped
    reserve.release()
    assert reserve.held == 0


def test_memory_it_cannot_have_turns_the_reserve_off_and_never_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reserve = JoinReserve(enabled=True)
    assert reserve.grow(SLICE_BYTES) == SLICE_BYTES

    def no_memory(*args: object, **kwargs: object) -> None:
        raise RuntimeError("[malloc] Unable to allocate 8388608 bytes.")

    monkeypatch.setattr(joinmemory.mx, "zeros", no_memory)
    assert reserve.grow(2 * SLICE_BYTES) == 0
    assert (reserve.enabled, reserve.held) == (False, 0)  # what it held is given back
    assert reserve.grow(2 * SLICE_BYTES) == 0  # and it tries no more


def test_a_disabled_reserve_holds_nothing() -> None:
    reserve = JoinReserve(enabled=False)
    assert reserve.grow(SLICE_BYTES) == 0
    assert reserve.held == 0


# In a process of its own: mallopt changes the whole process.
_RSS_AFTER_RELEASE = textwrap.dedent(
    """
    import sys
    from core.worker.joinmemory import JoinReserve, keep_freed_memory

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    kept = keep_freed_memory() if sys.argv[1] == "kept" else False
    reserve = JoinReserve(enabled=True)
    for _ in range(4):
        reserve.grow(128 << 20)
    held = rss()
    reserve.release()
    print(kept, (held - rss()) >> 20)
    """
)


def _given_back(mode: str) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _RSS_AFTER_RELEASE, mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc: Linux")
def test_with_mallocs_settings_the_released_memory_stays_for_the_join() -> None:
    kept, given_back = _given_back("kept")
    assert kept == "True"
    assert given_back < 16  # MiB: the 128 held stay touched in the process
    # Without them, glibc maps pieces this size on their own and unmaps them on free:
    # the join would fault them in again.
    _, default_given_back = _given_back("default")
    assert default_given_back > 96
