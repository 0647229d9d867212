"""Whether a fine-tune fits: on every node, the whole model plus the LoRA adapter, its
gradients and Adam's state, plus the activations of that node's share of a batch.

Training is data parallel (mlx-lm's trainer averages gradients across ranks): every node
holds the whole model, so the weakest node decides. The memory each node can give is the
planner's own rule (``core.plan.memory.node_budget``: the GPU wired limit, or macOS's
default share of RAM, less the safety margin), so a fine-tune and a chat agree on it.

What is counted per node (an estimate, meant to err high):

- weights: the model's bytes as its files hold them; on a CPU node (MLX without Metal) a
  quantized model counts as float32 when that still fits, as ranks there dequantize it
  (``core.worker.sharding``), like the planner's ``_cpu_float_weights``;
- LoRA: ``rank * (in + out)`` parameters for every linear layer of the last
  ``lora_layers`` layers (mlx-lm adapts all of them: q, k, v, o, gate, up, down), in
  float32, four times over: the parameters, their gradients, Adam's two moments;
- activations, for ``batch_size / ranks`` sequences of ``max_seq_length`` tokens (mlx-lm
  pads a batch to its longest example, at most that): what backpropagation keeps for each
  adapted layer (the layer's input, norms, Q/K/V, attention output, the MLP's hidden units
  three times over) and the attention probabilities (MLX differentiates attention
  through its unfused form: ``heads * tokens^2``), plus ``LOGIT_COPIES`` float32 buffers
  over the vocabulary per token, plus one layer's working buffers for the layers below
  the adapter.

Checked against MLX's own peak memory (``mx.get_peak_memory()``, one forward and backward
pass and an Adam update of mlx-lm's LoRA on the demo model in float32 on the CPU, rank 8;
measured minus the weights, then this estimate with the adapter): 256 tokens x 2
sequences, 8 layers: 627 MiB, 630; 512 x 2, 8 layers: 1327, 1331; 512 x 2, 16 layers:
1817, 1833; 1024 x 1, 8 layers: 1479, 1493 (``python -m tests.benchmarks.bench_tune_fit``).
Within 1%; the planner's margin (5% of the GPU limit, at least 512 MB) is on
top. Metal may keep a little less (fused attention); every sequence counted at
``max_seq_length`` is the worst batch mlx-lm can make.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.cluster.probe.facts import NodeFacts
from core.model.info import ModelInfo
from core.plan.memory import Node as PlanNode
from core.plan.memory import PlanOptions, float_weight_bytes, node_budget
from core.tune.settings import TuneSettings
from core.units import size
from core.worker.vocab import Strategy

#: LoRA parameters, their gradients and Adam's two moments: float32 each.
LORA_COPIES = 4
LORA_DTYPE_BYTES = 4
#: float32 vocabulary-wide buffers per token: the logits, the loss's log-softmax and
#: probabilities, the logits' gradient (four fit the measurements below).
LOGIT_COPIES = 4


@dataclass(frozen=True)
class NodeFit:
    """One node: what the fine-tune needs there and what it can give."""

    name: str
    weights_bytes: int
    lora_bytes: int
    activation_bytes: int
    usable_bytes: int
    gpu_limit_bytes: int
    memory_bytes: int
    #: a CPU node holding the quantized model as float32
    float_weights: bool = False
    #: bytes per activation element there (float32 on a CPU node)
    dtype_bytes: int = 2

    @property
    def need_bytes(self) -> int:
        return self.weights_bytes + self.lora_bytes + self.activation_bytes

    @property
    def free_bytes(self) -> int:
        """Usable bytes left once the fine-tune is in (negative: short by that much)."""
        return self.usable_bytes - self.need_bytes

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.usable_bytes


@dataclass(frozen=True)
class TrainingFit:
    nodes: tuple[NodeFit, ...]
    #: the node that does not fit by the most, else the one with the least room left
    limit: NodeFit | None
    message: str

    @property
    def ok(self) -> bool:
        return bool(self.nodes) and all(n.fits for n in self.nodes)

    def node(self, name: str) -> NodeFit:
        return next(n for n in self.nodes if n.name == name)


def tune_strategy(nodes: int) -> Strategy:
    """The strategy a fine-tune's session is planned with on ``nodes`` Macs: a pipeline
    over several puts one rank on each (then every rank takes the whole model, data
    parallel), one Mac runs single. Its "Compare with base" runs on the same Macs the
    same way, so both say it here."""
    return Strategy.PIPELINE if nodes > 1 else Strategy.SINGLE


def lora_parameters(info: ModelInfo, settings: TuneSettings) -> int:
    """Trainable parameters of the adapter mlx-lm's ``linear_to_lora_layers`` makes."""
    return settings.lora_rank * _lora_width(info) * min(settings.lora_layers, info.layers)


def lora_bytes(info: ModelInfo, settings: TuneSettings) -> int:
    return lora_parameters(info, settings) * LORA_DTYPE_BYTES * LORA_COPIES


