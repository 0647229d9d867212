"""Per-peer byte accounting of MLX collectives."""

from __future__ import annotations

import mlx.core as mx
import pytest

from core.worker.traffic import TrafficCounter


def test_ring_all_sum_of_two_ranks_moves_the_whole_array_each_way() -> None:
    counter = TrafficCounter(rank=0, size=2, backend="ring")
    counter.all_sum(1000)
    assert counter.take() == ({1: 1000}, {1: 1000})
    assert counter.take() == ({}, {})  # take() resets


def test_ring_all_sum_of_four_ranks_goes_to_the_neighbours() -> None:
    counter = TrafficCounter(rank=1, size=4, backend="ring")
    counter.all_sum(4000)  # reduce-scatter + all-gather: 2 * 3/4 * n
    assert counter.take() == ({2: 6000}, {0: 6000})


def test_mesh_all_sum_spreads_over_every_peer() -> None:
    counter = TrafficCounter(rank=0, size=4, backend="jaccl")
    counter.all_sum(4000)
    sent, received = counter.take()
    assert sent == {1: 2000, 2: 2000, 3: 2000} == received


def test_all_gather_and_point_to_point() -> None:
    ring = TrafficCounter(rank=2, size=3, backend="jaccl-ring")
    ring.all_gather(100)
    ring.send(50, dst=1)
    ring.recv(70, src=0)
    assert ring.take() == ({0: 200, 1: 50}, {1: 200, 0: 70})
    mesh = TrafficCounter(rank=0, size=3, backend="jaccl")
    mesh.all_gather(100)
    assert mesh.take() == ({1: 100, 2: 100}, {1: 100, 2: 100})


def test_one_rank_moves_nothing() -> None:
    counter = TrafficCounter(rank=0, size=1, backend="ring")
    counter.all_sum(10)
    counter.all_gather(10)
    assert counter.take() == ({}, {})


def test_install_counts_real_calls_and_uninstall_restores() -> None:
    original = mx.distributed.all_sum
    counter = TrafficCounter(rank=0, size=2, backend="ring")
    counter.install()
    try:
        assert mx.distributed.all_sum is not original
        out = mx.distributed.all_sum(mx.ones((10,), dtype=mx.float32))
        assert out.tolist() == [1.0] * 10  # the result is untouched
        assert counter.take() == ({1: 40}, {1: 40})
    finally:
        counter.uninstall()
    assert mx.distributed.all_sum is original


@pytest.mark.parametrize("size", [2, 3, 8])
def test_ring_totals_balance_across_ranks(size: int) -> None:
    counters = [TrafficCounter(rank, size, "ring") for rank in range(size)]
    for counter in counters:
        counter.all_sum(1 << 20)
        counter.all_gather(1 << 10)
    taken = [counter.take() for counter in counters]
    sent = sum(sum(s.values()) for s, _ in taken)
    received = sum(sum(r.values()) for _, r in taken)
    assert sent == received > 0
