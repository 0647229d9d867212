"""``auto`` by speed: among the strategies that fit, the one the estimate says is fastest.

The planner's own rule (``core/plan/planner.py``: one Mac if it holds the model, else
tensor over RDMA, else pipeline) knows memory, not speed. When every Mac's chip is known,
``plan_by_speed`` plans each strategy, estimates each that fits (``core/plan/estimate.py``)
and keeps the fastest: at batch 1 for chat, in all at the batch for serving. Its reason
opens with one line saying why ("tensor: 1.6× one Mac (estimate)"). Without chips, or for
a strategy asked by name, it is the planner's plan unchanged. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from core.model.info import ModelInfo
from core.plan.chips import chip_spec
from core.plan.estimate import Estimate, estimate_plan
from core.plan.memory import Link, Node, PlanOptions
from core.plan.planner import Plan, make_plan
from core.worker.vocab import Strategy

__all__ = ["Choice", "plan_by_speed", "speed_of"]

_ORDER = (Strategy.SINGLE, Strategy.TENSOR, Strategy.PIPELINE)


@dataclass(frozen=True)
class Choice:
    """The plan, its estimate, and every strategy's estimate (one that does not fit or
    cannot be estimated: its "no estimate: why")."""

    plan: Plan
    estimate: Estimate
    per_strategy: dict[Strategy, Estimate]

    def lines(self) -> list[str]:
        """ "tensor: 76.1 tokens/s (likely ...); 8 at once: ..." per strategy, the chosen
        first."""
        ordered = sorted(self.per_strategy.items(), key=lambda kv: kv[0] != self.plan.strategy)
        return [f"{strategy.value}: {e.figures_text()}" for strategy, e in ordered]


def speed_of(estimate: Estimate) -> float | None:
    """What ``auto`` compares: batch-1 tokens/s for chat, the aggregate at the batch for
    serving (None: no estimate)."""
    if estimate.tokens_per_s is None:
        return None
    if estimate.batch > 1 and estimate.aggregate_tokens_per_s is not None:
        return estimate.aggregate_tokens_per_s
    return estimate.tokens_per_s


def plan_by_speed(
    model: ModelInfo,
    nodes: Sequence[Node],
    links: Sequence[Link] = (),
    options: PlanOptions | None = None,
) -> Choice:
    """The plan for ``options`` (see the module); for ``auto`` with every chip known and
    more than one Mac, the fastest strategy that fits."""
    options = options or PlanOptions()
    base = make_plan(model, nodes, links, options)
    estimates = _each(model, nodes, links, options)
    chosen_estimate = estimate_plan(model, base, nodes, links)
    if len(nodes) > 1:
        estimates[base.strategy] = chosen_estimate
    if (
        options.strategy is not Strategy.AUTO
        or len(nodes) < 2
        or options.split is not None
        or any(chip_spec(n.chip, n.memory_bytes) is None for n in nodes)
    ):
        return Choice(base, chosen_estimate, estimates)
    speeds = {s: speed_of(e) for s, e in estimates.items()}
    known = {s: v for s, v in speeds.items() if v is not None}
    if not known:
        return Choice(base, chosen_estimate, estimates)
    fastest = max(known, key=lambda s: (known[s], s is base.strategy))
    why = _why(fastest, known, options.batch)
    if fastest is base.strategy:
        plan = replace(base, reason=f"{why} {base.reason}")
    else:
        picked = make_plan(model, nodes, links, replace(options, strategy=fastest))
        plan = replace(picked, requested=Strategy.AUTO, reason=f"{why} {picked.reason}")
    return Choice(plan, estimates[fastest], estimates)


def _each(
    model: ModelInfo, nodes: Sequence[Node], links: Sequence[Link], options: PlanOptions
) -> dict[Strategy, Estimate]:
    """Every strategy's estimate on several Macs (a split by hand is the pipeline's)."""
    if len(nodes) < 2:
        return {}
    estimates = {}
    for strategy in _ORDER:
        split = options.split if strategy is Strategy.PIPELINE else None
        plan = make_plan(model, nodes, links, replace(options, strategy=strategy, split=split))
        estimates[strategy] = estimate_plan(model, plan, nodes, links)
    return estimates


def _why(fastest: Strategy, speeds: dict[Strategy, float], batch: int) -> str:
    """ "tensor: 1.6× one Mac (estimate)." or "pipeline: the only strategy that fits
    (estimate 12.0 tokens/s).\""""
    what = "in all at the batch" if batch > 1 else "at batch 1"
    single = speeds.get(Strategy.SINGLE)
    if fastest is not Strategy.SINGLE and single:
        return f"{fastest.value}: {speeds[fastest] / single:.1f}× one Mac (estimate, {what})."
    others = {s: v for s, v in speeds.items() if s is not fastest}
    if not others:
        return (
            f"{fastest.value}: the only strategy that fits with an estimate "
            f"({speeds[fastest]:.1f} tokens/s, {what})."
        )
    runner, rate = max(others.items(), key=lambda kv: kv[1])
    return (
        f"{fastest.value}: the fastest estimate, {speeds[fastest] / rate:.1f}× "
        f"{runner.value} ({what})."
    )
