"""How long planning takes: a 1,000-layer model on 8 Macs (the issue's budget is 50 ms).

``bench_planner()`` returns JSON-able figures; run this file to print them.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import replace

from core.model.info import ModelInfo
from core.plan.memory import Node, activation_bytes, kv_bytes_per_layer, node_budget
from core.plan.planner import Link, PlanOptions, make_plan
from core.plan.split import fit_split, proportional_counts, segment_loads
from tests.helpers.header_models import thousand_layer_case

BUDGET_MS = 50.0


def bench_planner(runs: int = 21) -> dict:
    """Median and worst of ``runs`` plans for each case, in milliseconds.

    Cases: the proportional split needs repair (the slow path), the same with RDMA links
    (tensor is evaluated too; the 64 GB Macs bound it), and a forced pipeline of equal
    layers whose proportional split fits at once (the fast path).
    """
    model, nodes = thousand_layer_case()
    mesh = [Link(a.name, b.name, 80.0, True) for i, a in enumerate(nodes) for b in nodes[i + 1 :]]
    cases = {
        "auto_pipeline_repaired": (model, nodes, (), PlanOptions()),
        "auto_with_rdma_links": (model, nodes, mesh, PlanOptions()),
        "forced_pipeline_even_layers": (
            _even(model),
            nodes,
            (),
            PlanOptions(strategy="pipeline"),
        ),
    }
    figures: dict[str, object] = {
        "layers": model.layers,
        "nodes": len(nodes),
        "runs": runs,
        "budget_ms": BUDGET_MS,
        "repair_needed": _repair_needed(model, nodes),
    }
    for name, (m, n, links, options) in cases.items():
        plan = make_plan(m, n, links, options)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            make_plan(m, n, links, options)
            times.append((time.perf_counter() - start) * 1000)
        figures[name] = {
            "strategy": plan.strategy,
            "verdict": plan.verdict,
            "median_ms": round(statistics.median(times), 3),
            "max_ms": round(max(times), 3),
        }
    figures["within_budget"] = all(
        figures[name]["median_ms"] < BUDGET_MS
        for name in cases  # type: ignore[index]
    )
    return figures


def _even(model: ModelInfo) -> ModelInfo:
    size = sum(model.layer_bytes) // model.layers
    return replace(model, layer_bytes=(size,) * model.layers)


def _repair_needed(model: ModelInfo, nodes: list[Node]) -> bool:
    """True when the proportional target overflows a node, so the repair search runs."""
    options = PlanOptions()
    budgets = [node_budget(n, options) for n in nodes]
    ranked = sorted(budgets, key=lambda b: (-b.usable_bytes, b.node))
    fixed = model.shared_bytes + activation_bytes(model, options)
    costs = [b + kv_bytes_per_layer(model, options) for b in model.layer_bytes]
    caps = [b.usable_bytes - fixed for b in reversed(ranked)]
    target = proportional_counts(model.layers, caps)
    loads = segment_loads(costs, target)
    return any(load > cap for load, cap in zip(loads, caps, strict=True)) and (
        fit_split(costs, caps, target) is not None
    )


if __name__ == "__main__":
    print(json.dumps(bench_planner(), indent=2))
