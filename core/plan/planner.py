"""ModelInfo + nodes → Plan: which strategy, which Macs in which rank order, how many layers
each, how many bytes each, whether it fits, and why. Pure functions, no I/O.

Memory per node is weights + KV cache + activations + a safety margin, against what macOS
lets the GPU wire (plan_memory). Weights are the model's real per-layer bytes from its
safetensors headers; every pipeline stage also keeps the shared tensors (embeddings, final
norm, output head), as mlx-lm's sharded loading does. plan_report renders a Plan as a
table or JSON and implements ``macmesh plan``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from core.model.info import ModelInfo
from core.plan.memory import (
    CPU_FLOAT_BYTES,
    KV_CACHE_STEP,
    Link,
    Node,
    NodeBudget,
    PlanOptions,
    activation_bytes,
    cpu_load_bytes,
    cpu_weight_bytes,
    default_gpu_limit_bytes,
    kv_bytes_per_layer,
    node_budget,
    prompt_cache_bytes_per_layer,
)
from core.plan.split import fit_split, proportional_counts
from core.units import MIB, size
from core.worker.vocab import Strategy

__all__ = [
    "Alternative",
    "EvenSplit",
    "Link",
    "Node",
    "NodeBudget",
    "Plan",
    "PlanOptions",
    "RankPlan",
    "default_gpu_limit_bytes",
    "make_plan",
    "node_budget",
]

Verdict = Literal["fits", "does_not_fit", "invalid"]


@dataclass(frozen=True)
class RankPlan:
    """One rank: its node, its layers [layer_start, layer_end) and its bytes. Under tensor
    parallelism every rank lists all layers and holds 1/N of each."""

    rank: int
    node: str
    layer_start: int
    layer_end: int
    weights_bytes: int
    kv_cache_bytes: int
    activation_bytes: int
    margin_bytes: int
    gpu_limit_bytes: int
    # On a CPU node, whether quantized layers become float32 (room for them) or stay;
    # None elsewhere (Metal), or for a model that is not quantized.
    float_weights: bool | None = None
    # On a CPU node, what loading holds beyond the weights at its peak (cpu_load_bytes);
    # 0 on Metal, where the weights are used as stored.
    load_bytes: int = 0
    # Its share of the prompt cache's bound (core.worker.promptcache): conversations' KV
    # caches kept between requests, its layers' (pipeline) or its slice's (tensor).
    prompt_cache_bytes: int = 0

    @property
    def worker_weights(self) -> str:
        """The worker's ``--weights`` for this rank."""
        return {None: "auto", True: "float", False: "quantized"}[self.float_weights]

    @property
    def layers(self) -> int:
        return self.layer_end - self.layer_start

    @property
    def need_bytes(self) -> int:
        """What the model takes on this node at its peak, margin excluded."""
        return (
            self.weights_bytes
            + self.kv_cache_bytes
            + self.prompt_cache_bytes
            + self.activation_bytes
            + self.load_bytes
        )

    @property
    def usable_bytes(self) -> int:
        return max(0, self.gpu_limit_bytes - self.margin_bytes)

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.usable_bytes

    @property
    def overflow_bytes(self) -> int:
        return max(0, self.need_bytes - self.usable_bytes)


@dataclass(frozen=True)
class EvenSplit:
    """MLX's default pipeline split (equal layer counts) on the same ranks, to compare."""

    split: tuple[int, ...]
    ranks: tuple[RankPlan, ...]

    @property
    def fits(self) -> bool:
        return all(rank.fits for rank in self.ranks)

    @property
    def worst(self) -> RankPlan:
        """The rank that overflows most, or has the least room left."""
        return max(self.ranks, key=lambda r: (r.need_bytes - r.usable_bytes, -r.rank))


@dataclass(frozen=True)
class Alternative:
    """Another strategy's verdict, so the app can say why it was not chosen."""

    strategy: Strategy
    verdict: Verdict
    reason: str


