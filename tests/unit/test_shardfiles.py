"""Pipeline layer ranges and the weight files each stage needs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.worker.shardfiles import (
    even_split,
    files_for_layers,
    layer_of,
    layer_ranges,
    validate_split,
)


def test_rank_zero_holds_the_last_layers() -> None:
    assert layer_ranges([12, 18]) == [(18, 30), (0, 18)]
    assert layer_ranges([1, 1, 1]) == [(2, 3), (1, 2), (0, 1)]


def test_even_split_matches_mlx_lm_low_ranks_get_the_extra_layers() -> None:
    assert even_split(30, 4) == [8, 8, 7, 7]


@given(st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=8))
def test_ranges_cover_every_layer_once_in_order(split: list[int]) -> None:
    ranges = layer_ranges(split)
    covered = [layer for start, end in reversed(ranges) for layer in range(start, end)]
    assert covered == list(range(sum(split)))
    validate_split(split, sum(split), len(split))


@pytest.mark.parametrize(
    ("split", "layers", "ranks"), [([2, 2], 5, 2), ([4, 0], 4, 2), ([4], 4, 2)]
)
def test_bad_splits_are_refused(split: list[int], layers: int, ranks: int) -> None:
    with pytest.raises(ValueError):
        validate_split(split, layers, ranks)


def test_files_for_layers_keeps_shared_tensors_everywhere() -> None:
    weight_map = {
        "model.embed_tokens.weight": "a.safetensors",
        "model.layers.0.mlp.up_proj.weight": "a.safetensors",
        "model.layers.1.mlp.up_proj.weight": "b.safetensors",
        "model.layers.2.mlp.up_proj.weight": "c.safetensors",
        "model.norm.weight": "c.safetensors",
    }
    assert files_for_layers(weight_map, 0, 1) == {"a.safetensors", "c.safetensors"}
    assert files_for_layers(weight_map, 1, 2) == {"a.safetensors", "b.safetensors", "c.safetensors"}
    assert layer_of("model.layers.12.self_attn.q_proj.scales") == 12
    assert layer_of("lm_head.weight") is None
