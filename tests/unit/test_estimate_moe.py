"""The estimate for mixtures of experts (issue 32): active bytes from real models' headers,
the MoE families, batches, several Macs, ``auto`` by speed, and ``macmesh plan`` on
header-only copies of real models (MLX's own names, shapes and dtypes, no weights)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

import core.cli.plan as plan_module
from core.cli.plan import plan_cli
from core.library.hub import read_header_copy
from core.model.experts import MOE_FAMILIES, is_routed_expert
from core.model.info import ModelInfo, read_model_info
from core.plan.calibration import ALL_CALIBRATION, MOE_CALIBRATION
from core.plan.chips import CHIPS
from core.plan.choose import plan_by_speed
from core.plan.costs import BAND_DENSE, BAND_MOE, RDMA
from core.plan.estimate import Stage, estimate_decode, workload_of
from core.plan.memory import Link, Node, PlanOptions
from core.worker.vocab import Strategy
from tests.helpers.header_models import (
    kimi_k2_config,
    moe_mla_tensors,
    qwen3_moe_config,
    qwen3_moe_tensors,
    write_header_only_model,
)

GIB = 1 << 30
MLX_LM_MOE = [
    "qwen2_moe",
    "qwen3_moe",
    "qwen3_next",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "kimi_k2",
    "glm4_moe",
    "gpt_oss",
    "llama4",
    "mixtral",
    "minimax",
    "phimoe",
    "granitemoe",
    "olmoe",
    "bailing_moe",
]


@pytest.fixture(scope="module")
def qwen3_30b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hub") / "Qwen3-30B-A3B-4bit"
    config = qwen3_moe_config()
    return write_header_only_model(folder, config, qwen3_moe_tensors(config), files=4)


@pytest.fixture(scope="module")
def qwen3_235b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hub") / "Qwen3-235B-A22B-4bit"
    config = qwen3_moe_config(layers=94, hidden=4096, heads=64, moe_inter=1536)
    return write_header_only_model(folder, config, qwen3_moe_tensors(config), files=8)


def _info(folder: Path) -> ModelInfo:
    return read_header_copy(f"mlx-community/{folder.name}", folder, 0)


def test_every_moe_family_mlx_lm_ships_is_known():
    assert set(MLX_LM_MOE) <= set(MOE_FAMILIES)
    assert is_routed_expert("mlp.switch_mlp.up_proj.weight")
    assert is_routed_expert("feed_forward.experts.down_proj.scales")
    assert is_routed_expert("block_sparse_moe.experts.17.w1.weight")
    assert not is_routed_expert("mlp.shared_experts.up_proj.weight")
    assert not is_routed_expert("mlp.gate.weight")


def test_a_token_reads_the_active_bytes_of_qwen3_30b_a3b(qwen3_30b: Path):
    info = _info(qwen3_30b)
    experts = info.experts
    assert (experts.total, experts.per_token, experts.note) == (128, 8, "")
    assert len(experts.layer_bytes) == 48 and all(experts.layer_bytes)
    work = workload_of(info)
    active = sum(work.read_bytes(i) for i in range(48)) + work.head_bytes
    # ~3.0 B active parameters at 4.5 bits: about 1.7 GB a token, of 17 GB of weights.
    assert 1.5e9 < active < 1.9e9
    assert info.weight_bytes > 9 * active
    # A batch reads more experts: uniform routing's N(1-(1-k/N)^B), up to all of them.
    assert work.read_bytes(0, 8) > work.read_bytes(0, 1)
    assert work.read_bytes(0, 10_000) == pytest.approx(info.layer_bytes[0])


def test_macmesh_plan_on_qwen3_30b_a3b_and_one_m3_max(qwen3_30b: Path, monkeypatch):
    monkeypatch.setattr(plan_module, "resolve_model", lambda _text: _info(qwen3_30b))
    out = io.StringIO()
    argv = ["hf:mlx-community/Qwen3-30B-A3B-4bit", "--node", "mac:64@M3-Max", "--batch", "8"]
    assert plan_cli([*argv, "--json"], out=out) == 0
    estimate = json.loads(out.getvalue())["estimate"]
    assert 50 <= estimate["tokens_per_s"] <= 85, estimate["tokens_per_s"]
    low, high = estimate["tokens_per_s_band"]
    assert low < estimate["tokens_per_s"] < high
    assert estimate["batch"] == 8 and estimate["aggregate_tokens_per_s"] > 2 * low
    assert "8 of 128 routed experts" in estimate["experts"]
    text = io.StringIO()
    assert plan_cli(argv, out=text) == 0
    said = re.search(r"Estimate for real Macs: ([\d.]+) tokens/s \(likely ", text.getvalue())
    assert said and float(said.group(1)) == pytest.approx(estimate["tokens_per_s"], abs=0.06)
    assert "8 at once:" in text.getvalue()


def test_auto_picks_tensor_on_four_m3_ultras_over_rdma_for_a_moe_one_mac_holds(
    qwen3_235b: Path, monkeypatch
):
    info = _info(qwen3_235b)
    nodes = [Node(f"studio-{i}", 512 * GIB, chip="M3 Ultra") for i in range(4)]
    links = [Link(a.name, b.name, 80.0, True) for i, a in enumerate(nodes) for b in nodes[i + 1 :]]
    options = PlanOptions(batch=1, prompt_cache_bytes=0)
    choice = plan_by_speed(info, nodes[:1], (), options)
    assert choice.plan.strategy is Strategy.SINGLE and choice.plan.fits  # one Mac holds it
    choice = plan_by_speed(info, nodes, links, options)
    assert choice.plan.strategy is Strategy.TENSOR and choice.plan.requested is Strategy.AUTO
    assert choice.plan.reason.startswith("tensor: ") and "× one Mac (estimate" in choice.plan.reason
    tensor = choice.per_strategy[Strategy.TENSOR].tokens_per_s
    single = choice.per_strategy[Strategy.SINGLE].tokens_per_s
    pipeline = choice.per_strategy[Strategy.PIPELINE].tokens_per_s
    assert tensor and single and pipeline and tensor > single > pipeline
    # Published runs of this kind: tensor 1.4-1.9x one Mac on 4 Macs.
    assert 1.1 < tensor / single < 2.0
    # Serving 8 at once: chosen by the aggregate, and said so.
    served = plan_by_speed(info, nodes, links, PlanOptions(batch=8, prompt_cache_bytes=0))
    aggregate = served.per_strategy[Strategy.TENSOR].aggregate_tokens_per_s
    assert served.plan.strategy is Strategy.TENSOR and "(estimate, in all at the batch)" in (
        served.plan.reason
    )
    assert aggregate and aggregate > 4 * tensor  # a batch reads its experts once a step
    # Without RDMA (the ring over TCP) tensor loses: one Mac it is.
    assert plan_by_speed(info, nodes, (), options).plan.strategy is Strategy.SINGLE
    # The CLI prints the reason.
    monkeypatch.setattr(plan_module, "resolve_model", lambda _text: info)
    out = io.StringIO()
    argv = ["hf:mlx-community/Qwen3-235B-A22B-4bit", "--rdma", "--batch", "1"]
    argv += [arg for i in range(4) for arg in ("--node", f"studio-{i}:512@M3-Ultra")]
    assert plan_cli(argv, out=out) == 0
    assert ": tensor (fits)\ntensor: " in out.getvalue()
    assert "Estimate per strategy:\n  tensor: " in out.getvalue()


def test_without_chips_auto_keeps_todays_rule(qwen3_235b: Path):
    info = _info(qwen3_235b)
    nodes = [Node(f"studio-{i}", 512 * GIB) for i in range(4)]
    links = [Link(a.name, b.name, 80.0, True) for i, a in enumerate(nodes) for b in nodes[i + 1 :]]
    choice = plan_by_speed(info, nodes, links, PlanOptions(batch=1))
    assert choice.plan.strategy is Strategy.SINGLE
    assert choice.estimate.tokens_per_s is None and "chip unknown" in choice.estimate.reason


def test_mla_cache_is_the_compressed_latent_and_not_split(tmp_path: Path):
    config = kimi_k2_config(layers=4, experts=16)
    folder = write_header_only_model(tmp_path / "kimi", config, moe_mla_tensors(config))
    info = read_model_info(folder, check_data=False)
    assert info.experts.total == 16 and info.experts.per_token == 8
    assert info.experts.layer_bytes[0] == 0 and all(info.experts.layer_bytes[1:])  # 1 dense
    work = workload_of(info)
    assert work.kv_bytes_per_token_layer == (512 + 64) * 2 and not work.kv_split_by_tensor


def test_an_unknown_family_that_stores_experts_is_counted_dense_and_says_so(tmp_path: Path):
    config = qwen3_moe_config(layers=2, experts=8)
    folder = write_header_only_model(tmp_path / "moe", config, qwen3_moe_tensors(config))
    (folder / "config.json").write_text(json.dumps({**config, "num_experts": None}))
    info = read_model_info(folder, check_data=False)
    assert not info.experts.moe and "every expert is counted as read" in info.experts.note
    assert "Counted as dense" in workload_of(info).experts_text()


def test_tensor_keeps_the_fixed_cost_and_a_pipeline_at_batch_1_is_slower_than_one_mac():
    work = next(p.work for p in MOE_CALIBRATION if p.model == "Llama 4 Maverick, MLX 4-bit")
    ultra = CHIPS["M3 Ultra"]
    one = estimate_decode(work, Strategy.SINGLE, [Stage("a", ultra, 0, 48, True)], None, 300)
    four = [Stage(f"m{i}", ultra, 0, 48, True) for i in range(4)]
    tensor = estimate_decode(work, Strategy.TENSOR, four, RDMA, 300)
    assert tensor.fixed_s == pytest.approx(one.fixed_s)  # does not shrink with Macs
    assert tensor.link_s == pytest.approx(48 * 2 * RDMA.all_reduce_s(4, 5120 * 2))
    cut = [0, 12, 24, 36, 48]
    stages = [Stage(f"m{i}", ultra, cut[i], cut[i + 1], i == 3) for i in range(4)]
    pipeline = estimate_decode(work, Strategy.PIPELINE, stages, RDMA, 300)
    assert pipeline.tokens_per_s < one.tokens_per_s < tensor.tokens_per_s
    # Mixed chips: tensor waits for the slowest.
    mixed = [*four[:3], Stage("max", CHIPS["M3 Max"], 0, 48, True)]
    assert estimate_decode(work, Strategy.TENSOR, mixed, RDMA, 300).compute_s == max(
        n.seconds for n in estimate_decode(work, Strategy.TENSOR, mixed, RDMA, 300).nodes
    )


def test_a_long_context_reads_the_kv_cache():
    minimax = [p for p in MOE_CALIBRATION if p.model.startswith("MiniMax")]
    short, long = sorted(minimax, key=lambda p: p.context_tokens)
    assert long.estimate().tokens_per_s < short.estimate().tokens_per_s / 3


def test_the_calibration_covers_what_the_issue_asks():
    moe = [p for p in ALL_CALIBRATION if p.moe]
    fitted = [p for p in moe if p.fitted]
    held = [p for p in moe if not p.fitted]
    assert len(fitted) >= 10 and len(held) >= 5
    families = {p.model.split(",")[0].split("-")[0].split(" ")[0] for p in fitted}
    assert len(families) >= 4, families
    assert {p.chip for p in fitted} >= {"M3 Max", "M3 Ultra"}
    assert any(p.macs > 1 for p in fitted)
    for point in ALL_CALIBRATION:
        assert abs(point.error) <= point.tolerance, (point.model, point.macs_label, point.error)
        band = BAND_MOE if point.moe else BAND_DENSE
        assert abs(point.error) <= band  # the band holds every published figure


def test_the_docs_header_only_figures_are_the_codes(tmp_path: Path, qwen3_30b, qwen3_235b):
    """docs/estimate.md quotes `tests.tools.plan_headers`: the same numbers."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "estimate.md").read_text()
    doc = " ".join(doc.split())
    mac = [Node("mac", 64 * GIB, chip="M3 Max")]
    small = plan_by_speed(_info(qwen3_30b), mac, (), PlanOptions(batch=1)).estimate
    assert f"gives {small.rate_text()} at the default 4,096-token context" in doc
    four = [Node(n, 512 * GIB, chip="M3 Ultra") for n in "abcd"]
    links = [Link(a.name, b.name, 80.0, True) for i, a in enumerate(four) for b in four[i + 1 :]]
    big = plan_by_speed(_info(qwen3_235b), four, links, PlanOptions(batch=1))
    assert f'"{big.plan.reason.split(". ")[0]}."' in doc
    config = kimi_k2_config()
    folder = write_header_only_model(
        tmp_path / "Kimi-K2-Instruct-8bit", config, moe_mla_tensors(config)
    )
    kimi = plan_by_speed(read_header_copy("k", folder, 0), four, links, PlanOptions(batch=1))
    tensor = kimi.per_strategy[Strategy.TENSOR].tokens_per_s
    pipeline = kimi.per_strategy[Strategy.PIPELINE].tokens_per_s
    assert kimi.plan.strategy is Strategy.TENSOR and tensor and pipeline
    assert f"tensor {tensor:.1f} tokens/s, pipeline {pipeline:.1f}" in doc