@dataclass(frozen=True)
class Plan:
    """The planner's answer. ``split`` is per-rank layer counts in mlx-lm's convention:
    rank r runs layers [sum(split[r+1:]), sum(split[r:])), so rank 0 runs the last ones."""

    model: str
    requested: Strategy  # what was asked: AUTO or one of the others
    strategy: Strategy  # what the plan runs: never AUTO
    verdict: Verdict
    reason: str
    ranks: tuple[RankPlan, ...]
    split: tuple[int, ...] | None
    budgets: tuple[NodeBudget, ...]
    missing_bytes: int
    unused_bytes: int
    mlx_even_split: EvenSplit | None
    alternatives: tuple[Alternative, ...]
    warnings: tuple[str, ...]
    options: PlanOptions
    kv_bytes_per_token: int

    @property
    def fits(self) -> bool:
        return self.verdict == "fits"

    @property
    def nodes_used(self) -> tuple[str, ...]:
        return tuple(rank.node for rank in self.ranks)

    def layers_of(self, rank: int) -> tuple[int, int] | None:
        """The ``[start, end)`` layers ``rank`` holds in a pipeline; None when it holds
        a part of every layer (tensor) or all of them (single)."""
        stage = self.ranks[rank]
        return (stage.layer_start, stage.layer_end) if self.strategy is Strategy.PIPELINE else None


@dataclass(frozen=True)
class _Outcome:
    strategy: Strategy
    verdict: Verdict
    reason: str
    ranks: tuple[RankPlan, ...] = ()
    split: tuple[int, ...] | None = None
    missing: int = 0
    unused: int = 0
    even: EvenSplit | None = None
    why_not: str = ""  # a clause for "... because <why_not>" when another strategy wins

    @property
    def fits(self) -> bool:
        return self.verdict == "fits"


def make_plan(
    model: ModelInfo,
    nodes: Sequence[Node],
    links: Sequence[Link] = (),
    options: PlanOptions | None = None,
) -> Plan:
    """Plan ``model`` on ``nodes``: the requested strategy, or for "auto" the recommended
    one (one node if it fits; tensor if it fits and RDMA joins the nodes; else pipeline)."""
    options = options or PlanOptions()
    budgets = tuple(node_budget(node, options) for node in nodes)
    warnings = _warnings(model, nodes, options)
    # Rank 0 samples, talks to the app and runs the last layers: the node with the most
    # room takes it; ties go by name, so the same inputs always give the same ranks.
    ranked = sorted(budgets, key=lambda b: (-b.usable_bytes, b.node))
    rdma = _rdma_connected([b.node for b in ranked], nodes, links)
    problem = _input_problem(model, nodes, options)
    if problem:  # named with the strategy asked for (a split by hand: the pipeline's)
        asked = Strategy.SINGLE if options.strategy is Strategy.AUTO else options.strategy
        chosen, others = _Outcome(asked, "invalid", problem), list[_Outcome]()
    elif options.strategy is Strategy.AUTO:
        chosen, others = _recommend(model, ranked, rdma, options)
    else:
        outcomes = {
            Strategy.SINGLE: _single(model, ranked, options),
            Strategy.TENSOR: _tensor(model, ranked, rdma, options),
            Strategy.PIPELINE: _pipeline(model, ranked, options),
        }
        chosen = outcomes.pop(options.strategy)
        others = list(outcomes.values())
    if not chosen.fits and chosen.verdict != "invalid":
        for attempts in (_without_prompt_cache(options, chosen), _smaller_batches(options)):
            chosen = replace(chosen, reason=_blamed(model, nodes, links, chosen, attempts))
    if chosen.strategy is Strategy.TENSOR and chosen.fits and not rdma:
        warnings.append(
            "Tensor parallelism exchanges data at every layer of every token: "
            "without RDMA over Thunderbolt 5 between the nodes it will be slow."
        )
    return Plan(
        model=model.name,
        requested=options.strategy,
        strategy=chosen.strategy,
        verdict=chosen.verdict,
        reason=chosen.reason,
        ranks=_cpu_float_weights(chosen.ranks, model, nodes)
        if chosen.verdict == "fits"
        else chosen.ranks,
        split=chosen.split,
        budgets=budgets,
        missing_bytes=chosen.missing,
        unused_bytes=chosen.unused,
        mlx_even_split=chosen.even,
        alternatives=tuple(Alternative(o.strategy, o.verdict, o.reason) for o in others),
        warnings=tuple(warnings),
        options=options,
        kv_bytes_per_token=kv_bytes_per_layer(model, replace(options, context_length=1, batch=1))
        * model.layers
        // KV_CACHE_STEP,  # at the options' bits (a layer's count is in blocks of 256)
    )


Attempt = tuple[PlanOptions, Callable[[Plan], str]]  # one setting changed; what it says


