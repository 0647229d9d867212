"""Every strategy's plan for a model on the shown nodes, so the window can compare them.

Pure and fast (the planner does arithmetic on header facts), so it runs on the GUI thread.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.model.info import ModelInfo
from core.plan.memory import Node, PlanOptions
from core.plan.planner import Plan, make_plan
from core.worker.vocab import Strategy

CHOICES = (Strategy.AUTO, Strategy.PIPELINE, Strategy.TENSOR)  # what a person can choose
LABELS = {
    Strategy.AUTO: "Auto",
    Strategy.PIPELINE: "Pipeline",
    Strategy.TENSOR: "Tensor",
    Strategy.SINGLE: "Single Mac",  # what auto may pick
}
BLURBS = {
    Strategy.AUTO: "MacMesh picks the best fit",
    Strategy.PIPELINE: "whole layers per Mac",
    Strategy.TENSOR: "every layer split across Macs",
}


def as_node(record: object) -> Node:
    """A planner Node from a node record (DemoMac has ``node()``; others give the facts)."""
    make = getattr(record, "node", None)
    if callable(make):
        return make()
    return Node(
        record.name,  # type: ignore[attr-defined]
        record.memory_bytes,  # type: ignore[attr-defined]
        chip=getattr(record, "chip", None),
        rdma=getattr(record, "rdma", None),
    )


def plan_all(info: ModelInfo, records: Sequence[object]) -> dict[Strategy, Plan]:
    """The plan of each choice. On one node pipeline and tensor are "invalid" with the
    planner's reason (they need two), and auto plans a single Mac."""
    nodes = [as_node(record) for record in records]
    return {
        choice: make_plan(info, nodes, options=PlanOptions(strategy=choice)) for choice in CHOICES
    }
