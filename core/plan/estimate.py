"""An **estimate** of decode tokens/s on real Macs, from a plan, the model's bytes and the
chips' memory bandwidth. Pure functions, no I/O.

Decoding one token reads the weights it uses and the whole KV cache once; on Apple silicon
that read is the bottleneck. A token uses every dense weight, but of a mixture of experts'
routed experts only the ``k`` its router picks in each layer (``core/model/experts.py``).
So a node's time for its part of a token is

    (weights it reads + KV cache × group ** KV_GROUP_EXPONENT) / (EFFICIENCY × bandwidth)
        + its layers × LAYER_OVERHEAD_S (+ MOE_LAYER_OVERHEAD_S for a MoE layer)

and the links add theirs: tensor parallelism two all-reduces of one activation vector per
layer (the fixed per-layer costs do not shrink: every Mac runs every layer), a pipeline
one hand-off per stage boundary (the last stage's token going back to the first included).
Single: one node. Pipeline: the stages run one after another, so their times add, and at
batch 1 it is slower than one Mac. Tensor: every node works on every layer at once, so the
slowest sets the pace.

A batch of B sequences decodes B tokens a step: the step reads the experts the batch
routes to (N·(1-(1-k/N)^B) of N with uniform routing, an upper bound), every sequence's KV
cache, and pays the fixed costs once; the aggregate is B / the step's time.

The constants (``core/plan/costs.py``) were fitted to published figures
(``core/plan/calibration.py``); ``docs/estimate.md`` writes the model out with every
source, so a person can redo the numbers by hand. No time-to-first-token: prefill is
bound by the GPU's arithmetic, which Apple does not publish, so it is not estimated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from core.model.experts import Experts
from core.model.info import ModelInfo
from core.plan.chips import ChipSpec, chip_spec
from core.plan.costs import (
    BAND_DENSE,
    BAND_MOE,
    EFFICIENCY,
    KV_GROUP_EXPONENT,
    LABEL,
    LAYER_OVERHEAD_S,
    MOE_LAYER_OVERHEAD_S,
    PIPELINE_HOP_S,
    RDMA,
    TCP_RING,
    LinkProfile,
)
from core.plan.estimate_result import Estimate, NodeLoad
from core.plan.memory import Link, Node
from core.plan.planner import Plan, make_plan
from core.worker.vocab import Strategy

__all__ = [
    "EFFICIENCY",
    "LABEL",
    "LAYER_OVERHEAD_S",
    "RDMA",
    "TCP_RING",
    "Estimate",
    "LinkProfile",
    "NodeLoad",
    "Stage",
    "Workload",
    "estimate_decode",
    "estimate_plan",
    "rdma_mesh",
    "workload_of",
]


@dataclass(frozen=True)
class Workload:
    """What decoding one token reads, from the model's headers: each layer's weights (of
    which ``experts.layer_bytes`` are routed experts), the output head and one embedding
    row, the KV cache per token per layer, and one activation vector's size."""

    layer_bytes: tuple[int, ...]
    head_bytes: int
    kv_bytes_per_token_layer: int
    exchange_bytes: int
    kv_split_by_tensor: bool = True
    experts: Experts = field(default_factory=Experts)
    # Query heads per KV head (``group``): attention reads each KV head once per query head
    # sharing it, partly from the GPU's cache; the cache is counted group ** KV_GROUP_EXPONENT
    # times.
    kv_group: float = 1.0
    # Layer bytes tensor parallelism keeps whole on every rank (MacMesh's own tensor
    # sharding: ``ModelInfo.tensor_whole_bytes``), routed experts among them.
    whole_bytes: int = 0
    # All-reduces a step under tensor parallelism (0: two a layer).
    tensor_exchanges: int = 0

    def read_bytes(self, layer: int, batch: int = 1) -> float:
        """The bytes of ``layer``'s weights a step of ``batch`` tokens reads."""
        routed = self.experts.layer_bytes[layer] if self.experts.moe else 0
        return self.layer_bytes[layer] - routed + routed * self.experts.read_share(batch)

    def whole_read_bytes(self, batch: int = 1) -> float:
        """The bytes of the whole-on-every-rank parts a step reads: a mixture of experts'
        routed experts (always whole under MacMesh's own sharding) at their read share."""
        if not self.whole_bytes:
            return 0.0
        routed = sum(self.experts.layer_bytes) if self.experts.moe else 0
        return self.whole_bytes - routed + routed * self.experts.read_share(batch)

    def fixed_s(self, layer: int) -> float:
        """``layer``'s fixed cost a step."""
        moe = self.experts.moe and self.experts.layer_bytes[layer] > 0
        return LAYER_OVERHEAD_S + (MOE_LAYER_OVERHEAD_S if moe else 0.0)

    @property
    def band_share(self) -> float:
        return BAND_MOE if self.experts.moe else BAND_DENSE

    def experts_text(self) -> str:
        if self.experts.note:
            return f"Counted as dense: {self.experts.note}"
        if not self.experts.moe:
            return ""
        moe_layers = sum(1 for n in self.experts.layer_bytes if n)
        routed = sum(self.experts.layer_bytes)
        return (
            f"A mixture of experts: a token reads {self.experts.per_token} of "
            f"{self.experts.total} routed experts in each of {moe_layers} layers "
            f"({routed * self.experts.read_share() / 1e9:.2f} of {routed / 1e9:.2f} GB)"
        )


