"""Every strategy's plan for a model on the shown nodes, so the window can compare them.

Pure and fast (the planner does arithmetic on header facts), so it runs on the GUI thread.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.cluster.probe.facts import NodeFacts
from core.model.info import ModelInfo
from core.plan.estimate import Estimate
from core.plan.planner import Plan, make_plan
from core.run.planning import Serving, chat_options, estimate_on, plan_on, planner_node
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


def plan_all(
    info: ModelInfo, facts: Sequence[NodeFacts], serving: Serving | None = None
) -> dict[Strategy, Plan]:
    """The plan of each choice on the nodes' probed facts, for the batch and prompt cache
    the job will run (``serving``; None: the settings'). On one node pipeline and tensor
    are "invalid" with the planner's reason (they need two), and auto plans a single Mac;
    on several Macs whose chips are known auto picks the fastest estimate."""
    nodes = [planner_node(f) for f in facts]
    serving = serving or Serving.chosen()
    plans = {
        choice: make_plan(info, nodes, options=chat_options(choice, serving=serving))
        for choice in CHOICES
    }
    if len(nodes) > 1:
        plans[Strategy.AUTO] = plan_on(info, facts, Strategy.AUTO, serving=serving)
    return plans


def estimate_all(
    info: ModelInfo, facts: Sequence[NodeFacts], plans: dict[Strategy, Plan]
) -> dict[Strategy, Estimate]:
    """Each choice's speed estimate on the real Macs the facts name (their chips; RDMA
    when every Mac has it on): what the Model pane shows under each, before Start."""
    return {choice: estimate_on(info, plan, facts) for choice, plan in plans.items()}