def _without_prompt_cache(options: PlanOptions, chosen: _Outcome) -> list[Attempt]:
    """The same request without the prompt cache, and the sentence naming the cache as
    what does not fit (none without a cache)."""
    if not options.prompt_cache_bytes:
        return []
    kept = max((rank.prompt_cache_bytes for rank in chosen.ranks), default=0)

    def says(without: Plan) -> str:
        return (
            f"The prompt cache is what does not fit ({size(kept)} on a node for its bound "
            f"of {size(options.prompt_cache_bytes)}): without it, "
            f"{_lower_first(without.reason)} Lower the prompt cache (prompt_cache_mb, "
            "--prompt-cache-mb) or set it to 0."
        )

    return [(replace(options, prompt_cache_bytes=0), says)]


def _smaller_batches(options: PlanOptions) -> list[Attempt]:
    """The same request with the batch halved, down to 1 (its requests' KV caches and
    activations), each with the sentence naming that batch as the largest that fits."""

    def says_for(smaller: int) -> Callable[[Plan], str]:
        at_once = "one request at a time" if smaller == 1 else f"{smaller} requests at once"
        return lambda fewer: (
            f"The batch is what does not fit ({options.batch} requests at once): with "
            f"{at_once}, {_lower_first(fewer.reason)} Lower the batch (the batch setting, "
            f"--batch {smaller})."
        )

    halved = [options.batch >> shift for shift in range(1, options.batch.bit_length())]
    return [(replace(options, batch=batch), says_for(batch)) for batch in halved]


def _blamed(
    model: ModelInfo,
    nodes: Sequence[Node],
    links: Sequence[Link],
    chosen: _Outcome,
    attempts: Iterable[Attempt],
) -> str:
    """``chosen``'s reason, with what the first of ``attempts`` that fits says of its plan:
    each attempt is the same request with one setting changed, and the sentence that names
    that setting as what does not fit. Only ``chosen``'s reason when none fits."""
    for changed, says in attempts:
        plan = make_plan(model, nodes, links, changed)
        if plan.fits:
            return f"{chosen.reason} {says(plan)}"
    return chosen.reason


def _recommend(
    model: ModelInfo, ranked: list[NodeBudget], rdma: bool, options: PlanOptions
) -> tuple[_Outcome, list[_Outcome]]:
    single = _single(model, ranked, options)
    tensor = _tensor(model, ranked, rdma, options)
    if single.fits:
        return single, [tensor, _pipeline(model, ranked, options)]
    pipeline = _pipeline(model, ranked, options)
    too_big = f"Too big for one Mac ({single.why_not})"
    if tensor.fits and (rdma or not pipeline.fits):
        reason = f"{too_big}; {_lower_first(tensor.reason)}"
        return replace(tensor, reason=reason), [single, pipeline]
    if pipeline.fits:
        reason = (
            f"{too_big}; {_lower_first(pipeline.reason)[:-1]}, and not tensor because "
            f"{tensor.why_not}."
        )
        return replace(pipeline, reason=reason), [single, tensor]
    if pipeline.verdict == "invalid":  # one node, or fewer layers than nodes
        return single, [tensor, pipeline]
    return pipeline, [single, tensor]


def _single(model: ModelInfo, ranked: list[NodeBudget], options: PlanOptions) -> _Outcome:
    best = ranked[0]
    kv = kv_bytes_per_layer(model, options) * model.layers
    kept = prompt_cache_bytes_per_layer(model, options) * model.layers
    act = activation_bytes(model, options)
    rank = _rank(0, best, 0, model.layers, model.weight_bytes, kv, act, kept)
    if rank.fits:
        reason = (
            f"Fits on {best.node} alone ({size(rank.need_bytes)} of {size(rank.usable_bytes)}"
            " usable): one Mac needs no communication, so it is the fastest and simplest."
        )
        return _Outcome(Strategy.SINGLE, "fits", reason, (rank,))
    why_not = f"it needs {size(rank.need_bytes)}, {best.node} can give it {size(rank.usable_bytes)}"
    reason = (
        f"Needs {size(rank.need_bytes)} but {best.node}, the node with the most memory, "
        f"can give it only {size(rank.usable_bytes)}."
    )
    return _Outcome(
        Strategy.SINGLE,
        "does_not_fit",
        reason,
        (rank,),
        missing=rank.overflow_bytes,
        why_not=why_not,
    )


