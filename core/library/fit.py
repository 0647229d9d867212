"""A model on a cluster in one word: fits (on one Mac), pipeline, tensor, or doesn't fit.

The planner decides; this only names its verdict for a list's badge.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.model.info import ModelInfo
from core.plan.memory import Link, Node, PlanOptions
from core.plan.planner import Plan, make_plan
from core.worker.vocab import Strategy

FITS = "fits"
NO_FIT = "doesn't fit"


def badge(plan: Plan) -> str:
    """ "fits" on one Mac, else the strategy's own word ("pipeline", "tensor")."""
    if not plan.fits:
        return NO_FIT
    if plan.strategy in (Strategy.PIPELINE, Strategy.TENSOR):
        return plan.strategy.value
    return FITS


def fit(
    info: ModelInfo,
    nodes: Sequence[Node],
    links: Sequence[Link] = (),
    options: PlanOptions | None = None,
) -> tuple[str, Plan]:
    """The planner's recommendation for ``info`` on ``nodes``, and its badge. ``options``:
    what a Start would plan with (``core.run.planning.chat_options``: the batch's KV caches
    and the prompt cache), so the badge and the Model pane's plan give the same verdict."""
    plan = make_plan(info, list(nodes), links, options or PlanOptions())
    return badge(plan), plan
