"""Probed facts → the planner: the one place a node's facts become a planner ``Node``.

It lives in ``core/run`` because planning (``core/plan``) and probing (``core/cluster``)
are independent layers: only a stage above both may join them. Light: the window plans
on the GUI thread with it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from core.cluster.probe.facts import NodeFacts
from core.cluster.rdma import node_verdict
from core.model.info import ModelInfo
from core.plan.choose import plan_by_speed
from core.plan.estimate import Estimate, estimate_plan, rdma_mesh
from core.plan.memory import Node, PlanOptions
from core.plan.planner import Plan, make_plan
from core.settings import load_settings
from core.units import MIB, rate
from core.worker import kvbits
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


@dataclass(frozen=True)
class Serving:
    """How many requests the ranks generate at once and how much each rank keeps of past
    conversations: one source for the plan (it counts both), the job (the worker's
    ``--batch`` and ``--prompt-cache-mb``) and the API (it runs ``batch`` at once)."""

    batch: int = p.DEFAULT_BATCH
    prompt_cache_mb: int = p.DEFAULT_PROMPT_CACHE_MB
    # The KV cache's bits (16: not quantized) and group size (core.worker.kvquant).
    kv_bits: int = kvbits.NONE
    kv_group_size: int = kvbits.DEFAULT_GROUP_SIZE

    def __post_init__(self) -> None:
        kvbits.check(self.kv_bits, self.kv_group_size)
        if not 1 <= self.batch <= p.MAX_BATCH:
            raise ValueError(
                f"the batch (--batch, the batch setting) must be 1 to {p.MAX_BATCH} requests, "
                f"not {self.batch}"
            )
        if self.prompt_cache_mb < 0:
            raise ValueError(
                "the prompt cache (--prompt-cache-mb, the prompt_cache_mb setting) must be "
                f"0 (none) or more MB, not {self.prompt_cache_mb}"
            )

    @classmethod
    def chosen(
        cls,
        batch: int | None = None,
        prompt_cache_mb: int | None = None,
        kv_bits: int | None = None,
        kv_group_size: int | None = None,
    ) -> Serving:
        """``batch``, ``prompt_cache_mb`` and the KV cache's bits and group size where
        given (a command line's options), else the settings' (``core.settings``: the
        window's and the CLI's)."""
        saved = load_settings()
        return cls(
            saved.batch if batch is None else batch,
            saved.prompt_cache_mb if prompt_cache_mb is None else prompt_cache_mb,
            saved.kv_bits if kv_bits is None else kv_bits,
            saved.kv_group_size if kv_group_size is None else kv_group_size,
        )

    @classmethod
    def planned(cls, options: PlanOptions) -> Serving:
        """What a plan was made for (``chat_options`` made its options from a Serving)."""
        return cls(
            options.batch, options.prompt_cache_bytes // MIB, options.kv_bits, options.kv_group_size
        )

    def spec_fields(self) -> dict[str, int]:
        """The ``JobSpec`` fields that run it."""
        return {
            "batch": self.batch,
            "prompt_cache_mb": self.prompt_cache_mb,
            "kv_bits": self.kv_bits,
            "kv_group_size": self.kv_group_size,
        }


def chat_options(
    strategy: Strategy | str = Strategy.AUTO,
    split: Sequence[int] | None = None,
    serving: Serving | None = None,
) -> PlanOptions:
    """The planner's options for a chat job: the ranks hold their batch of requests' KV
    caches (``core.worker.batching``) and their share of the prompt cache's bound."""
    serving = serving or Serving.chosen()
    return PlanOptions(
        strategy=Strategy(strategy),
        split=None if split is None else tuple(split),
        batch=serving.batch,
        prompt_cache_bytes=serving.prompt_cache_mb * MIB,
        kv_bits=serving.kv_bits,
        kv_group_size=serving.kv_group_size,
    )


def plan_on(
    info: ModelInfo,
    facts: Sequence[NodeFacts],
    strategy: Strategy | str = Strategy.AUTO,
    split: Sequence[int] | None = None,
    serving: Serving | None = None,
) -> Plan:
    """The planner's verdict for ``strategy`` on these nodes (one node: single), with
    the pipeline ``split`` set by hand (rank order) when given, for ``serving`` (None:
    the settings'). "auto" on several Macs whose chips are known picks the fastest
    estimate among the strategies that fit (``core/plan/choose.py``), RDMA counted when
    every Mac has it on."""
    nodes = [planner_node(f) for f in facts]
    chosen = Strategy.SINGLE if len(nodes) == 1 and split is None else Strategy(strategy)
    options = chat_options(chosen, split, serving)
    if chosen is Strategy.AUTO:
        return plan_by_speed(info, nodes, rdma_mesh(nodes), options).plan
    return make_plan(info, nodes, options=options)


def estimate_on(info: ModelInfo, plan: Plan, facts: Sequence[NodeFacts]) -> Estimate:
    """The speed **estimate** for ``plan`` on the real Macs ``facts`` name (their chips;
    RDMA links when every one of them has RDMA on): what the demo's simulated Macs, which
    share this machine, would do as real Macs (core/plan/estimate.py)."""
    used = set(plan.nodes_used)
    nodes = [planner_node(f) for f in facts if f.name in used]
    return estimate_plan(info, plan, nodes, rdma_mesh(nodes))


def shared_machine(macs: int, cores: int | None = None) -> str:
    """The demo's plain caveat, in the words every surface opens it with (Compare, the
    link test, in the window and the CLI): "Simulated Macs: the 4 demo Macs share this
    machine's 2 cores and its loopback". What each surface measured follows it."""
    return f"Simulated Macs: {sharing(macs, cores)}"


def sharing(macs: int, cores: int | None = None) -> str:
    """What the demo's Macs share: "the 4 demo Macs share this machine's 2 cores and its
    loopback" (``shared_machine``'s words, for a sentence that opens otherwise)."""
    cores = cores or os.cpu_count() or 1
    return f"the {macs} demo Macs share this machine's {cores} cores and its loopback"


def links_simulated(macs: int, cores: int | None = None) -> str:
    """The link test's caveat on the demo: its rates are loopback's, not a cable's."""
    return (
        f"{shared_machine(macs, cores)}, so these rates are loopback's and say nothing "
        "about real Macs' cables."
    )


@dataclass(frozen=True)
class EstimateBeside:
    """What Compare shows beside its measured figures: the estimate for the real Macs
    each run names (by the run's label), and whether the Macs were the demo's simulated
    ones, which share this machine's cores and loopback."""

    estimates: dict[str, Estimate]
    simulated: bool
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)

    def to_dict(self) -> dict[str, object]:
        return {
            "simulated": self.simulated,
            "estimate": {what: e.to_dict() for what, e in self.estimates.items()},
        }


