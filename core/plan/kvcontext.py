"""The longest context a plan fits, with the KV cache as computed (16 bits) and quantized
(``--kv-bits``): what ``macmesh plan`` shows, so the gain of a quantized cache reads as
tokens. Pure: the planner asked at each length (a binary search, ~30 plans)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from core.model.info import ModelInfo
from core.plan.memory import Link, Node, PlanOptions
from core.plan.planner import Plan, make_plan
from core.worker import kvbits

LONGEST = 1 << 24  # tokens: no model's context is longer


@dataclass(frozen=True)
class ContextFit:
    """The longest context that fits at each KV bits (0: not even one token)."""

    bits: int
    tokens: int
    limit: int | None  # the model's own context, when its config says

    def line(self) -> str:
        kind = "as computed" if self.bits == kvbits.NONE else "quantized"
        capped = (
            " (the model's own limit)"
            if self.limit is not None and self.tokens >= self.limit
            else ""
        )
        return f"KV cache at {self.bits} bits ({kind}): up to {self.tokens:,} tokens{capped}"


def longest_context(
    model: ModelInfo,
    nodes: Sequence[Node],
    plan: Plan,
    bits: int,
    links: Sequence[Link] = (),
) -> ContextFit:
    """The longest context ``plan``'s strategy fits on ``nodes``, for its batch and prompt
    cache, with the KV cache at ``bits``; capped at the model's own context."""
    options: PlanOptions = replace(plan.options, strategy=plan.strategy, kv_bits=bits)
    limit = model.context_length
    top = min(limit, LONGEST) if limit else LONGEST

    def fits(tokens: int) -> bool:
        return make_plan(model, nodes, links, replace(options, context_length=tokens)).fits

    if not fits(1):
        return ContextFit(bits, 0, limit)
    low, high = 1, top
    if fits(high):
        return ContextFit(bits, high, limit)
    while high - low > 1:  # fits(low), not fits(high)
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return ContextFit(bits, low, limit)


def context_fits(
    model: ModelInfo, nodes: Sequence[Node], plan: Plan, links: Sequence[Link] = ()
) -> list[ContextFit]:
    """16 bits, and the plan's own bits when quantized: what ``plan`` prints."""
    chosen = plan.options.kv_bits
    bits = [kvbits.NONE] if chosen == kvbits.NONE else [kvbits.NONE, chosen]
    return [longest_context(model, nodes, plan, b, links) for b in bits]