def workload_of(model: ModelInfo) -> Workload:
    """A ModelInfo's workload. The shared tensors are the embeddings, the final norm and
    the output head: a token reads one row of the embeddings but all of the head, so tied
    weights are read whole and untied ones half (the head, as big as the embeddings) plus
    one row of the other half."""
    if model.tie_word_embeddings:
        head = model.shared_bytes
    else:
        head = model.shared_bytes // 2 + model.shared_bytes // 2 // max(1, model.vocab_size)
    return Workload(
        layer_bytes=model.layer_bytes,
        head_bytes=head,
        kv_bytes_per_token_layer=model.kv_elements_per_token * model.dtype_bytes,
        exchange_bytes=model.hidden_size * model.dtype_bytes,
        kv_split_by_tensor=model.kv_split_by_tensor,
        experts=model.experts,
        kv_group=1.0 if not model.kv_split_by_tensor else model.heads / model.kv_heads,
        whole_bytes=model.tensor_whole_bytes,
        tensor_exchanges=model.tensor_exchanges,
    )


@dataclass(frozen=True)
class Stage:
    """One rank: its node, its chip, and the layers ``[start, end)`` it runs (under tensor
    parallelism every rank lists every layer and holds 1/N of each)."""

    node: str
    chip: ChipSpec
    layer_start: int
    layer_end: int
    reads_head: bool


def estimate_decode(
    work: Workload,
    strategy: Strategy,
    stages: Sequence[Stage],
    link: LinkProfile | None,
    context_tokens: int,
    batch: int = 1,
) -> Estimate:
    """Decode tokens/s for ``stages`` running ``work`` with ``strategy`` (see the module),
    one sequence, and in all for ``batch`` sequences at once."""
    loads, compute, link_s, fixed = _step(work, strategy, stages, link, context_tokens, 1)
    aggregate = 1 / (compute + link_s)
    if batch > 1:
        _, b_compute, b_link, _ = _step(work, strategy, stages, link, context_tokens, batch)
        aggregate = batch / (b_compute + b_link)
    return Estimate(
        strategy=strategy,
        tokens_per_s=1 / (compute + link_s),
        compute_s=compute,
        link_s=link_s,
        nodes=tuple(loads),
        link=link if len(stages) > 1 else None,
        context_tokens=context_tokens,
        band_share=work.band_share,
        batch=batch,
        aggregate_tokens_per_s=aggregate,
        experts=work.experts_text(),
        fixed_s=fixed,
    )


def _step(
    work: Workload,
    strategy: Strategy,
    stages: Sequence[Stage],
    link: LinkProfile | None,
    context: int,
    batch: int,
) -> tuple[list[NodeLoad], float, float, float]:
    """One decode step of ``batch`` sequences: each node's load, the compute time, the
    links' time and the fixed part of the compute time."""
    n = len(stages)
    shards = n if strategy is Strategy.TENSOR else 1
    kv_shards = shards if work.kv_split_by_tensor else 1
    loads = []
    fixed_by_node = []
    for stage in stages:
        layers = range(stage.layer_start, stage.layer_end)
        weights = sum(work.read_bytes(i, batch) for i in layers)
        if shards > 1:  # each rank reads its share of the split parts, the whole ones in full
            whole = work.whole_read_bytes(batch)
            weights = (weights - whole) / shards + whole
        weights += work.head_bytes if stage.reads_head else 0
        kv = work.kv_bytes_per_token_layer * context * len(layers) * batch / kv_shards
        kv *= work.kv_group**KV_GROUP_EXPONENT
        fixed = sum(work.fixed_s(i) for i in layers)
        bandwidth = stage.chip.bandwidth_bytes
        seconds = (weights + kv) / (EFFICIENCY * bandwidth) + fixed
        fixed_by_node.append(fixed)
        loads.append(
            NodeLoad(
                stage.node,
                stage.chip.name,
                stage.chip.bandwidth_gbs,
                len(layers),
                int(weights + kv),
                seconds,
            )
        )
    if strategy is Strategy.TENSOR:
        compute = max(load.seconds for load in loads)
        fixed_total = max(fixed_by_node)
    else:
        compute = sum(load.seconds for load in loads)
        fixed_total = sum(fixed_by_node)
    link_s = _link_seconds(work, strategy, n, len(work.layer_bytes), link, batch)
    return loads, compute, link_s, fixed_total


