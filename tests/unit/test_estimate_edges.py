"""The estimate's honest edges (issue 32, "What to build" 6), as a person meets them through
``macmesh plan`` and the planner: Thunderbolt 4 vs 5, the ring over TCP vs RDMA, mixed
chips, a model that does not fit; a folder of headers alone planned with a note that the
weights are absent; and one figure, formatted once, on every surface."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from core.cli.plan import WEIGHTS_ABSENT, plan_cli
from core.library.resolve import resolve_model
from core.model.info import ModelError
from core.plan.choose import plan_by_speed
from core.plan.costs import RDMA, TCP_RING
from core.plan.estimate import estimate_plan, rdma_mesh
from core.plan.memory import Link, Node, PlanOptions
from core.plan.planner import make_plan
from core.run.planning import estimate_cell
from core.units import rate
from core.worker.vocab import Strategy
from tests.helpers.header_models import (
    qwen3_moe_config,
    qwen3_moe_tensors,
    synthetic_model_info,
    write_header_only_model,
)

GIB = 1 << 30
# A dense 70B-class model in 4 bits: 80 layers of 480 MB, 1.2 GB of embeddings and head.
MODEL = synthetic_model_info(layers=80, layer_bytes=480_000_000, shared_bytes=1_200_000_000)
TENSOR = PlanOptions(strategy=Strategy.TENSOR, batch=1)


def _pair(chip_a: str, chip_b: str, memory_gb: int = 192) -> list[Node]:
    return [Node("a", memory_gb * GIB, chip=chip_a), Node("b", memory_gb * GIB, chip=chip_b)]


def _tensor(nodes: list[Node], links: list[Link]):
    return estimate_plan(MODEL, make_plan(MODEL, nodes, links, TENSOR), nodes, links)


@pytest.fixture(scope="module")
def qwen3_30b_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3-30B-A3B 4-bit as MLX stores it, every safetensors file its header alone."""
    folder = tmp_path_factory.mktemp("models") / "Qwen3-30B-A3B-4bit"
    config = qwen3_moe_config()
    return write_header_only_model(folder, config, qwen3_moe_tensors(config), files=4)


def test_thunderbolt_4_and_5_without_rdma_cost_the_same_and_rdma_over_5_less():
    nodes = _pair("M3 Ultra", "M3 Ultra")
    tb4 = _tensor(nodes, [Link("a", "b", 40.0, False)])
    tb5 = _tensor(nodes, [Link("a", "b", 80.0, False)])
    rdma = _tensor(nodes, [Link("a", "b", 80.0, True)])
    assert tb4.link is TCP_RING and tb5.link is TCP_RING and rdma.link is RDMA
    # Over TCP a few-KB activation vector costs the latency, not the cable's rate: the
    # two cables give one figure, and the basis says why.
    assert tb4.tokens_per_s == tb5.tokens_per_s
    assert "Thunderbolt 4 and 5 give the same figure" in tb4.basis()
    assert "RDMA over Thunderbolt 5" in rdma.basis() and "RDMA over" in rdma.summary()
    assert rdma.tokens_per_s and tb4.tokens_per_s and rdma.tokens_per_s > 2 * tb4.tokens_per_s
    # Two all-reduces a layer: 2(N-1) = 2 rounds of 300 µs over the ring, one over RDMA.
    assert tb4.link_s == pytest.approx(80 * 2 * TCP_RING.all_reduce_s(2, 8192 * 2))
    assert rdma.link_s == pytest.approx(80 * 2 * RDMA.all_reduce_s(2, 8192 * 2))


def test_the_ring_over_tcp_is_why_auto_keeps_one_mac_and_rdma_why_it_takes_the_cluster():
    nodes = [Node(f"s{i}", 192 * GIB, chip="M3 Ultra", rdma=True) for i in range(4)]
    tcp = [Node(n.name, n.memory_bytes, chip=n.chip, rdma=False) for n in nodes]
    options = PlanOptions(batch=1)
    over_rdma = plan_by_speed(MODEL, nodes, rdma_mesh(nodes), options)
    over_tcp = plan_by_speed(MODEL, tcp, rdma_mesh(tcp), options)
    assert rdma_mesh(tcp) == []  # one Mac without RDMA: the ring over TCP for all
    assert over_rdma.plan.strategy is Strategy.TENSOR
    assert re.match(r"tensor: \d\.\d× one Mac \(estimate, at batch 1\)\.", over_rdma.plan.reason)
    assert over_tcp.plan.strategy is Strategy.SINGLE
    tensor_tcp = over_tcp.per_strategy[Strategy.TENSOR]
    single = over_tcp.per_strategy[Strategy.SINGLE]
    assert tensor_tcp.tokens_per_s and single.tokens_per_s
    assert tensor_tcp.tokens_per_s < single.tokens_per_s and tensor_tcp.link is TCP_RING
    assert any(line.startswith("tensor: ") for line in over_tcp.lines())  # shown, not chosen


def test_mixed_chips_under_tensor_wait_for_the_slowest_and_a_pipeline_adds_both():
    link = [Link("a", "b", 80.0, True)]
    mixed = _tensor(_pair("M3 Ultra", "M4 Pro"), link)
    slow = _tensor(_pair("M4 Pro", "M4 Pro"), link)
    fast = _tensor(_pair("M3 Ultra", "M3 Ultra"), link)
    assert mixed.tokens_per_s == pytest.approx(slow.tokens_per_s)
    assert fast.tokens_per_s and mixed.tokens_per_s and fast.tokens_per_s > mixed.tokens_per_s
    assert "(M3 Ultra + M4 Pro, tensor over RDMA" in mixed.summary()
    basis = mixed.basis()
    assert "a (M3 Ultra, 819 GB/s)" in basis and "b (M4 Pro, 273 GB/s)" in basis
    nodes = _pair("M3 Ultra", "M4 Pro")
    pipeline_options = PlanOptions(strategy=Strategy.PIPELINE, batch=1)
    pipeline = estimate_plan(MODEL, make_plan(MODEL, nodes, link, pipeline_options), nodes, link)
    assert pipeline.compute_s == pytest.approx(sum(n.seconds for n in pipeline.nodes))
    assert pipeline.nodes[0].seconds != pipeline.nodes[1].seconds


