"""An **estimate** of decode tokens/s on real Macs, from a plan, the model's bytes and the
chips' memory bandwidth. Pure functions, no I/O.

Decoding one token reads every active weight and the whole KV cache once; on Apple
silicon that read is the bottleneck, so a node's time for its part of a token is

    bytes it reads / (EFFICIENCY × its chip's bandwidth) + its layers × LAYER_OVERHEAD_S

and the links add their part: tensor parallelism two all-reduces of one activation vector
per layer, a pipeline one hop per stage boundary (the last stage's token going back to the
first included). Single: one node. Pipeline: the stages run one after another, so their
times add. Tensor: every node works on every layer at once, so the slowest sets the pace.

EFFICIENCY and LAYER_OVERHEAD_S were fitted to published figures (core/plan/calibration.py),
the link figures come from published measurements; ``docs/estimate.md`` writes the model
out with every source, so a person can redo the numbers by hand. No time-to-first-token:
prefill is bound by the GPU's arithmetic, which Apple does not publish, so it is not
estimated rather than guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from core.model.info import ModelInfo
from core.plan.chips import ChipSpec, chip_spec
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

LABEL = "estimate"
# Share of the published bandwidth a decode step reaches, and a fixed cost per layer per
# token (kernel dispatch and synchronisation): fitted to the calibration figures.
EFFICIENCY = 0.83
LAYER_OVERHEAD_S = 40e-6


@dataclass(frozen=True)
class LinkProfile:
    """How a link costs an exchange: a fixed latency plus bytes at its rate. ``mesh``: an
    all-reduce is one round (JACCL's mesh); otherwise a ring's 2(N-1) steps."""

    name: str
    latency_s: float
    bytes_per_s: float
    mesh: bool
    source: str


# PyTorch's TCCL over Thunderbolt 5 RDMA (pytorch/pytorch#181087): a 1 MiB all-reduce in
# 0.15 ms, 16 MiB in 1.85 ms, so 37 µs fixed plus 9.25 GB/s.
RDMA = LinkProfile(
    "RDMA over Thunderbolt 5",
    37e-6,
    9.25e9,
    mesh=True,
    source="37 µs + 9.25 GB/s per all-reduce, from all-reduce timings over Thunderbolt 5 RDMA",
)
# Thunderbolt networking over TCP before RDMA: ~300 µs a message (Jeff Geerling's RDMA
# write-up); the rate is 10 Gb/s Ethernet's, which activation vectors of a few KB never fill.
TCP_RING = LinkProfile(
    "MLX ring over TCP",
    300e-6,
    10e9 / 8,
    mesh=False,
    source="300 µs a message over TCP (Thunderbolt networking without RDMA), 10 Gb/s",
)


@dataclass(frozen=True)
class Workload:
    """What decoding one token reads, from the model's headers: each layer's weights, the
    output head, the KV cache per token per layer, and one activation vector's size."""

    layer_bytes: tuple[int, ...]
    head_bytes: int
    kv_bytes_per_token_layer: int
    exchange_bytes: int
    kv_split_by_tensor: bool = True


def workload_of(model: ModelInfo) -> Workload:
    """A ModelInfo's workload. The shared tensors are the embeddings, the final norm and
    the output head: a token reads one row of the embeddings but all of the head, so tied
    weights are read whole and untied ones half (the head, as big as the embeddings)."""
    head = model.shared_bytes if model.tie_word_embeddings else model.shared_bytes // 2
    return Workload(
        layer_bytes=model.layer_bytes,
        head_bytes=head,
        kv_bytes_per_token_layer=model.kv_elements_per_token * model.dtype_bytes,
        exchange_bytes=model.hidden_size * model.dtype_bytes,
        kv_split_by_tensor=model.kv_split_by_tensor,
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


@dataclass(frozen=True)
class NodeLoad:
    """One node's part of a token: the bytes it reads and the time that takes."""

    node: str
    chip: str
    bandwidth_gbs: float
    layers: int
    bytes_per_token: int
    seconds: float


@dataclass(frozen=True)
class Estimate:
    """The estimate for a plan: tokens/s (None when a chip is unknown, with the reason)."""

    strategy: Strategy
    tokens_per_s: float | None
    compute_s: float
    link_s: float
    nodes: tuple[NodeLoad, ...]
    link: LinkProfile | None
    context_tokens: int
    reason: str = ""
    # A multi-Mac plan's answer to "would one Mac be as fast?": the fastest Mac of the
    # plan alone (its name, its chip, its estimate) when the model fits it; None otherwise.
    alone: tuple[str, str, float] | None = None

    @property
    def seconds_per_token(self) -> float:
        return self.compute_s + self.link_s

    def summary(self) -> str:
        """One line: "Estimate for real Macs: 14.2 tokens/s (2 × M3 Ultra, tensor over
        RDMA over Thunderbolt 5)" or "No estimate: chip unknown for mini"."""
        if self.tokens_per_s is None:
            return f"No {LABEL}: {self.reason}"
        chips = _chip_counts(self.nodes)
        how = self.strategy.value
        if self.link is not None:
            how += f" over {self.link.name}"
        line = f"Estimate for real Macs: {self.tokens_per_s:.1f} tokens/s ({chips}, {how})"
        if self.alone is not None:
            node, chip, rate = self.alone
            line += f"; {node} ({chip}) alone: {rate:.1f} tokens/s"
        return line

    def basis(self) -> str:
        """Where the number comes from, in a few lines: for a tooltip and the CLI."""
        if self.tokens_per_s is None:
            return (
                f"No {LABEL}: {self.reason}. The estimate needs each Mac's chip "
                "(its memory bandwidth)."
            )
        lines = [
            "An estimate, not a measurement (model and sources: docs/estimate.md).",
            f"Each token reads every weight and the KV cache ({self.context_tokens} tokens) "
            f"once, at {EFFICIENCY:.0%} of the chip's published memory bandwidth, plus "
            f"{LAYER_OVERHEAD_S * 1e6:.0f} µs per layer:",
        ]
        lines += [
            f"  {n.node} ({n.chip}, {n.bandwidth_gbs:g} GB/s): {n.layers} layers, "
            f"{n.bytes_per_token / 1e9:.2f} GB a token, {n.seconds * 1e3:.1f} ms"
            for n in self.nodes
        ]
        if self.link is not None:
            lines.append(
                f"Links ({self.link.name}: {self.link.source}): {self.link_s * 1e3:.2f} ms a token."
            )
        lines.append(
            f"{self.seconds_per_token * 1e3:.1f} ms a token = {self.tokens_per_s:.1f} tokens/s."
        )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        """JSON-able, labelled as an estimate with its basis."""
        return {
            "label": LABEL,
            "tokens_per_s": None if self.tokens_per_s is None else round(self.tokens_per_s, 2),
            "seconds_per_token": None
            if self.tokens_per_s is None
            else round(self.seconds_per_token, 6),
            "compute_s": round(self.compute_s, 6),
            "link_s": round(self.link_s, 6),
            "strategy": self.strategy.value,
            "context_tokens": self.context_tokens,
            "link": None
            if self.link is None
            else {
                "name": self.link.name,
                "latency_us": round(self.link.latency_s * 1e6, 1),
                "gb_per_s": round(self.link.bytes_per_s / 1e9, 3),
            },
            "nodes": [
                {
                    "node": n.node,
                    "chip": n.chip,
                    "bandwidth_gbs": n.bandwidth_gbs,
                    "layers": n.layers,
                    "bytes_per_token": n.bytes_per_token,
                    "seconds": round(n.seconds, 6),
                }
                for n in self.nodes
            ],
            "efficiency": EFFICIENCY,
            "layer_overhead_us": LAYER_OVERHEAD_S * 1e6,
            "reason": self.reason,
            "alone": None
            if self.alone is None
            else {
                "node": self.alone[0],
                "chip": self.alone[1],
                "tokens_per_s": round(self.alone[2], 2),
            },
            "basis": self.basis(),
            "time_to_first_token": None,
            "time_to_first_token_reason": "not estimated: prefill is bound by GPU arithmetic, "
            "which Apple does not publish",
        }


def estimate_decode(
    work: Workload,
    strategy: Strategy,
    stages: Sequence[Stage],
    link: LinkProfile | None,
    context_tokens: int,
) -> Estimate:
    """Decode tokens/s for ``stages`` running ``work`` with ``strategy`` (see the module)."""
    n = len(stages)
    shards = n if strategy is Strategy.TENSOR else 1
    kv_shards = shards if work.kv_split_by_tensor else 1
    loads = []
    for stage in stages:
        layers = range(stage.layer_start, stage.layer_end)
        weights = sum(work.layer_bytes[i] for i in layers) // shards
        kv = work.kv_bytes_per_token_layer * context_tokens * len(layers) // kv_shards
        read = weights + kv + (work.head_bytes if stage.reads_head else 0)
        seconds = read / (EFFICIENCY * stage.chip.bandwidth_bytes) + len(layers) * LAYER_OVERHEAD_S
        loads.append(
            NodeLoad(
                stage.node,
                stage.chip.name,
                stage.chip.bandwidth_gbs,
                len(layers),
                read,
                seconds,
            )
        )
    if strategy is Strategy.TENSOR:
        compute = max(load.seconds for load in loads)
    else:
        compute = sum(load.seconds for load in loads)
    link_s = _link_seconds(work, strategy, n, len(work.layer_bytes), link)
    total = compute + link_s
    return Estimate(
        strategy=strategy,
        tokens_per_s=1 / total,
        compute_s=compute,
        link_s=link_s,
        nodes=tuple(loads),
        link=link if n > 1 else None,
        context_tokens=context_tokens,
    )


def _link_seconds(
    work: Workload, strategy: Strategy, n: int, layers: int, link: LinkProfile | None
) -> float:
    if n < 2 or link is None:
        return 0.0
    if strategy is Strategy.TENSOR:
        # Two all-reduces of one activation vector per layer; a ring moves 2(N-1)/N of it
        # over each link in 2(N-1) steps, a mesh sends it to every peer in one round.
        moved = work.exchange_bytes * 2 * (n - 1) / n
        rounds = 1 if link.mesh else 2 * (n - 1)
        return layers * 2 * (rounds * link.latency_s + moved / link.bytes_per_s)
    # Pipeline: one hop per stage boundary, the last stage's token going back to the first.
    return n * (link.latency_s + work.exchange_bytes / link.bytes_per_s)


def estimate_plan(
    model: ModelInfo,
    plan: Plan,
    nodes: Sequence[Node],
    links: Sequence[Link] = (),
) -> Estimate:
    """The estimate for ``plan``, on the real chips ``nodes`` name; its reason says why
    there is none (a chip unknown, a plan that does not fit)."""
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
    if plan.verdict == "invalid":  # what is wrong with it, not "does not fit" (issue 33)
        why = plan.reason.rstrip(".")
        return _none(plan, context, f"the plan is invalid: {why[:1].lower()}{why[1:]}")
    if not plan.fits or not plan.ranks:
        return _none(plan, context, "the plan does not fit, so it would not run")
    if unknown:
        return _none(plan, context, f"chip unknown for {', '.join(unknown)}")
    link = None
    if len(stages) > 1:
        link = RDMA if _all_rdma([s.node for s in stages], links) else TCP_RING
    estimate = estimate_decode(workload_of(model), plan.strategy, stages, link, context)
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


def _chip_counts(loads: Sequence[NodeLoad]) -> str:
    counts: dict[str, int] = {}
    for load in loads:
        counts[load.chip] = counts.get(load.chip, 0) + 1
    return " + ".join(f"{c} × {chip}" if c > 1 else chip for chip, c in counts.items())
