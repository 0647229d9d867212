"""A Plan for people and programs: a readable table and a JSON-able dict.

``macmesh plan`` (``core/cli/plan.py``) prints them; pure formatting, no I/O.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from core.plan.estimate import Estimate
from core.plan.planner import Plan, RankPlan
from core.units import BYTES_NOTE, size
from core.worker.vocab import Strategy

_VERDICTS = {"fits": "fits", "does_not_fit": "does NOT fit", "invalid": "invalid"}


def plan_to_dict(plan: Plan, estimate: Estimate | None = None) -> dict[str, Any]:
    """Everything in the Plan plus the derived numbers (usable, need, fits), JSON-able;
    with ``estimate``, its speed estimate under "estimate" (labelled so, with its basis)."""
    even = plan.mlx_even_split
    result = {
        "model": plan.model,
        "requested": plan.requested,
        "strategy": plan.strategy,
        "verdict": plan.verdict,
        "reason": plan.reason,
        "nodes_used": list(plan.nodes_used),
        "split": list(plan.split) if plan.split is not None else None,
        "ranks": [_rank_dict(rank) for rank in plan.ranks],
        "budgets": [
            {**asdict(budget), "usable_bytes": budget.usable_bytes} for budget in plan.budgets
        ],
        "missing_bytes": plan.missing_bytes,
        "unused_bytes": plan.unused_bytes,
        "mlx_even_split": None
        if even is None
        else {
            "split": list(even.split),
            "fits": even.fits,
            "worst_node": even.worst.node,
            "worst_overflow_bytes": even.worst.overflow_bytes,
            "ranks": [_rank_dict(rank) for rank in even.ranks],
        },
        "alternatives": [asdict(alternative) for alternative in plan.alternatives],
        "warnings": list(plan.warnings),
        "options": asdict(plan.options),
        "kv_bytes_per_token": plan.kv_bytes_per_token,
    }
    if estimate is not None:
        result["estimate"] = estimate.to_dict()
    return result


def _rank_dict(rank: RankPlan) -> dict[str, Any]:
    return {
        **asdict(rank),
        "layers": rank.layers,
        "need_bytes": rank.need_bytes,
        "usable_bytes": rank.usable_bytes,
        "fits": rank.fits,
        "overflow_bytes": rank.overflow_bytes,
    }


def format_plan(plan: Plan, estimate: Estimate | None = None) -> str:
    """The plan as a person reads it: verdict and reason, one row per rank, and with
    ``estimate`` its speed estimate and the basis of it."""
    lines = [f"{plan.model}: {plan.strategy} ({_VERDICTS[plan.verdict]})", plan.reason, ""]
    if plan.ranks:
        header = (
            "rank",
            "node",
            "layers",
            "weights",
            "KV cache",
            "prompt cache",
            "activations",
            "margin",
            "total",
            "GPU limit",
            "free",
        )
        rows = [header] + [_row(plan, rank) for rank in plan.ranks]
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines += [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows
        ]
        lines.append("")
    even = plan.mlx_even_split
    if even is not None and plan.strategy is Strategy.PIPELINE:
        worst = even.worst
        counts = "/".join(str(c) for c in even.split)
        if even.fits:
            lines.append(f"MLX's even split ({counts}) would also fit.")
        else:
            lines.append(
                f"MLX's even split ({counts}) would need {size(worst.need_bytes)} on {worst.node}, "
                f"{size(worst.overflow_bytes)} more than it can give."
            )
    lines.append("Nodes:")
    for budget in plan.budgets:
        lines.append(
            f"  {budget.node}: {size(budget.memory_bytes)} RAM, GPU limit "
            f"{size(budget.gpu_limit_bytes)} ({budget.gpu_limit_source}), margin "
            f"{size(budget.margin_bytes)}, usable {size(budget.usable_bytes)}"
        )
    if plan.alternatives:
        lines.append("Other strategies:")
        lines += [f"  {a.strategy}: {_VERDICTS[a.verdict]}. {a.reason}" for a in plan.alternatives]
    if plan.warnings:
        lines.append("Warnings:")
        lines += [f"  - {warning}" for warning in plan.warnings]
    options = plan.options
    lines.append(
        f"Context {options.context_length} tokens, batch {options.batch}; KV cache "
        f"{size(plan.kv_bytes_per_token)} per token; prompt cache at most "
        f"{size(options.prompt_cache_bytes)} (each node holds its layers' share). "
        f"{BYTES_NOTE}."
    )
    if estimate is not None:
        lines += ["", estimate.summary()]
        if estimate.tokens_per_s is not None:
            lines += [f"  {line}" for line in estimate.basis().splitlines()]
    return "\n".join(lines)


def _row(plan: Plan, rank: RankPlan) -> tuple[str, ...]:
    if plan.strategy is Strategy.TENSOR:
        layers = f"all {rank.layers} (1/{len(plan.ranks)})"
    else:
        layers = f"{rank.layer_start}-{rank.layer_end - 1} ({rank.layers})"
    free = rank.usable_bytes - rank.need_bytes
    return (
        str(rank.rank),
        rank.node,
        layers,
        size(rank.weights_bytes),
        size(rank.kv_cache_bytes),
        size(rank.prompt_cache_bytes),
        size(rank.activation_bytes),
        size(rank.margin_bytes),
        size(rank.need_bytes + rank.margin_bytes),
        size(rank.gpu_limit_bytes),
        size(free) if free >= 0 else f"-{size(-free)} OVER",
    )