def test_a_model_that_does_not_fit_gets_no_estimate_and_says_why():
    nodes = _pair("M4 Pro", "M4 Pro", memory_gb=16)
    choice = plan_by_speed(MODEL, nodes, (), PlanOptions(batch=1))
    assert not choice.plan.fits
    assert choice.estimate.tokens_per_s is None and choice.estimate.aggregate_text() == ""
    said = "no estimate: the plan does not fit, so it would not run"
    assert choice.estimate.rate_text() == said
    assert all(line.endswith(said) for line in choice.lines())
    assert estimate_cell(choice.estimate) == "none: the plan does not fit, so it would not run"
    assert choice.estimate.to_dict()["tokens_per_s"] is None
    # A strategy that cannot run at all (64 heads do not divide by 3 Macs) says so.
    three = [Node(f"s{i}", 192 * GIB, chip="M3 Ultra") for i in range(3)]
    tensor = plan_by_speed(MODEL, three, (), PlanOptions(batch=1)).per_strategy[Strategy.TENSOR]
    assert tensor.rate_text().startswith("no estimate: tensor parallelism is not possible"), (
        tensor.rate_text()
    )


def test_macmesh_plan_says_no_estimate_for_a_model_that_does_not_fit(qwen3_30b_folder: Path):
    out = io.StringIO()
    argv = [str(qwen3_30b_folder), "--node", "mini:16@M4-Pro"]
    assert plan_cli(argv, out=out) == 1
    assert "No estimate: the plan does not fit, so it would not run" in out.getvalue()
    out = io.StringIO()
    assert plan_cli([*argv, "--json"], out=out) == 1
    data = json.loads(out.getvalue())["estimate"]
    assert data["tokens_per_s"] is None and data["tokens_per_s_band"] is None
    assert data["aggregate_tokens_per_s"] is None


def test_macmesh_plan_on_a_folder_of_headers_alone_qwen3_30b_a3b_one_m3_max(
    qwen3_30b_folder: Path,
):
    """The Done-when as a person types it: a model folder (no hf:, nothing patched)."""
    argv = [str(qwen3_30b_folder), "--node", "mac:64@M3-Max"]
    out = io.StringIO()
    assert plan_cli([*argv, "--json"], out=out) == 0
    data = json.loads(out.getvalue())
    estimate = data["estimate"]
    assert 50 <= estimate["tokens_per_s"] <= 85, estimate["tokens_per_s"]
    low, high = estimate["tokens_per_s_band"]
    assert low < estimate["tokens_per_s"] < high
    assert estimate["aggregate_tokens_per_s"] > estimate["tokens_per_s"]
    assert data["weights_absent"] is True
    text = io.StringIO()
    assert plan_cli(argv, out=text) == 0
    assert text.getvalue().rstrip().endswith(WEIGHTS_ABSENT)
    said = re.search(r"Estimate for real Macs: ([\d.]+) tokens/s \(likely ", text.getvalue())
    assert said and float(said.group(1)) == pytest.approx(estimate["tokens_per_s"], abs=0.06)
    # To run it, the same folder is refused in one line that says what it is.
    with pytest.raises(ModelError, match=r"holds only the safetensors headers .* download"):
        resolve_model(str(qwen3_30b_folder), to_run=True)


def test_a_model_folder_with_its_weights_has_no_note(tiny_models: dict[str, Path]):
    out = io.StringIO()
    assert plan_cli([str(tiny_models["llama"]), "--node", "a:16@M4-Pro"], out=out) == 0
    assert WEIGHTS_ABSENT not in out.getvalue()
    out = io.StringIO()
    assert plan_cli([str(tiny_models["llama"]), "--node", "a:16", "--json"], out=out) == 0
    assert json.loads(out.getvalue())["weights_absent"] is False


def test_one_figure_formatted_once_on_every_surface():
    """plan's summary, its per-strategy lines, the Model pane's line (``figures_text``)
    and Compare's cell show the same tokens/s, band and aggregate (``core.units.rate``);
    --json carries the unrounded figure to two decimals."""
    nodes = [Node(f"s{i}", 192 * GIB, chip="M3 Ultra", rdma=True) for i in range(2)]
    choice = plan_by_speed(MODEL, nodes, rdma_mesh(nodes), PlanOptions(batch=8))
    for estimate in choice.per_strategy.values():
        assert estimate.tokens_per_s and estimate.aggregate_tokens_per_s and estimate.band
        shown = rate(estimate.tokens_per_s)
        low, high = (rate(b) for b in estimate.band)
        aggregate = f"8 at once: {rate(estimate.aggregate_tokens_per_s)} tokens/s in all"
        assert estimate.figures_text() == f"{shown} tokens/s (likely {low}–{high}); {aggregate}"
        assert f"{estimate.strategy.value}: {estimate.figures_text()}" in choice.lines()
        assert estimate_cell(estimate) == (
            f"{shown} tokens/s (est.), likely {low}–{high}; {aggregate}"
        )
        assert estimate.to_dict()["tokens_per_s"] == round(estimate.tokens_per_s, 2)
    chosen = choice.estimate
    assert f"Estimate for real Macs: {chosen.rate_text()} (" in chosen.summary()
    assert f"; {chosen.aggregate_text()}" in chosen.summary()
