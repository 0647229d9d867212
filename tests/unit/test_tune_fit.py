"""core.tune.fit: the fine-tune's memory on every node, the limiting node, and a fix."""

from __future__ import annotations

from dataclasses import replace

import pytest

from core.cluster.probe.facts import NodeFacts
from core.model.info import ModelInfo
from core.plan.memory import default_gpu_limit_bytes
from core.tune import fit as f
from core.tune.data import DEMO_SETTINGS
from core.tune.settings import TuneSettings
from core.units import GIB, MIB, size
from core.worker.vocab import Strategy
from tests.helpers.header_models import synthetic_model_info


def mac(name: str, memory_gib: float, wired_limit_mb: int | None = None) -> NodeFacts:
    """A Mac as a probe reports it."""
    return NodeFacts(
        name,
        model_id="Mac16,9",
        chip="Apple M4 Max",
        memory_bytes=int(memory_gib * GIB),
        os_name="Darwin",
        macos_version="26.2",
        wired_limit_mb=wired_limit_mb,
    )


def linux(name: str, memory_gib: float) -> NodeFacts:
    return NodeFacts(name, memory_bytes=int(memory_gib * GIB), os_name="Linux")


def usable(memory_gib: float) -> int:
    limit = default_gpu_limit_bytes(int(memory_gib * GIB))
    return limit - max(512 * MIB, int(limit * 0.05))


@pytest.fixture
def smollm() -> ModelInfo:
    """SmolLM2-135M's shape (30 layers, hidden 576, 9 heads / 3 KV heads of 64) at 4 bits."""
    return synthetic_model_info(
        layers=30,
        layer_bytes=1_700_000,
        shared_bytes=30_000_000,
        heads=9,
        kv_heads=3,
        head_dim=64,
        hidden=576,
        intermediate=1536,
        vocab=49152,
        dtype="float32",
        quantization={"bits": 4, "group_size": 32},
        name="SmolLM2-135M-Instruct-mlx-q4",
    )


@pytest.fixture
def llama8b() -> ModelInfo:
    """Llama-3-8B's shape at 4 bits (group 64): 32 layers, hidden 4096, 32/8 heads of 128."""
    return synthetic_model_info(
        layers=32,
        layer_bytes=122_683_392,
        shared_bytes=591_396_864,
        heads=32,
        kv_heads=8,
        head_dim=128,
        hidden=4096,
        intermediate=14336,
        vocab=128256,
        dtype="bfloat16",
        quantization={"bits": 4, "group_size": 64},
        name="Llama-3-8B-4bit",
    )


def test_a_fine_tune_puts_one_rank_on_each_mac() -> None:
    """One Mac runs single; several are planned as a pipeline, one rank on each."""
    assert f.tune_strategy(1) is Strategy.SINGLE
    assert f.tune_strategy(2) is Strategy.PIPELINE
    assert f.tune_strategy(4) is Strategy.PIPELINE


def test_lora_parameters_match_what_mlx_lm_trains(smollm: ModelInfo) -> None:
    # mlx_lm lora on the demo model, rank 8, 8 layers, prints
    # "Trainable parameters: 0.484% (0.651M/134.515M)": 651,264 exactly.
    settings = TuneSettings(lora_rank=8, lora_layers=8)
    assert f.lora_parameters(smollm, settings) == 651_264
    assert f.lora_bytes(smollm, settings) == 651_264 * 4 * 4  # params, grads, Adam m and v
    # more layers than the model has: all of them
    assert f.lora_parameters(smollm, TuneSettings(lora_rank=8, lora_layers=99)) == 651_264 // 8 * 30


def test_activations_by_hand(smollm: ModelInfo) -> None:
    settings = TuneSettings(batch_size=4, max_seq_length=256, lora_layers=8)
    tokens = 2 * 256  # 4 sequences over 2 ranks
    per_token = 6 * 576 + 2 * 576 + 2 * 192 + 4 * 1536
    scores = 2 * 9 * 256 * 256  # attention probabilities: sequences x heads x length^2
    per_layer = (tokens * per_token + scores) * 4
    logits = f.LOGIT_COPIES * tokens * 49152 * 4
    assert f.activation_bytes(smollm, settings, ranks=2, dtype_bytes=4) == 9 * per_layer + logits
    # one rank takes the whole batch: twice the tokens
    assert f.activation_bytes(smollm, settings, 1, 4) > f.activation_bytes(smollm, settings, 2, 4)


def test_the_demo_fits_on_the_demo_macs(smollm: ModelInfo) -> None:
    fit = f.training_fit(smollm, DEMO_SETTINGS, [mac("Studio A", 96), mac("Studio B", 64)])
    assert fit.ok
    assert fit.limit is not None and fit.limit.name == "Studio B"  # less room left
    assert fit.message.startswith("Fits on every Mac: the tightest is Studio B, ")
    b = fit.node("Studio B")
    assert b.usable_bytes == usable(64)
    assert b.weights_bytes == smollm.weight_bytes and not b.float_weights
    assert b.need_bytes == b.weights_bytes + b.lora_bytes + b.activation_bytes