def estimates_beside(
    info: ModelInfo,
    runs: Mapping[str, tuple[Plan | None, Sequence[NodeFacts]]],
    *,
    simulated: bool,
) -> EstimateBeside:
    """Each run's estimate from its plan and its Macs' facts (a run not planned: none)."""
    estimates = {
        what: estimate_on(info, plan, facts) for what, (plan, facts) in runs.items() if plan
    }
    return EstimateBeside(estimates, simulated)


def estimate_cell(estimate: Estimate | None) -> str:
    """A run's estimate in a table: "15.9 tokens/s (est.), likely 14.2–18.1; 8 at once:
    61.0 tokens/s in all" (the figures ``Estimate.rate_text`` and ``aggregate_text`` give
    the CLI and the Model pane), or why there is none."""
    if estimate is None:
        return "—"
    if estimate.tokens_per_s is None:
        return f"none: {estimate.reason}"
    cell = f"{rate(estimate.tokens_per_s)} tokens/s (est.)"
    band = estimate.band
    if band is not None:
        cell += f", likely {rate(band[0])}–{rate(band[1])}"
    aggregate = estimate.aggregate_text()
    return f"{cell}; {aggregate}" if aggregate else cell


def runnable_strategies(
    info: ModelInfo, facts: Sequence[NodeFacts], serving: Serving | None = None
) -> list[Strategy]:
    """The strategies the planner accepts for ``info`` on these nodes: single when one
    of them holds the whole model, pipeline and tensor across all of them (tensor only
    where mlx-lm can shard the architecture and the heads divide)."""
    runnable = []
    if any(plan_on(info, [f], serving=serving).fits for f in facts):
        runnable.append(Strategy.SINGLE)
    if len(facts) > 1:
        for strategy in (Strategy.PIPELINE, Strategy.TENSOR):
            if plan_on(info, facts, strategy, serving=serving).fits:
                runnable.append(strategy)
    return runnable


def failure_advice(
    architecture: str, strategy: Strategy, nodes: int, runnable: list[Strategy]
) -> str:
    """After a job failed: which architecture failed on which strategy, and what else the
    planner accepts for it here (one node, tensor, pipeline), if anything."""
    how = "one node" if strategy is Strategy.SINGLE else f"a {nodes}-node {strategy}"
    words = {Strategy.SINGLE: "one node", Strategy.PIPELINE: "pipeline", Strategy.TENSOR: "tensor"}
    others = [words[s] for s in runnable if s is not strategy and s in words]
    said = f"The {architecture} model failed on {how}."
    if not others:
        return said
    return f"{said} {' or '.join(others).capitalize()} can run it on these Macs: try that."