def test_the_library_index_keeps_a_models_experts(qwen3_30b: Path):
    """The library's memo (library-index.json) gives back the same experts it was given."""
    from core.library.memo import info_from_json, info_to_json

    info = _info(qwen3_30b)
    again = info_from_json(json.loads(json.dumps(info_to_json(info))))
    assert again is not None and again.experts == info.experts and again.experts.moe
    assert info_from_json({**info_to_json(info), "experts": "garbage"}) is None


def test_the_constants_are_what_the_fit_finds():
    """costs.py holds the fit's answer: the search from them finds no better step."""
    from core.plan import costs
    from tests.tools import fit_estimate

    names = list(fit_estimate.GRIDS)
    before = {name: fit_estimate._get(name) for name in names}
    try:
        found = fit_estimate.fit()
    finally:
        for name, value in before.items():
            fit_estimate._set(name, value)
    for name in names:
        assert found[name] == pytest.approx(before[name]), name
    assert found["worst_over_tolerance"] <= 1.0
    assert before["EFFICIENCY"] == costs.EFFICIENCY


def _layered(prefix: str, layers: int, parts: dict[str, tuple[int, ...]]) -> dict:
    """``{prefix}.layers.N.{name}``: (shape) for every layer, float16."""
    return {
        f"{prefix}.layers.{n}.{name}": ("F16", shape)
        for n in range(layers)
        for name, shape in parts.items()
    }