def _tensor(
    model: ModelInfo, ranked: list[NodeBudget], rdma: bool, options: PlanOptions
) -> _Outcome:
    n = len(ranked)
    problem = _tensor_problem(model, n)
    if problem:
        return _Outcome(
            Strategy.TENSOR,
            "invalid",
            f"Tensor parallelism is not possible: {problem}.",
            why_not=problem,
        )
    kv = kv_bytes_per_layer(model, options) * model.layers
    kv_share = -(-kv // n) if model.kv_split_by_tensor else kv
    kept = prompt_cache_bytes_per_layer(model, options) * model.layers
    kept_share = -(-kept // n) if model.kv_split_by_tensor else kept
    whole = model.tensor_whole_bytes  # kept whole on every node (own tensor sharding)
    weights = -(-(sum(model.layer_bytes) - whole) // n) + whole + model.shared_bytes
    act = activation_bytes(model, options, shards=n)
    ranks = tuple(
        _rank(r, b, 0, model.layers, weights, kv_share, act, kept_share)
        for r, b in enumerate(ranked)
    )
    smallest, per_node = ranked[-1], size(ranks[0].need_bytes)
    unused = sum(b.usable_bytes - smallest.usable_bytes for b in ranked)
    bigger = [b.node for b in ranked if b.usable_bytes > smallest.usable_bytes]
    waste = (
        f"; {_names(bigger)} {_verb(bigger, 'leaves', 'leave')} {size(unused)} unused, "
        "since every node holds the same share"
        if unused
        else ""
    )
    if all(rank.fits for rank in ranks):
        link = (
            "the RDMA links carry its per-layer exchanges"
            if rdma
            else "the links are not known to be RDMA, so its per-layer exchanges are slow"
        )
        what = "the layers' attention and MLPs" if model.own_tensor_sharding else "every layer"
        reason = (
            f"Tensor parallelism splits {what} over the {n} nodes ({per_node} each), "
            f"so all of them work on every token; {link}{waste}{_whole_clause(model)}."
        )
        why_not = (
            "the links are not all RDMA over Thunderbolt 5, which its per-layer exchanges need"
        )
        return _Outcome(Strategy.TENSOR, "fits", reason, ranks, unused=unused, why_not=why_not)
    reason = (
        f"Tensor parallelism would need {per_node} on every node, but {smallest.node} "
        f"can give only {size(smallest.usable_bytes)}: it is bounded by the smallest "
        f"node{waste}{_whole_clause(model)}."
    )
    why_not = f"it would need {per_node} on every node and {smallest.node} has " + size(
        smallest.usable_bytes
    )
    missing = sum(rank.overflow_bytes for rank in ranks)
    return _Outcome(
        Strategy.TENSOR,
        "does_not_fit",
        reason,
        ranks,
        missing=missing,
        unused=unused,
        why_not=why_not,
    )


def _whole_clause(model: ModelInfo) -> str:
    """What MacMesh's own tensor sharding keeps whole on every node, as a clause."""
    if not model.own_tensor_sharding:
        return ""
    parts = [*list(model.tensor_whole_parts[:3]), "norms"]
    named = ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else parts[0]
    return (
        f"; mlx-lm has no tensor sharding for {model.architecture}, so MacMesh's own splits "
        f"the attention and MLPs and keeps the {named} whole on every node "
        f"({size(model.tensor_whole_bytes)} on each)"
    )


def _tensor_problem(model: ModelInfo, n: int) -> str | None:
    """Why the model's layers cannot be split ``n`` ways, as a clause; None if they can."""
    if n < 2:
        return "it needs at least two nodes"
    if not model.can_tensor_shard:
        return (
            f"mlx-lm has no tensor sharding for the {model.architecture} architecture and "
            "MacMesh finds no attention or MLP in its layers to split"
        )
    checks = [
        ("attention heads", model.heads),
        ("KV heads", model.kv_heads),
        ("hidden size", model.hidden_size),
        ("MLP width", model.intermediate_size),
    ]
    bad = [f"{value} {what}" for what, value in checks if value % n]
    if bad:
        return f"the model's {' and '.join(bad)} do not divide by {n} nodes"
    group = (model.quantization or {}).get("group_size")
    if group:
        slices = [
            ("attention output", model.heads * model.head_dim // n),
            ("MLP", model.intermediate_size // n),
        ]
        bad = [f"{what} ({width} inputs per node)" for what, width in slices if width % group]
        if bad:
            return (
                f"over {n} nodes the {' and '.join(bad)} would split a quantization group "
                f"of {group}"
            )
    return None


def _pipeline(model: ModelInfo, ranked: list[NodeBudget], options: PlanOptions) -> _Outcome:
    n, layers = len(ranked), model.layers
    if n < 2 or layers < n:
        problem = (
            "it needs at least two nodes"
            if n < 2
            else f"{n} nodes need a layer each and the model has {layers}"
        )
        return _Outcome(Strategy.PIPELINE, "invalid", f"A pipeline is not possible: {problem}.")
    kv_layer = kv_bytes_per_layer(model, options)
    kept_layer = prompt_cache_bytes_per_layer(model, options)
    act = activation_bytes(model, options)
    costs = [b + kv_layer + kept_layer for b in model.layer_bytes]
    fixed = model.shared_bytes + act
    caps = [b.usable_bytes - fixed for b in reversed(ranked)]  # layer order: last rank first
    target = proportional_counts(layers, caps)
    found = fit_split(costs, caps, target)
    split = tuple(reversed(found or target))

    def ranks_for(split_: Sequence[int]) -> tuple[RankPlan, ...]:
        ends = [sum(split_[r:]) for r in range(n)]
        return tuple(
            _rank(
                r,
                b,
                ends[r] - split_[r],
                ends[r],
                model.shared_bytes + sum(model.layer_bytes[ends[r] - split_[r] : ends[r]]),
                kv_layer * split_[r],
                act,
                kept_layer * split_[r],
            )
            for r, b in enumerate(ranked)
        )

    even_split = _mlx_even_split(layers, n)
    even = EvenSplit(even_split, ranks_for(even_split))
    if options.split is not None:
        return _split_by_hand(options.split, ranks_for(options.split), even)
    ranks = ranks_for(split)
    placed = ", ".join(f"{r.layers} on {r.node}" for r in ranks)
    if found is not None:
        how = (
            "in proportion to usable memory"
            if found == target
            else "as near to proportional to usable memory as whole layers allow"
        )
        reason = f"The pipeline splits the layers {how} ({placed})."
        return _Outcome(Strategy.PIPELINE, "fits", reason, ranks, split, even=even)
    shortfall = sum(costs) + n * fixed - sum(b.usable_bytes for b in ranked)
    if shortfall > 0:
        reason = (
            f"Even as a pipeline over all {n} nodes it lacks {size(shortfall)}: add a Mac "
            "with at least that much GPU memory, or use a smaller quantization or a "
            "shorter context."
        )
        return _Outcome(
            Strategy.PIPELINE, "does_not_fit", reason, ranks, split, shortfall, even=even
        )
    missing = sum(rank.overflow_bytes for rank in ranks)
    smallest_stage = fixed + min(costs)
    cramped = [b.node for b in ranked if b.usable_bytes < smallest_stage]
    if cramped:
        reason = (
            f"{_names(cramped)} cannot hold even one layer plus the shared tensors "
            f"every stage keeps ({size(smallest_stage)}): leave "
            f"{_verb(cramped, 'it', 'them')} out or add memory."
        )
    else:
        reason = (
            f"The {n} nodes have enough memory in total, but no split into whole layers "
            f"keeps every node within its budget ({size(missing)} over)."
        )
    return _Outcome(Strategy.PIPELINE, "does_not_fit", reason, ranks, split, missing, even=even)


def _split_by_hand(
    split: tuple[int, ...], ranks: tuple[RankPlan, ...], even: EvenSplit
) -> _Outcome:
    """A split set by hand: it fits, or the Macs it overfills and by how much."""
    placed = ", ".join(f"{r.layers} on {r.node}" for r in ranks)
    over = [r for r in ranks if not r.fits]
    if not over:
        reason = f"The pipeline splits the layers as set by hand ({placed})."
        return _Outcome(Strategy.PIPELINE, "fits", reason, ranks, split, even=even)
    lacking = "; ".join(
        f"{r.node} lacks {size(r.overflow_bytes)} for {r.layers} layers" for r in over
    )
    reason = (
        f"That split does not fit: {lacking}. Move layers to a Mac with room, or go back "
        "to the planner's split."
    )
    missing = sum(r.overflow_bytes for r in over)
    return _Outcome(Strategy.PIPELINE, "does_not_fit", reason, ranks, split, missing, even=even)


def _mlx_even_split(layers: int, n: int) -> tuple[int, ...]:
    """mlx-lm's PipelineMixin default: equal counts, the low ranks take the extra layers."""
    base, extra = divmod(layers, n)
    return tuple(base + (1 if r < extra else 0) for r in range(n))


def _cpu_float_weights(
    ranks: tuple[RankPlan, ...], model: ModelInfo, nodes: Sequence[Node]
) -> tuple[RankPlan, ...]:
    """On a CPU node (MLX without Metal) everything is float32: half-precision weights
    always become float32, and quantized ones, which run far slower than float32 with a
    real BLAS, do when the node has room for them (else they stay quantized). The KV
    cache and activations are float32 there too, and the load holds a bounded transient
    (``cpu_load_bytes``): all counted here."""
    cpu = {node.name for node in nodes if node.cpu}
    if not cpu:
        return ranks
    wider = CPU_FLOAT_BYTES // min(model.dtype_bytes, CPU_FLOAT_BYTES)
    planned = []
    for rank in ranks:
        if rank.node in cpu:
            rank = replace(
                rank,
                kv_cache_bytes=rank.kv_cache_bytes * wider,
                prompt_cache_bytes=rank.prompt_cache_bytes * wider,
                activation_bytes=rank.activation_bytes * wider,
                load_bytes=cpu_load_bytes(model),
            )
            grown = replace(rank, weights_bytes=cpu_weight_bytes(model, rank.weights_bytes))
            if not model.quantization:
                rank = grown
            elif grown.fits:
                rank = replace(grown, float_weights=True)
            else:
                rank = replace(rank, float_weights=False)
        planned.append(rank)
    return tuple(planned)


def _rank(
    rank: int,
    budget: NodeBudget,
    start: int,
    end: int,
    weights: int,
    kv: int,
    act: int,
    kept: int = 0,
) -> RankPlan:
    """``kept``: the node's share of the prompt cache's bound."""
    return RankPlan(
        rank,
        budget.node,
        start,
        end,
        weights,
        kv,
        act,
        budget.margin_bytes,
        budget.gpu_limit_bytes,
        prompt_cache_bytes=kept,
    )


def _input_problem(model: ModelInfo, nodes: Sequence[Node], options: PlanOptions) -> str | None:
    if not nodes:
        return "There are no nodes to plan on: add at least one Mac."
    names = [node.name for node in nodes]
    if len(set(names)) != len(names):
        return "Two nodes have the same name; every node needs its own."
    if options.context_length < 1 or options.batch < 1:
        return "The context length and the batch size must be at least 1."
    if model.layers < 1:
        return "The model has no layers."
    split = options.split
    if split is not None:
        if options.strategy is not Strategy.PIPELINE:
            return f"A split by hand is for a pipeline, not {options.strategy}."
        if len(split) != len(nodes):
            return f"The split has {len(split)} layer counts for {len(nodes)} Macs: give one each."
        if min(split) < 1:
            return "Every Mac in a pipeline needs at least one layer: the split has a 0."
        if sum(split) != model.layers:
            return f"The split adds up to {sum(split)} layers; the model has {model.layers}."
    return None


def _warnings(model: ModelInfo, nodes: Sequence[Node], options: PlanOptions) -> list[str]:
    warnings = []
    if model.context_length and options.context_length > model.context_length:
        warnings.append(
            f"A context of {options.context_length} tokens is longer than the "
            f"{model.context_length} the model was trained for."
        )
    for node in nodes:
        if node.wired_limit_mb and node.wired_limit_mb * MIB > node.memory_bytes:
            warnings.append(
                f"{node.name}: iogpu.wired_limit_mb ({node.wired_limit_mb}) is more "
                "than its memory; macOS cannot give the GPU that much."
            )
    return warnings


def _rdma_connected(names: Sequence[str], nodes: Sequence[Node], links: Sequence[Link]) -> bool:
    """True when RDMA links join every used node (directly or through others)."""
    if len(names) < 2 or any(n.rdma is False for n in nodes if n.name in names):
        return False
    wanted = set(names)
    reached, frontier = {names[0]}, [names[0]]
    while frontier:
        here = frontier.pop()
        for link in links:
            if link.rdma and here in (link.a, link.b):
                other = link.b if link.a == here else link.a
                if other in wanted and other not in reached:
                    reached.add(other)
                    frontier.append(other)
    return reached == wanted


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _verb(names: Sequence[str], one: str, many: str) -> str:
    return one if len(names) == 1 else many


def _names(names: Sequence[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