def test_facts_by_name_or_in_a_list_give_the_same(smollm: ModelInfo) -> None:
    nodes = [mac("Studio A", 96), mac("Studio B", 64)]
    by_list = f.training_fit(smollm, DEMO_SETTINGS, nodes)
    by_name = f.training_fit(smollm, DEMO_SETTINGS, {n.name: n for n in nodes})
    assert by_list == by_name


def test_a_cpu_node_counts_the_model_in_float32(smollm: ModelInfo) -> None:
    fit = f.training_fit(smollm, DEMO_SETTINGS, [linux("box", 16)])
    box = fit.node("box")
    assert box.float_weights and box.dtype_bytes == 4
    assert box.weights_bytes == int(smollm.weight_bytes * 32 / (4 + 2 * 16 / 32))


def test_the_limit_is_named_with_how_much_and_a_fix(llama8b: ModelInfo) -> None:
    settings = TuneSettings(batch_size=4, max_seq_length=2048, lora_layers=16)
    fit = f.training_fit(llama8b, settings, [mac("Studio A", 96), mac("MacBook Air", 24)])
    assert not fit.ok
    assert fit.node("Studio A").fits
    air = fit.limit
    assert air is not None and air.name == "MacBook Air"
    short = air.need_bytes - air.usable_bytes
    assert short > 0 and air.free_bytes == -short
    assert fit.message == (
        f"Does not fit on MacBook Air: the fine-tune needs {size(air.need_bytes)} there "
        f"(model {size(llama8b.weight_bytes)}, adapter and optimizer {size(air.lora_bytes)}, "
        f"activations {size(air.activation_bytes)}), {size(short)} more than its "
        f"{size(usable(24))} usable. Try a batch size of 2 and a max sequence length of 1024."
    )


@pytest.mark.parametrize("memory_gib", [8, 12, 16, 24, 32])
def test_the_suggested_fix_fits_and_keeps_the_batch_a_multiple(
    llama8b: ModelInfo, memory_gib: int
) -> None:
    settings = TuneSettings(batch_size=8, max_seq_length=4096, lora_layers=32)
    nodes = [mac("Studio A", 96), mac("small", memory_gib)]
    fit = f.training_fit(llama8b, settings, nodes)
    assert not fit.ok
    fix = fit.message.rsplit("Try ", 1)[1].rstrip(".")
    changes: dict[str, int] = {}
    for part in fix.replace(" and ", ", ").split(", "):
        number = int(next(w for w in part.split() if w.isdigit()))
        if part.startswith("a batch size"):
            changes["batch_size"] = number
        elif part.startswith("a max sequence length"):
            changes["max_seq_length"] = number
        else:
            assert part.endswith("LoRA layers"), part
            changes["lora_layers"] = number
    changed = replace(settings, **changes)
    assert f.training_fit(llama8b, changed, nodes).ok
    changed.check(ranks=2)  # still a multiple of the Macs
    if "lora_layers" in changes:  # the last resort: batch and length went as low as they go
        assert (changed.batch_size, changed.max_seq_length) == (2, 128)


def test_the_worst_node_is_the_limit_when_several_do_not_fit(llama8b: ModelInfo) -> None:
    settings = TuneSettings(batch_size=4, max_seq_length=4096)
    nodes = [mac("a", 24), mac("b", 18), mac("c", 32), mac("d", 24)]
    fit = f.training_fit(llama8b, settings, nodes)
    assert fit.limit is not None and fit.limit.name == "b"


def test_the_wired_limit_is_what_a_node_gives(smollm: ModelInfo) -> None:
    fit = f.training_fit(smollm, DEMO_SETTINGS, [mac("raised", 64, wired_limit_mb=60 * 1024)])
    assert fit.node("raised").gpu_limit_bytes == 60 * GIB


def test_a_model_too_big_for_a_node_says_so(llama8b: ModelInfo) -> None:
    fit = f.training_fit(llama8b, DEMO_SETTINGS, [mac("Studio A", 96), mac("tiny", 4)])
    assert not fit.ok
    assert fit.message.endswith(
        "The model alone is too big for it: choose a smaller model or leave tiny out."
    )


def test_unknown_memory_asks_for_a_probe(smollm: ModelInfo) -> None:
    fit = f.training_fit(smollm, DEMO_SETTINGS, [mac("a", 64), NodeFacts("mystery")])
    assert not fit.ok
    assert fit.message == "mystery's memory is unknown: probe it again before training."


def test_no_nodes(smollm: ModelInfo) -> None:
    fit = f.training_fit(smollm, DEMO_SETTINGS, [])
    assert not fit.ok and fit.limit is None and fit.message.startswith("No Macs")


def test_when_nothing_but_a_smaller_model_helps(llama8b: ModelInfo) -> None:
    # 4.25 GB usable: the model (4.21 GB) fits alone, not with even one short example
    squeezed = mac("a", 24, wired_limit_mb=4864)
    fit = f.training_fit(llama8b, TuneSettings(batch_size=1, max_seq_length=2048), [squeezed])
    assert not fit.ok
    assert fit.message.endswith(
        "Even the smallest batch, examples and adapter do not fit: use a smaller model."
    )