@pytest.mark.parametrize("family", ["llama4", "gpt_oss"])
def test_other_families_read_their_experts_from_their_own_names(tmp_path: Path, family: str):
    """Llama 4 keeps its text config under text_config and its experts under
    feed_forward.experts (a shared_expert beside them); gpt-oss under mlp.experts."""
    hidden, experts, inter = 64, 8, 32
    attention = {
        "self_attn.q_proj.weight": (hidden, hidden),
        "self_attn.k_proj.weight": (hidden, hidden),
        "self_attn.v_proj.weight": (hidden, hidden),
        "self_attn.o_proj.weight": (hidden, hidden),
        "input_layernorm.weight": (hidden,),
        "post_attention_layernorm.weight": (hidden,),
    }
    text = {
        "hidden_size": hidden,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 128,
        "intermediate_size": inter,
        "num_local_experts": experts,
        "num_experts_per_tok": 1 if family == "llama4" else 2,
    }
    if family == "llama4":
        config = {
            "model_type": "llama4",
            "text_config": {
                **text,
                "model_type": "llama4_text",
                "intermediate_size_mlp": 2 * inter,
                "interleave_moe_layer_step": 1,
                "rope_scaling": None,
            },
            "vision_config": {},
        }
        ff = "feed_forward"
        mlp = {
            f"{ff}.router.weight": (experts, hidden),
            f"{ff}.shared_expert.up_proj.weight": (inter, hidden),
            **{
                f"{ff}.experts.{p}.weight": (experts, inter, hidden)
                for p in ("gate_proj", "up_proj")
            },
            f"{ff}.experts.down_proj.weight": (experts, hidden, inter),
        }
        prefix = "language_model.model"
        shared = {f"{prefix}.embed_tokens.weight": ("F16", (128, hidden))}
    else:
        config = {"model_type": "gpt_oss", **text, "head_dim": 16}
        mlp = {
            "mlp.router.weight": (experts, hidden),
            **{
                f"mlp.experts.{p}.weight": (experts, inter, hidden)
                for p in ("gate_proj", "up_proj")
            },
            "mlp.experts.down_proj.weight": (experts, hidden, inter),
        }
        prefix = "model"
        shared = {f"{prefix}.embed_tokens.weight": ("F16", (128, hidden))}
    tensors = {**shared, **_layered(prefix, 2, {**attention, **mlp})}
    folder = write_header_only_model(tmp_path / family, config, tensors)
    info = read_model_info(folder, check_data=False)
    routed = 3 * experts * inter * hidden * 2
    assert info.experts.total == experts and info.experts.note == ""
    assert info.experts.per_token == text["num_experts_per_tok"]
    assert info.experts.layer_bytes == (routed, routed)