def _link_seconds(
    work: Workload,
    strategy: Strategy,
    n: int,
    layers: int,
    link: LinkProfile | None,
    batch: int,
) -> float:
    if n < 2 or link is None:
        return 0.0
    vector = work.exchange_bytes * batch
    if strategy is Strategy.TENSOR:
        # Two all-reduces of the step's activations per layer (one a split attention or
        # MLP under MacMesh's own sharding: a hybrid's recurrent mixers make none).
        exchanges = work.tensor_exchanges or layers * 2
        return exchanges * link.all_reduce_s(n, vector)
    # Pipeline: one hand-off per stage boundary, the last stage's token going back to the
    # first: the link's latency and the vector at its rate, and the stages' hand-over.
    return n * (link.latency_s + PIPELINE_HOP_S + vector / link.bytes_per_s)


def estimate_plan(
    model: ModelInfo,
    plan: Plan,
    nodes: Sequence[Node],
    links: Sequence[Link] = (),
) -> Estimate:
    """The estimate for ``plan``, on the real chips ``nodes`` name, at batch 1 and at the
    plan's batch; its reason says why there is none (a chip unknown, a plan that does
    not fit)."""
    by_name: Mapping[str, Node] = {node.name: node for node in nodes}
    stages = []
    unknown = []
    for rank in plan.ranks:
        node = by_name.get(rank.node)
        spec = chip_spec(node.chip, node.memory_bytes) if node is not None else None
        if spec is None:
            unknown.append(rank.node)
            continue
        stages.append(
            Stage(
                rank.node,
                spec,
                rank.layer_start,
                rank.layer_end,
                # Rank 0 runs the last layers and samples: the head is its to read (every
                # rank reads it at once under tensor parallelism).
                reads_head=plan.strategy is not Strategy.PIPELINE or rank.rank == 0,
            )
        )
    context = plan.options.context_length
    if plan.verdict == "invalid":  # what is wrong with it, never "does not fit" (issue 33)
        why = plan.reason.rstrip(".")
        return _none(plan, context, f"{why[:1].lower()}{why[1:]}")
    if not plan.fits or not plan.ranks:
        return _none(plan, context, "the plan does not fit, so it would not run")
    if unknown:
        return _none(plan, context, f"chip unknown for {', '.join(unknown)}")
    link = None
    if len(stages) > 1:
        link = RDMA if _all_rdma([s.node for s in stages], links) else TCP_RING
    work = workload_of(model)
    estimate = estimate_decode(work, plan.strategy, stages, link, context, plan.options.batch)
    if len(stages) > 1:
        estimate = replace(estimate, alone=_alone(model, plan, stages, by_name))
    return estimate


def _alone(
    model: ModelInfo, plan: Plan, stages: Sequence[Stage], nodes: Mapping[str, Node]
) -> tuple[str, str, float] | None:
    """The fastest of the plan's Macs on its own, if the model fits it."""
    best = max(stages, key=lambda s: s.chip.bandwidth_gbs)  # ties: the first, rank 0
    options = replace(plan.options, strategy=Strategy.SINGLE, split=None)
    if not make_plan(model, [nodes[best.node]], (), options).fits:
        return None
    whole = Stage(best.node, best.chip, 0, model.layers, reads_head=True)
    single = estimate_decode(
        workload_of(model), Strategy.SINGLE, [whole], None, plan.options.context_length
    )
    assert single.tokens_per_s is not None
    return best.node, best.chip.name, single.tokens_per_s


def _none(plan: Plan, context: int, reason: str) -> Estimate:
    return Estimate(plan.strategy, None, 0.0, 0.0, (), None, context, reason)


def rdma_mesh(nodes: Sequence[Node]) -> list[Link]:
    """RDMA links between every pair of ``nodes`` when every one has RDMA on (probed
    nodes carry no cabling, and JACCL runs only on a full mesh); none otherwise."""
    if len(nodes) < 2 or not all(node.rdma for node in nodes):
        return []
    return [Link(a.name, b.name, 80.0, True) for i, a in enumerate(nodes) for b in nodes[i + 1 :]]


def _all_rdma(names: Sequence[str], links: Sequence[Link]) -> bool:
    """Every pair of the ranks' nodes joined by an RDMA link (JACCL needs a full mesh)."""
    rdma = {frozenset((link.a, link.b)) for link in links if link.rdma}
    return all(frozenset((a, b)) in rdma for i, a in enumerate(names) for b in names[i + 1 :])
