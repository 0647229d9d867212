"""Compare's estimate beside its measured figures, and the demo's plain caveat."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from core.cli.compare import side_by_side
from core.plan.estimate import RDMA, TCP_RING
from core.run.demo import DEMO_MACS
from core.run.planning import estimate_on, estimates_beside, plan_on, rdma_on
from core.run.tasks.compare import Comparison, Headlines, RunFigures, headlines
from tests.helpers.header_models import synthetic_model_info

GIB = 1 << 30


def _run(label: str, nodes: list[str], tps: float) -> RunFigures:
    return RunFigures(
        label,
        nodes,
        "single" if len(nodes) == 1 else "pipeline",
        len(nodes),
        tps,
        10 * tps,
        0.5,
        24,
        12,
        dict.fromkeys(nodes, GIB),
        "Paris",
    )


def test_on_the_demo_compare_says_the_macs_are_simulated_and_estimates_the_real_ones():
    info = synthetic_model_info(layers=30, layer_bytes=3_000_000, shared_bytes=28_000_000)
    macs = list(DEMO_MACS[:2])  # Studio A (M3 Ultra) and Studio B (M4 Max)
    one_plan = plan_on(info, macs[:1])
    cluster_plan = plan_on(info, macs, "pipeline")
    beside = estimates_beside(
        info, {"one Mac": (one_plan, macs[:1]), "cluster": (cluster_plan, macs)}, simulated=True
    )
    one, cluster = beside.estimates["one Mac"], beside.estimates["cluster"]
    assert one.tokens_per_s == pytest.approx(estimate_on(info, one_plan, macs[:1]).tokens_per_s)
    assert [n.chip for n in cluster.nodes] == ["M3 Ultra", "M4 Max"]
    assert cluster.link is (RDMA if all(rdma_on(m) for m in macs) else TCP_RING)
    result = Comparison(
        _run("one Mac", ["Studio A"], 8.0),
        _run("cluster", ["Studio A", "Studio B"], 9.6),
        "pipeline",
    )
    text = side_by_side(result, beside)
    lead = next(line for line in text.splitlines() if line.startswith("Estimate for the real"))
    ratio = cluster.tokens_per_s / one.tokens_per_s
    assert lead.startswith(f"Estimate for the real Macs: {ratio:.{1 if ratio >= 1.05 else 2}f}×")
    measured = text.splitlines()[text.splitlines().index(lead) + 1]  # the estimate first
    assert measured.startswith("Measured on simulated Macs: 1.2× faster on 2 Macs (9.60 vs 8.00")
    assert f"the 2 demo Macs share this machine's {beside.cores} cores and its loopback" in text
    row = next(line for line in text.splitlines() if line.startswith("estimate"))
    assert f"{one.tokens_per_s:.0f} tokens/s (est.)" in row
    assert cluster.summary() in text
    data = json.loads(json.dumps({**result.to_dict(), **beside.to_dict()}))
    assert data["simulated"] is True
    assert data["estimate"]["cluster"]["label"] == "estimate"
    assert data["estimate"]["cluster"]["tokens_per_s"] == round(cluster.tokens_per_s, 2)


def test_on_real_macs_there_is_no_caveat_and_an_unknown_chip_says_so():
    info = synthetic_model_info(layers=30, layer_bytes=3_000_000, shared_bytes=28_000_000)
    macs = [DEMO_MACS[0], replace(DEMO_MACS[1], chip=None)]
    plan = plan_on(info, macs, "pipeline")
    beside = estimates_beside(
        info, {"cluster": (plan, macs), "one Mac": (None, [])}, simulated=False
    )
    assert list(beside.estimates) == ["cluster"]
    result = Comparison(
        None, _run("cluster", ["Studio A", "Studio B"], 9.6), "pipeline", "needs it"
    )
    text = side_by_side(result, beside)
    assert "Simulated" not in text and "simulated" not in text
    assert "none: chip unknown for Studio B" in text
    assert headlines(result, beside) == Headlines(result.headline())  # the measure leads


def test_on_real_macs_compare_prints_measured_over_estimate_and_keeps_it():
    info = synthetic_model_info(layers=30, layer_bytes=3_000_000, shared_bytes=28_000_000)
    macs = list(DEMO_MACS[:2])
    one_plan, cluster_plan = plan_on(info, macs[:1]), plan_on(info, macs, "pipeline")
    runs = {"one Mac": (one_plan, macs[:1]), "cluster": (cluster_plan, macs)}
    beside = estimates_beside(info, runs, simulated=False)
    result = Comparison(
        _run("one Mac", ["Studio A"], 8.0),
        _run("cluster", ["Studio A", "Studio B"], 9.6),
        "pipeline",
        beside=beside,
    )
    one, cluster = beside.estimates["one Mac"], beside.estimates["cluster"]
    ratios = result.estimate_ratios
    assert ratios["one Mac"] == pytest.approx(8.0 / one.tokens_per_s)
    assert ratios["cluster"] == pytest.approx(9.6 / cluster.tokens_per_s)
    row = next(line for line in side_by_side(result, beside).splitlines() if "measured/est" in line)
    assert f"{ratios['one Mac']:.2f}×" in row and f"{ratios['cluster']:.2f}×" in row
    # The history keeps what the comparison's dict says: the ratios with it.
    kept = json.loads(json.dumps(result.to_dict()))
    assert kept["estimate_ratio"] == {k: round(v, 3) for k, v in ratios.items()}
    # On the demo the simulated Macs say nothing of the estimate: no ratio.
    demo = replace(result, beside=replace(beside, simulated=True))
    assert demo.estimate_ratios == {} and "measured/est" not in side_by_side(demo)
