"""The speed estimate for real Macs: chips, the model, its calibration against published
figures, ``macmesh plan``'s estimate, and docs/estimate.md being what the code computes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from core.cli.plan import parse_node, plan_cli
from core.model.info import read_model_info
from core.plan.calibration import (
    ALL_CALIBRATION,
    TOLERANCE,
    calibration_table,
)
from core.plan.chips import CHIPS, chip_spec, normalise_chip
from core.plan.costs import (
    BAND_DENSE,
    BAND_MOE,
    KV_GROUP_EXPONENT,
    MOE_LAYER_OVERHEAD_S,
    PIPELINE_HOP_S,
)
from core.plan.estimate import (
    EFFICIENCY,
    LAYER_OVERHEAD_S,
    RDMA,
    TCP_RING,
    Stage,
    Workload,
    estimate_decode,
    estimate_plan,
    workload_of,
)
from core.plan.planner import Link, Node, PlanOptions, make_plan
from core.plan.report import format_plan, plan_to_dict
from core.plan.worked_example import WORKED_EXAMPLES, worked_examples_table
from core.units import rate
from core.worker.vocab import Strategy
from tests.helpers.header_models import synthetic_model_info

GIB = 1 << 30
DOC = Path(__file__).resolve().parents[2] / "docs" / "estimate.md"


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Apple M3 Ultra", "M3 Ultra"),
        ("m3-ultra", "M3 Ultra"),
        ("M4Max", "M4 Max"),
        ("apple m1", "M1"),
        ("M3 Max 30-core GPU", "M3 Max 30-core GPU"),
        ("Intel(R) Core(TM) i9", None),
        ("M9 Hyper", None),
    ],
)
def test_chip_names_are_normalised(text: str, name: str | None):
    assert normalise_chip(text) == name


def test_a_max_chip_sold_only_with_the_lower_bin_gets_its_bandwidth():
    assert chip_spec("Apple M4 Max", 128 * GIB) == CHIPS["M4 Max"]
    assert chip_spec("Apple M4 Max", 36 * GIB) == CHIPS["M4 Max 32-core GPU"]
    assert chip_spec("M3 Max", 96 * GIB) == CHIPS["M3 Max 30-core GPU"]
    assert chip_spec("M3 Max", 64 * GIB) == CHIPS["M3 Max"]
    assert chip_spec(None) is None and chip_spec("Intel Xeon") is None


@pytest.mark.parametrize(
    "point", ALL_CALIBRATION, ids=lambda p: f"{p.model} on {p.macs_label}, {p.context_tokens}"
)
def test_the_estimate_is_within_tolerance_of_every_published_figure(point):
    """Dense ±12 %, fitted mixtures of experts ±25 %, figures held back ±35 %."""
    assert point.source.startswith("https://")
    assert point.tolerance <= TOLERANCE
    assert abs(point.error) <= point.tolerance, f"{point.error:+.1%}"


def _work(layers: int = 80, layer_bytes: int = 500_000_000) -> Workload:
    return Workload((layer_bytes,) * layers, 600_000_000, 4096, 16384)


def _stages(chip: str, n: int, strategy: Strategy, layers: int = 80) -> list[Stage]:
    if strategy is Strategy.PIPELINE:
        cut = [layers * i // n for i in range(n + 1)]
        return [
            Stage(f"m{i}", CHIPS[chip], cut[i], cut[i + 1], reads_head=i == n - 1) for i in range(n)
        ]
    return [Stage(f"m{i}", CHIPS[chip], 0, layers, reads_head=True) for i in range(n)]


def test_a_single_mac_reads_its_weights_cache_and_head_at_its_bandwidth():
    work = _work()
    single = estimate_decode(
        work, Strategy.SINGLE, _stages("M2 Ultra", 1, Strategy.SINGLE), None, 1000
    )
    read = 80 * 500_000_000 + 600_000_000 + 4096 * 1000 * 80
    assert single.nodes[0].bytes_per_token == read
    expected = read / (EFFICIENCY * 800e9) + 80 * LAYER_OVERHEAD_S
    assert single.seconds_per_token == pytest.approx(expected)
    assert single.tokens_per_s == pytest.approx(1 / expected)
    assert single.link_s == 0 and single.link is None
    deeper = estimate_decode(
        work, Strategy.SINGLE, _stages("M2 Ultra", 1, Strategy.SINGLE), None, 8000
    )
    assert deeper.tokens_per_s < single.tokens_per_s  # a longer context reads more cache


def test_tensor_reads_the_parts_kept_whole_in_full_on_every_mac():
    """MacMesh's own tensor sharding keeps a hybrid's recurrent mixers whole: each rank
    reads them in full, and its share of the rest."""
    from dataclasses import replace

    whole = 80 * 200_000_000
    work = replace(_work(), whole_bytes=whole)
    two = estimate_decode(
        work, Strategy.TENSOR, _stages("M3 Ultra", 2, Strategy.TENSOR), RDMA, 4096
    )
    split = 80 * 500_000_000 - whole
    assert two.nodes[0].bytes_per_token == split // 2 + whole + 600_000_000 + 4096 * 4096 * 40
    all_split = estimate_decode(
        _work(), Strategy.TENSOR, _stages("M3 Ultra", 2, Strategy.TENSOR), RDMA, 4096
    )
    assert two.tokens_per_s < all_split.tokens_per_s
    # Its exchanges: one all-reduce a split module (a Mamba layer makes none), not two a
    # layer.
    assert all_split.link_s == pytest.approx(80 * 2 * (15e-6 + 8e-6 + 16384 / 9.25e9))
    fewer = estimate_decode(
        replace(work, tensor_exchanges=60),
        Strategy.TENSOR,
        _stages("M3 Ultra", 2, Strategy.TENSOR),
        RDMA,
        4096,
    )
    assert fewer.link_s == pytest.approx(60 * (15e-6 + 8e-6 + 16384 / 9.25e9))


def test_tensor_over_rdma_is_faster_and_over_tcp_slower_than_one_mac():
    work = _work()
    one = estimate_decode(
        work, Strategy.SINGLE, _stages("M3 Ultra", 1, Strategy.SINGLE), None, 4096
    )
    rdma = estimate_decode(
        work, Strategy.TENSOR, _stages("M3 Ultra", 2, Strategy.TENSOR), RDMA, 4096
    )
    tcp = estimate_decode(
        work, Strategy.TENSOR, _stages("M3 Ultra", 2, Strategy.TENSOR), TCP_RING, 4096
    )
    assert rdma.tokens_per_s > 1.3 * one.tokens_per_s
    assert tcp.tokens_per_s < one.tokens_per_s
    # Two all-reduces per layer: one round each over the RDMA mesh (15 µs, + 8 µs a peer),
    # 2(N-1) over the ring.
    assert rdma.link_s == pytest.approx(80 * 2 * (15e-6 + 8e-6 + 16384 / 9.25e9))
    assert tcp.link_s == pytest.approx(80 * 2 * (2 * 300e-6 + 16384 / 1.25e9))
    assert rdma.nodes[0].bytes_per_token == 40 * 500_000_000 + 600_000_000 + 4096 * 4096 * 40


def test_a_pipeline_adds_its_stages_and_one_hop_per_boundary():
    work = _work()
    one = estimate_decode(work, Strategy.SINGLE, _stages("M4 Pro", 1, Strategy.SINGLE), None, 100)
    pipe = estimate_decode(
        work, Strategy.PIPELINE, _stages("M4 Pro", 4, Strategy.PIPELINE), TCP_RING, 100
    )
    assert pipe.compute_s == pytest.approx(one.compute_s)  # the same bytes, one stage at a time
    # A hand-off per boundary: the link's latency, the vector, and the stages' hand-over.
    assert pipe.link_s == pytest.approx(4 * (300e-6 + PIPELINE_HOP_S + 16384 / 1.25e9))
    assert pipe.tokens_per_s < one.tokens_per_s  # at batch 1, slower than one Mac
    assert sum(n.bytes_per_token for n in pipe.nodes) == one.nodes[0].bytes_per_token
    first, *_, last = pipe.nodes
    assert last.bytes_per_token - first.bytes_per_token == 600_000_000  # the head: last stage


def _plan(nodes: list[Node], strategy: str, links: list[Link] = ()):
    model = synthetic_model_info(layers=80, layer_bytes=GIB, shared_bytes=2 * GIB, name="m")
    plan = make_plan(model, nodes, links, PlanOptions(strategy=strategy))
    return model, plan


def test_estimate_plan_uses_each_nodes_chip_and_the_links():
    nodes = [Node("a", 192 * GIB, chip="Apple M3 Ultra"), Node("b", 192 * GIB, chip="M3 Ultra")]
    links = [Link("a", "b", 80.0, True)]
    model, plan = _plan(nodes, "tensor", links)
    estimate = estimate_plan(model, plan, nodes, links)
    assert estimate.link is RDMA and estimate.strategy is Strategy.TENSOR
    assert [n.chip for n in estimate.nodes] == ["M3 Ultra", "M3 Ultra"]
    expected = estimate_decode(
        workload_of(model), Strategy.TENSOR, _stages("M3 Ultra", 2, Strategy.TENSOR), RDMA, 4096
    )
    assert estimate.tokens_per_s == pytest.approx(expected.tokens_per_s)
    assert estimate.summary().startswith("Estimate for real Macs: ")
    assert "2 × M3 Ultra, tensor over RDMA over Thunderbolt 5" in estimate.summary()
    assert estimate_plan(model, plan, nodes, []).link is TCP_RING
    # Would one of them be as fast? The model fits one M3 Ultra: its estimate alone.
    single = estimate_decode(
        workload_of(model), Strategy.SINGLE, _stages("M3 Ultra", 1, Strategy.SINGLE), None, 4096
    )
    assert estimate.alone is not None and estimate.alone[:2] == ("a", "M3 Ultra")
    assert estimate.alone[2] == pytest.approx(single.tokens_per_s)
    assert f"; a (M3 Ultra) alone: {rate(single.tokens_per_s)} tokens/s" in estimate.summary()
    assert estimate.to_dict()["alone"]["node"] == "a"


def test_no_single_mac_figure_when_the_model_needs_every_mac():
    nodes = [Node("a", 64 * GIB, chip="M4 Max"), Node("b", 64 * GIB, chip="M4 Max")]
    model, plan = _plan(nodes, "pipeline")
    assert plan.fits
    estimate = estimate_plan(model, plan, nodes)
    assert estimate.tokens_per_s is not None and estimate.alone is None
    assert "alone" not in estimate.summary()


def test_no_estimate_without_a_chip_or_a_plan_that_fits():
    nodes = [Node("a", 192 * GIB, chip="M3 Ultra"), Node("mini", 192 * GIB)]
    model, plan = _plan(nodes, "pipeline")
    estimate = estimate_plan(model, plan, nodes)
    assert estimate.tokens_per_s is None
    assert estimate.summary() == "No estimate: chip unknown for mini"
    assert estimate.to_dict()["tokens_per_s"] is None
    small = [Node("a", 8 * GIB, chip="M4")]
    model, plan = _plan(small, "single")
    assert not plan.fits
    assert "does not fit" in estimate_plan(model, plan, small).summary()


def test_untied_heads_count_half_the_shared_bytes():
    model = synthetic_model_info(layers=4, layer_bytes=100, shared_bytes=1000)
    assert workload_of(model).head_bytes == 500  # synthetic models are untied


def test_the_report_and_its_json_carry_the_estimate_labelled_with_its_basis():
    nodes = [Node("a", 192 * GIB, chip="M3 Ultra")]
    model, plan = _plan(nodes, "single")
    estimate = estimate_plan(model, plan, nodes)
    data = json.loads(json.dumps(plan_to_dict(plan, estimate)))["estimate"]
    assert data["label"] == "estimate"
    assert data["tokens_per_s"] == round(estimate.tokens_per_s, 2)
    assert data["basis"].startswith("An estimate, not a measurement")
    assert data["nodes"][0]["bandwidth_gbs"] == 819
    assert (
        data["time_to_first_token"] is None
        and "not estimated" in data["time_to_first_token_reason"]
    )
    text = format_plan(plan, estimate)
    low, high = estimate.band
    assert low == pytest.approx(estimate.tokens_per_s / 1.12)
    assert high == pytest.approx(estimate.tokens_per_s / 0.88)
    assert data["tokens_per_s_band"] == [round(low, 2), round(high, 2)]
    assert (
        f"Estimate for real Macs: {rate(estimate.tokens_per_s)} tokens/s (likely {rate(low)}–"
        f"{rate(high)}) (M3 Ultra, single)" in text
    )
    assert "docs/estimate.md" in text
    assert "estimate" not in plan_to_dict(plan)  # without one, the JSON is as before


def test_parse_node_takes_an_optional_chip():
    assert parse_node("studio:192@M3-Ultra") == Node("studio", 192 * GIB, chip="M3 Ultra")
    assert parse_node("mini:64:57344@m4 pro") == Node(
        "mini", 64 * GIB, wired_limit_mb=57344, chip="M4 Pro"
    )
    assert parse_node("me@home:64") == Node("me@home", 64 * GIB)  # an @ in a name, no chip
    with pytest.raises(ValueError, match="unknown chip 'M9'; known: M1, M1 Pro"):
        parse_node("studio:192@M9")


def test_macmesh_plan_json_carries_the_estimate(tiny_models: dict[str, Path]):
    out = io.StringIO()
    argv = [str(tiny_models["qwen3"]), "--node", "a:16@M4-Max", "--node", "b:16@M4 Max"]
    code = plan_cli([*argv, "--strategy", "tensor", "--rdma", "--json"], out=out)
    data = json.loads(out.getvalue())
    assert code == 0 and data["estimate"]["label"] == "estimate"
    model = read_model_info(tiny_models["qwen3"])
    nodes = [Node("a", 16 * GIB, chip="M4 Max"), Node("b", 16 * GIB, chip="M4 Max")]
    links = [Link("a", "b", 80.0, True)]
    plan = make_plan(model, nodes, links, PlanOptions(strategy="tensor"))
    expected = estimate_plan(model, plan, nodes, links)
    assert data["estimate"]["tokens_per_s"] == round(expected.tokens_per_s, 2)
    assert data["estimate"]["link"]["name"] == "RDMA over Thunderbolt 5"


def test_macmesh_plan_says_when_a_chip_is_unknown(tiny_models: dict[str, Path]):
    out = io.StringIO()
    assert plan_cli([str(tiny_models["llama"]), "--node", "a:8"], out=out) == 0
    assert "No estimate: chip unknown for a" in out.getvalue()


def test_the_doc_is_what_the_code_computes():
    doc = DOC.read_text()
    assert calibration_table() in doc
    assert worked_examples_table() in doc
    assert f"EFFICIENCY = {EFFICIENCY}" in doc
    assert f"KV_GROUP_EXPONENT = {KV_GROUP_EXPONENT}" in doc
    assert f"LAYER_OVERHEAD_S = {LAYER_OVERHEAD_S * 1e6:.0f} µs" in doc
    assert f"MOE_LAYER_OVERHEAD_S = {MOE_LAYER_OVERHEAD_S * 1e6:.0f} µs" in doc
    assert f"PIPELINE_HOP_S = {PIPELINE_HOP_S * 1e3:.1f} ms" in doc
    assert f"BAND_DENSE = {BAND_DENSE:.0%}".replace("%", " %") in doc
    assert f"BAND_MOE = {BAND_MOE:.0%}".replace("%", " %") in doc
    fitted = [p for p in ALL_CALIBRATION if p.moe and p.fitted]
    held = [p for p in ALL_CALIBRATION if p.moe and not p.fitted]
    assert f"{len(fitted)} mixture-of-experts figures were fitted" in doc
    assert f"and\n{len(held)} held back, the worst of those " in doc
    worst = min((p.error for p in held), key=lambda e: -abs(e))
    assert f"the worst of those {worst:+.1%}" in doc
    for chip in CHIPS.values():
        assert f"| {chip.bandwidth_gbs:g} |" in doc, chip.name
    # The hand-worked example's numbers are the code's.
    tensor = WORKED_EXAMPLES[1].estimate()
    assert WORKED_EXAMPLES[1].label == "2 × M3 Ultra, tensor, RDMA"
    assert f"{tensor.nodes[0].bytes_per_token:,}" in doc
    assert f"{tensor.compute_s * 1e3:.2f} ms" in doc and f"{tensor.link_s * 1e3:.2f} ms" in doc
    assert f"**{tensor.tokens_per_s:.2f} tokens/s**" in doc
    assert (
        f"{RDMA.latency_s * 1e6:.0f} µs | {RDMA.per_peer_s * 1e6:.0f} µs | "
        f"{RDMA.bytes_per_s / 1e9:g} GB/s" in doc
    )
    assert f"{TCP_RING.latency_s * 1e6:.0f} µs | — | 10 Gb/s" in doc