# mlx-lm modules that route experts but whose counts MacMesh does not read: counted as
# dense, and the estimate says so (DBRX keeps its counts in ffn_config; Kimi-VL's language
# model is configured under its own keys).
_COUNTED_DENSE = {"dbrx", "kimi_vl", "switch_layers"}


def test_every_mlx_lm_module_that_routes_experts_is_read_or_counted_dense_by_name():
    """Against the installed mlx-lm: a model module that builds SwitchGLU / SwitchMLP
    layers is a mixture of experts MacMesh reads, or one named here as counted dense."""
    import mlx_lm.models

    folder = Path(mlx_lm.models.__file__).parent
    routing = {
        file.stem
        for file in folder.glob("*.py")
        if re.search(r"\bSwitch(GLU|MLP)\b", file.read_text(encoding="utf-8"))
    }
    assert len(routing) > 30
    assert routing - _COUNTED_DENSE <= set(MOE_FAMILIES), sorted(
        routing - _COUNTED_DENSE - set(MOE_FAMILIES)
    )


@pytest.mark.parametrize(
    ("model_type", "keys", "expected"),
    [
        ("hunyuan", {"num_experts": 64, "moe_topk": 8}, (64, 8)),
        ("longcat_flash", {"n_routed_experts": 512, "moe_topk": 12}, (512, 12)),
        ("ernie4_5_moe", {"moe_num_experts": 64, "moe_k": 6}, (64, 6)),
        ("step3p5", {"moe_num_experts": 288, "moe_top_k": 8}, (288, 8)),
        ("kimi_linear", {"num_experts": 256, "num_experts_per_token": 8}, (256, 8)),
        ("gemma4_text", {"num_experts": 128, "top_k_experts": 8}, (128, 8)),
        ("mistral4", {"n_routed_experts": 128, "num_experts_per_tok": 4}, (128, 4)),
        ("hunyuan", {"num_experts": 64}, None),  # no k: counted dense, said so
    ],
)
def test_each_family_reads_k_from_its_own_key(tmp_path: Path, model_type, keys, expected):
    from core.model.experts import read_experts
    from core.model.validate import ConfigView

    config = ConfigView.of(tmp_path / "config.json", {"model_type": model_type, **keys})
    experts = read_experts(config, [1000, 1000])
    if expected is None:
        assert not experts.moe and "every expert is counted as read" in experts.note
        assert "moe_topk" in experts.note
    else:
        assert (experts.total, experts.per_token, experts.note) == (*expected, "")
        assert experts.read_share() == pytest.approx(expected[1] / expected[0])
