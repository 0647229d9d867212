"""Several models on one cluster (issue 37): each model has its own plan (a strategy and
its own set of Macs, ``core.plan.planner`` run on the Macs that model was given: the
command line's ``MODEL@STRATEGY:MACS`` or a models file's, ``core.cli.model_plans``);
together they fit when, on every Mac, the sum of what the ranks there of the models that
use it need at their peak (weights, the batch's KV cache, the
prompt cache's share, activations, what loading holds) is within that Mac's usable
memory (its GPU limit less the margin, counted once per Mac).

When they do not fit, ``place_together`` names the model to leave out and why: the
fewest models, the later listed first (the order given is the order of preference), whose
removal makes the rest fit. ``room_for`` is the server's question when a model is asked
for while others are loaded: which idle models, least recently used first, must unload
to make room for it (never one with requests running), or why it cannot be.

Pure: plans in, verdicts out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.plan.planner import Plan
from core.units import size as format_bytes


@dataclass(frozen=True)
class NodeUse:
    """One Mac's memory with several models: each model's need there, and its room."""

    node: str
    usable_bytes: int
    by_model: tuple[tuple[str, int], ...]  # (model, bytes its ranks need on this Mac)

    @property
    def used_bytes(self) -> int:
        return sum(need for _name, need in self.by_model)

    @property
    def fits(self) -> bool:
        return self.used_bytes <= self.usable_bytes

    @property
    def overflow_bytes(self) -> int:
        return max(0, self.used_bytes - self.usable_bytes)


@dataclass(frozen=True)
class Placement:
    """The verdict on a set of models: ``fits``, each Mac's use, and when it does not
    fit, the models to leave out (``leave_out``) and a one-line ``reason``."""

    nodes: tuple[NodeUse, ...]
    leave_out: tuple[str, ...]
    reason: str

    @property
    def fits(self) -> bool:
        return not self.leave_out and all(node.fits for node in self.nodes)


def node_use(plans: Sequence[tuple[str, Plan]]) -> tuple[NodeUse, ...]:
    """Each Mac's use by ``plans`` ((name, plan), in order), in the order Macs appear.
    A model the planner fits alone counts as fitting alone: a Mac's room is never less
    than one such model's need there (on a CPU node a plan's ranks grow to float32 after
    its verdict, so their sum can pass the budget the verdict was made on)."""
    usable: dict[str, int] = {}
    needs: dict[str, list[tuple[str, int]]] = {}
    for name, plan in plans:
        for budget in plan.budgets:
            usable.setdefault(budget.node, budget.usable_bytes)
        per_node: dict[str, int] = {}
        for rank in plan.ranks:
            per_node[rank.node] = per_node.get(rank.node, 0) + rank.need_bytes
            usable.setdefault(rank.node, rank.usable_bytes)
        for node, need in per_node.items():
            needs.setdefault(node, []).append((name, need))
            if plan.fits:  # the planner took it alone (its CPU growth counted after)
                usable[node] = max(usable[node], need)
    return tuple(NodeUse(node, usable[node], tuple(needs[node])) for node in needs)


def place_together(plans: Sequence[tuple[str, Plan]]) -> Placement:
    """Do the models of ``plans`` fit together? Each plan must fit alone first (a model
    that does not is left out with its planner's reason)."""
    names = [name for name, _plan in plans]
    if len(set(names)) != len(names):
        raise ValueError("a model is listed twice")
    alone = [(name, plan) for name, plan in plans if not plan.fits]
    if alone:
        name, plan = alone[0]
        nodes = node_use([(n, p) for n, p in plans if p.fits])
        left = tuple(n for n, _p in alone)
        return Placement(nodes, left, f"Leave out {name}: it does not fit alone ({plan.reason})")
    nodes = node_use(plans)
    if all(node.fits for node in nodes):
        return Placement(nodes, (), _fits_line(nodes))
    left = _fewest_to_leave_out(plans)
    worst = max(nodes, key=lambda node: node.overflow_bytes)
    parts = " + ".join(f"{name} {format_bytes(need)}" for name, need in worst.by_model)
    return Placement(
        nodes,
        left,
        f"These models do not fit together: {worst.node} would need "
        f"{format_bytes(worst.used_bytes)} ({parts}) but has {format_bytes(worst.usable_bytes)} "
        f"usable. Leave out {' and '.join(left)}, or serve it on other Macs.",
    )


def room_for(
    new: tuple[str, Plan],
    loaded: Sequence[tuple[str, Plan, float, bool]],
) -> tuple[list[str], str]:
    """What must unload so ``new`` fits beside ``loaded`` ((name, plan, last used, busy)):
    idle models, least recently used first, as few as needed. ([], "") when it fits as
    is; ([], reason) when it cannot fit even with every idle model unloaded."""
    name, plan = new
    if not plan.fits:
        return [], f"{name} does not fit on its Macs: {plan.reason}"
    kept = [(n, p) for n, p, _used, _busy in loaded]
    if place_together([*kept, new]).fits:
        return [], ""
    unload: list[str] = []
    idle = sorted((entry for entry in loaded if not entry[3]), key=lambda entry: entry[2])
    for victim, _plan, _used, _busy in idle:
        unload.append(victim)
        kept = [(n, p) for n, p in kept if n != victim]
        if place_together([*kept, new]).fits:
            return unload, ""
    busy = [n for n, _p, _used, is_busy in loaded if is_busy]
    why = place_together([*kept, new]).reason
    held = f" ({', '.join(busy)} answering now)" if busy else ""
    return [], f"{name} cannot be loaded beside the models that must stay{held}: {why}"


def _fewest_to_leave_out(plans: Sequence[tuple[str, Plan]]) -> tuple[str, ...]:
    """The fewest models whose removal makes the rest fit, later-listed ones first."""
    names = [name for name, _plan in plans]
    for count in range(1, len(names)):
        for left in _choices(names[::-1], count):
            rest = [(n, p) for n, p in plans if n not in left]
            if all(node.fits for node in node_use(rest)):
                return tuple(sorted(left, key=names.index))
    return tuple(names[1:]) or tuple(names)


def _choices(names: Sequence[str], count: int) -> list[tuple[str, ...]]:
    """Every ``count`` of ``names``, in order (the first names first)."""
    if count == 0:
        return [()]
    out: list[tuple[str, ...]] = []
    for i, name in enumerate(names):
        out.extend((name, *rest) for rest in _choices(names[i + 1 :], count - 1))
    return out


def _fits_line(nodes: Sequence[NodeUse]) -> str:
    return "They fit together: " + "; ".join(
        f"{node.node} {format_bytes(node.used_bytes)} of {format_bytes(node.usable_bytes)}"
        for node in nodes
    )
