"""Which parts of a decoder layer MacMesh's own tensor sharding splits, by name.

For an architecture mlx-lm cannot tensor-shard (no ``model.shard``),
``core.worker.tensor_shard`` splits the parts of each layer it recognises and keeps the
rest whole on every rank. This module is the same rule over the weights' names, so the
planner (``core.model.info``) counts the parts that stay whole in full on every node
without building the model; a unit test holds the two to agreeing on every architecture
the matrix runs.

Recognised, by the module's children:

- attention: ``q_proj``, ``k_proj``, ``v_proj`` and ``o_proj``, plus only norms (the
  per-head-width ``q_norm``/``k_norm``, shared by every head) and no tensor of its own
  (a per-head one, such as attention sinks, would need slicing: not recognised);
- MLP: ``up_proj`` and ``down_proj`` (``gate_proj`` optional) and nothing else.

Everything else (Mamba and other state-space mixers, linear attention, routed experts,
routers, norms, anything unknown) stays whole: each rank computes it identically on the
same input, which needs no exchange and is exact.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping

ATTENTION = frozenset({"q_proj", "k_proj", "v_proj", "o_proj"})
MLP_NEEDED = frozenset({"up_proj", "down_proj"})
MLP = MLP_NEEDED | {"gate_proj"}
# Path parts of a mixture of experts' routed experts: always whole (``core.model.experts``
# names the same).
ROUTED = frozenset({"switch_mlp", "experts"})
# Parameter leaves a linear layer has, quantized or not.
_LINEAR_LEAVES = frozenset({"weight", "bias", "scales", "biases"})


def is_attention(children: Mapping[str, tuple[int, ...]], own_tensors: bool) -> bool:
    """A module with these children (name -> its weight's shape) and tensors of its own
    or not is an attention MacMesh splits by heads. A norm beside the projections must
    act on one head's width (1-D, narrower than the keys and dividing them): OLMo 2's
    norm over every head's queries at once, or Cohere's per-head weights, would change
    under a split."""
    names = set(children)
    if own_tensors or not names >= ATTENTION:
        return False
    keys = children["k_proj"][0] if children["k_proj"] else 0
    queries = children["q_proj"][0] if children["q_proj"] else 0
    for name, shape in children.items():
        if name in ATTENTION:
            continue
        if "norm" not in name or len(shape) != 1 or not 0 < shape[0] < keys:
            return False
        if keys % shape[0] or queries % shape[0]:
            return False
    return True


def is_mlp(children: Iterable[str], own_tensors: bool) -> bool:
    """A module with these child names is an MLP MacMesh splits by its hidden width."""
    names = set(children)
    return not own_tensors and names >= MLP_NEEDED and names <= MLP


def split_tensors(
    shapes: Mapping[str, tuple[int, ...]], routed: Callable[[str], bool] = lambda name: False
) -> dict[str, set[str]]:
    """The modules MacMesh's sharder splits (their paths, each with its tensors' names as
    in the safetensors files, given with their shapes); every other layer tensor stays
    whole on every rank. Each split module is one ``all_sum`` a step. ``routed`` names
    a routed expert's tensor: an expert bank (``switch_mlp``) has an MLP's children but
    is not a linear layer, so it stays whole."""
    children: dict[str, dict[str, tuple[int, ...]]] = defaultdict(dict)  # parent -> kids
    own: set[str] = set()  # module paths holding a tensor directly
    linear: dict[str, list[str]] = defaultdict(list)  # child module path -> its tensors
    for name, shape in shapes.items():
        module, _, leaf = name.rpartition(".")
        parent, _, child = module.rpartition(".")
        if leaf in _LINEAR_LEAVES and parent and not routed(name):
            kids = children[parent]
            if leaf == "weight" or child not in kids:
                kids[child] = shape if leaf == "weight" else kids.get(child, ())
            linear[module].append(name)
        else:
            own.add(module)
    split: dict[str, set[str]] = {}
    for parent, kids in children.items():
        mine = parent in own
        if is_attention(kids, mine):
            wanted = ATTENTION
        elif is_mlp(kids, mine):
            wanted = MLP
        else:
            continue
        split[parent] = {name for kid in set(kids) & wanted for name in linear[f"{parent}.{kid}"]}
    return split


def part_name(tail: str) -> str:
    """What a person calls the part of a layer a tensor belongs to, from its name after
    ``layers.N.``: "mamba", "linear_attn", "mlp.switch_mlp"."""
    parts = tail.split(".")
    if len(parts) > 2 and parts[0] in {"mlp", "feed_forward", "block_sparse_moe"}:
        return ".".join(parts[:2])
    return parts[0]
