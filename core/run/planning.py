"""Probed facts → the planner: the one place a node's facts become a planner ``Node``.

It lives in ``core/run`` because planning (``core/plan``) and probing (``core/cluster``)
are independent layers: only a stage above both may join them. Light: the window plans
on the GUI thread with it.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.cluster.probe.facts import NodeFacts
from core.cluster.rdma import node_verdict
from core.model.info import ModelInfo
from core.plan.memory import Node, PlanOptions
from core.plan.planner import Plan, make_plan
from core.worker import protocol as p
from core.worker.vocab import Strategy


def rdma_on(facts: NodeFacts) -> bool | None:
    """RDMA over Thunderbolt usable on the node; None while the probe cannot tell."""
    state = node_verdict(facts).state
    return None if state == "unknown" else state == "on"


def planner_node(facts: NodeFacts) -> Node:
    """The node as the planner sees it: memory (0 when unknown), the GPU wired limit,
    chip, RDMA, and whether MLX runs on its CPU (float weights then count), as probed."""
    return Node(
        facts.name,
        int(facts.memory_bytes or 0),
        wired_limit_mb=facts.wired_limit_mb,
        chip=facts.chip,
        rdma=rdma_on(facts),
        cpu=facts.runs_on_cpu,
    )


def plan_on(
    info: ModelInfo,
    facts: Sequence[NodeFacts],
    strategy: Strategy | str = Strategy.AUTO,
    split: Sequence[int] | None = None,
) -> Plan:
    """The planner's verdict for ``strategy`` on these nodes (one node: single), with
    the pipeline ``split`` set by hand (rank order) when given."""
    nodes = [planner_node(f) for f in facts]
    chosen = Strategy.SINGLE if len(nodes) == 1 and split is None else Strategy(strategy)
    # The ranks hold up to their batch of requests' KV caches at once (core.worker.batching).
    options = PlanOptions(
        strategy=chosen, split=None if split is None else tuple(split), batch=p.DEFAULT_BATCH
    )
    return make_plan(info, nodes, options=options)
