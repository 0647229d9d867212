"""MacMesh's own tensor sharding (core.worker.tensor_shard) and the planner's reading of
it from the weights' names (core.worker.tensor_parts, core.model.info) agree, part by
part, on every architecture of the matrix mlx-lm cannot tensor-shard; a rank's share
is exact against the whole model (tests/integration/test_sharding_correctness.py runs
two ranks)."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.utils import load_model

from core.model.experts import is_routed_expert
from core.model.info import read_model_info
from core.worker.shardfiles import LAYER_PATTERN
from core.worker.sharding import ShardError, _shard_tensor
from core.worker.tensor_parts import is_attention, is_mlp, split_tensors
from core.worker.tensor_shard import shard_layers
from tests.helpers.arch_models import make_arch_model

OWN = ["gemma3_text", "nemotron_h", "falcon_h1", "qwen3_next"]


def _tail(name: str) -> str:
    match = LAYER_PATTERN.search(name)
    assert match
    return f"layers.{match.group(1)}.{name[match.end() :]}"


@pytest.mark.parametrize("arch", OWN)
def test_the_sharder_splits_exactly_the_parts_the_planner_counts_as_split(
    arch: str, tmp_path: Path
) -> None:
    folder = make_arch_model(tmp_path / arch, arch)
    model, _ = load_model(folder, lazy=True, strict=False)
    assert not hasattr(model, "shard"), f"mlx-lm now shards {arch}: move it out of OWN"
    shapes = {name: tuple(array.shape) for name, array in _flat(model.parameters())}
    names = list(shapes)
    done = shard_layers(list(model.layers), mx.distributed.init())
    assert done.attention and not done.whole
    sharded = {f"{path}." for path in done.attention + done.mlp}
    modules = split_tensors(shapes, routed=is_routed_expert)
    split = {_tail(name) for names in modules.values() for name in names}
    assert {_tail(path + ".") for path in modules} == sharded
    layer_names = [_tail(name) for name in names if LAYER_PATTERN.search(name)]
    by_sharder = {
        name
        for name in layer_names
        if any(name.startswith(prefix) for prefix in sharded)
        and name.rsplit(".", 2)[-2].endswith("_proj")
    }
    assert split == by_sharder

    info = read_model_info(folder)
    assert info.can_tensor_shard and info.own_tensor_sharding
    assert 0 < info.tensor_whole_bytes < sum(info.layer_bytes)
    assert not any("norm" in part for part in info.tensor_whole_parts)
    assert info.tensor_exchanges == len(sharded)  # one all_sum a split module


def _flat(tree: object, prefix: str = "") -> list[tuple[str, object]]:
    if isinstance(tree, dict):
        return [kv for k, v in tree.items() for kv in _flat(v, f"{prefix}{k}.")]
    if isinstance(tree, list):
        return [kv for i, v in enumerate(tree) for kv in _flat(v, f"{prefix}{i}.")]
    return [(prefix[:-1], tree)]


def test_the_hybrids_mixers_stay_whole_and_are_named(tmp_path: Path) -> None:
    parts = {
        arch: read_model_info(make_arch_model(tmp_path / arch, arch)).tensor_whole_parts
        for arch in ("nemotron_h", "falcon_h1", "qwen3_next")
    }
    assert parts["nemotron_h"][0] == "mixer (recurrent)"
    assert parts["falcon_h1"][0] == "mamba (recurrent)"
    assert {"mlp.switch_mlp (routed experts)", "linear_attn (recurrent)"} <= set(
        parts["qwen3_next"]
    )


def test_what_is_recognised() -> None:
    proj = {"q_proj": (64, 32), "k_proj": (32, 32), "v_proj": (32, 32), "o_proj": (32, 64)}
    per_head = {"q_norm": (16,), "k_norm": (16,)}  # 4 query, 2 KV heads of 16
    assert is_attention({**proj, **per_head}, False)
    # a tensor of its own (attention sinks: one per head) would need slicing
    assert not is_attention(proj, True)
    assert not is_attention({**proj, "gate": (8, 32)}, False)
    # OLMo 2: a norm over every head's queries at once; Cohere: per-head norm weights
    assert not is_attention({**proj, "q_norm": (64,), "k_norm": (32,)}, False)
    assert not is_attention({**proj, "q_norm": (4, 16), "k_norm": (2, 16)}, False)
    assert is_mlp({"up_proj", "down_proj"}, False)
    assert is_mlp({"gate_proj", "up_proj", "down_proj"}, False)
    assert not is_mlp({"gate_proj", "up_proj", "down_proj", "norm"}, False)
    assert not is_mlp({"in_proj", "out_proj", "conv1d"}, True)


def test_the_planner_counts_the_whole_parts_in_full_on_every_node(tmp_path: Path) -> None:
    from dataclasses import replace

    from core.plan.planner import Node, PlanOptions, make_plan
    from core.units import GIB

    info = read_model_info(make_arch_model(tmp_path / "nemotron_h", "nemotron_h"))
    nodes = [Node("a", 64 * GIB), Node("b", 64 * GIB)]
    plan = make_plan(info, nodes, options=PlanOptions(strategy="tensor"))
    assert plan.verdict == "fits"
    whole, split = info.tensor_whole_bytes, sum(info.layer_bytes) - info.tensor_whole_bytes
    for rank in plan.ranks:
        assert rank.weights_bytes == -(-split // 2) + whole + info.shared_bytes
    assert plan.reason.startswith("Tensor parallelism splits the layers' attention and MLPs")
    assert "MacMesh's own splits the attention and MLPs and keeps the mixer (recurrent)" in (
        plan.reason
    )
    assert "whole on every node" in plan.reason

    # With nothing it recognises, neither mlx-lm nor MacMesh can split it: refused.
    nothing = replace(info, can_tensor_shard=False)
    refused = make_plan(nothing, nodes, options=PlanOptions(strategy="tensor"))
    assert refused.verdict == "invalid"
    assert "MacMesh finds no attention or MLP in its layers to split" in refused.reason
    # Heads that do not divide are still refused.
    odd = replace(info, heads=3, kv_heads=3)
    assert (
        "3 attention heads" in make_plan(odd, nodes, options=PlanOptions(strategy="tensor")).reason
    )


def test_mlx_lms_own_sharding_keeps_no_part_whole(tmp_path: Path) -> None:
    info = read_model_info(make_arch_model(tmp_path / "llama", "llama"))
    assert info.can_tensor_shard and not info.own_tensor_sharding
    assert (info.tensor_whole_bytes, info.tensor_whole_parts) == (0, ())


class _OddAttention(nn.Module):
    """An attention whose head count is under a name mlx-lm's modules do not use."""

    def __init__(self) -> None:
        super().__init__()
        self.heads = 4
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(self, name, nn.Linear(8, 8, bias=False))
        self.q_norm = nn.RMSNorm(2)


class _Model(nn.Module):
    def __init__(self, attention: nn.Module) -> None:
        super().__init__()
        self.layers = [attention]


def test_an_attention_it_cannot_split_is_refused_not_held_whole_against_the_plan() -> None:
    model = _Model(_OddAttention())
    with pytest.raises(ShardError, match=r"cannot split the attention heads of layers\.0"):
        _shard_tensor(model, mx.distributed.init(), {"model_type": "odd"})
    model = _Model(nn.RMSNorm(8))
    with pytest.raises(ShardError, match="finds no attention or MLP to split"):
        _shard_tensor(model, mx.distributed.init(), {"model_type": "odd"})