def activation_bytes(info: ModelInfo, settings: TuneSettings, ranks: int, dtype_bytes: int) -> int:
    """Activations kept for the backward pass of one rank's share of a batch (see above)."""
    sequences = max(1, settings.batch_size // max(1, ranks))
    length = settings.max_seq_length
    tokens = sequences * length
    attention = info.heads * info.head_dim
    kv = info.kv_heads * info.head_dim
    per_token = 6 * info.hidden_size + 2 * attention + 2 * kv + 4 * info.intermediate_size
    scores = sequences * info.heads * length * length
    per_layer = (tokens * per_token + scores) * dtype_bytes
    logits = LOGIT_COPIES * tokens * info.vocab_size * 4
    adapted = min(settings.lora_layers, info.layers)
    below = per_layer if adapted < info.layers else 0
    return adapted * per_layer + below + logits


def training_fit(
    info: ModelInfo,
    settings: TuneSettings,
    facts: Mapping[str, NodeFacts] | Sequence[NodeFacts],
) -> TrainingFit:
    """Whether ``settings`` fine-tune ``info`` on these nodes, each holding the whole model."""
    listed = list(facts.values()) if isinstance(facts, Mapping) else list(facts)
    if not listed:
        return TrainingFit((), None, "No Macs to train on: add at least one.")
    ranks = len(listed)
    fits = tuple(_node_fit(info, settings, f, ranks) for f in listed)
    unknown = [f.name for f in listed if not f.memory_bytes]
    short = [n for n in fits if not n.fits]
    if short:
        limit = max(short, key=lambda n: (-n.free_bytes, n.name))
        message = _too_big(limit, info, settings, ranks, unknown)
    else:
        limit = min(fits, key=lambda n: (n.free_bytes, n.name))
        message = (
            f"Fits on every Mac: the tightest is {limit.name}, "
            f"{size(limit.need_bytes)} of {size(limit.usable_bytes)} usable."
        )
    return TrainingFit(fits, limit, message)


def _node_fit(info: ModelInfo, settings: TuneSettings, facts: NodeFacts, ranks: int) -> NodeFit:
    node = PlanNode(facts.name, int(facts.memory_bytes or 0), wired_limit_mb=facts.wired_limit_mb)
    budget = node_budget(node, PlanOptions())
    cpu = facts.runs_on_cpu
    dtype_bytes = 4 if cpu else info.dtype_bytes  # a CPU rank computes in float32
    lora = lora_bytes(info, settings)
    act = activation_bytes(info, settings, ranks, dtype_bytes)
    weights, as_float = info.weight_bytes, False
    if cpu and info.quantization:
        grown = float_weight_bytes(info, weights)
        if grown + lora + act <= budget.usable_bytes:
            weights, as_float = grown, True
    return NodeFit(
        name=facts.name,
        weights_bytes=weights,
        lora_bytes=lora,
        activation_bytes=act,
        usable_bytes=budget.usable_bytes,
        gpu_limit_bytes=budget.gpu_limit_bytes,
        memory_bytes=budget.memory_bytes,
        float_weights=as_float,
        dtype_bytes=dtype_bytes,
    )


def _too_big(
    limit: NodeFit, info: ModelInfo, settings: TuneSettings, ranks: int, unknown: list[str]
) -> str:
    if limit.name in unknown:
        return f"{limit.name}'s memory is unknown: probe it again before training."
    short = size(limit.need_bytes - limit.usable_bytes)
    head = (
        f"Does not fit on {limit.name}: the fine-tune needs {size(limit.need_bytes)} there "
        f"(model {size(limit.weights_bytes)}, adapter and optimizer "
        f"{size(limit.lora_bytes)}, activations {size(limit.activation_bytes)}), "
        f"{short} more than its {size(limit.usable_bytes)} usable."
    )
    if limit.weights_bytes >= limit.usable_bytes:
        return (
            f"{head} The model alone is too big for it: choose a smaller model "
            f"or leave {limit.name} out."
        )
    return f"{head} {_fix(limit, info, settings, ranks)}"


def _fix(limit: NodeFit, info: ModelInfo, settings: TuneSettings, ranks: int) -> str:
    """The fewest changes that fit, in this order: a smaller batch (down to one example per
    Mac), then shorter examples (down to 128 tokens), then fewer LoRA layers."""
    room = limit.usable_bytes - limit.weights_bytes
    changed = settings
    while True:
        need = lora_bytes(info, changed) + activation_bytes(info, changed, ranks, limit.dtype_bytes)
        if need <= room:
            return f"Try {_changes(settings, changed)}."
        if changed.batch_size > ranks:
            batch = max(ranks, changed.batch_size // 2 // ranks * ranks)
            changed = _with(changed, batch_size=batch)
        elif changed.max_seq_length > 128:
            changed = _with(changed, max_seq_length=max(128, changed.max_seq_length // 2))
        elif min(changed.lora_layers, info.layers) > 1:
            changed = _with(changed, lora_layers=min(changed.lora_layers, info.layers) // 2)
        else:
            return "Even the smallest batch, examples and adapter do not fit: use a smaller model."


def _changes(before: TuneSettings, after: TuneSettings) -> str:
    said = []
    if after.batch_size != before.batch_size:
        said.append(f"a batch size of {after.batch_size}")
    if after.max_seq_length != before.max_seq_length:
        said.append(f"a max sequence length of {after.max_seq_length}")
    if after.lora_layers != before.lora_layers:
        said.append(f"{after.lora_layers} LoRA layers")
    return " and ".join(", ".join(said).rsplit(", ", 1)) if said else "again"


def _with(settings: TuneSettings, **changes: int) -> TuneSettings:
    return TuneSettings.from_dict({**settings.to_dict(), **changes})


def _lora_width(info: ModelInfo) -> int:
    """Sum of (inputs + outputs) over one layer's linears: q, k, v, o, gate, up, down."""
    hidden, attention = info.hidden_size, info.heads * info.head_dim
    kv = info.kv_heads * info.head_dim
    attn = (hidden + attention) * 2 + (hidden + kv) * 2
    mlp = (hidden + info.intermediate_size) * 3
    return attn + mlp
