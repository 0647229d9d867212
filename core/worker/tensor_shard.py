"""MacMesh's own tensor sharding, for architectures mlx-lm cannot tensor-shard.

mlx-lm's ``model.shard(group)`` covers the architectures it has code for. For the rest
(Gemma 3, Mamba hybrids such as Nemotron-H and Falcon-H1, Qwen3-Next, ...) this walks
every module of every decoder layer and splits the ones ``core.worker.tensor_parts``
recognises, with mlx's own distributed layers, exactly as mlx-lm's llama ``shard`` does:

- attention: ``q_proj``/``k_proj``/``v_proj`` all-to-sharded (each rank computes its
  share of the heads), ``o_proj`` sharded-to-all (one ``all_sum``), and the module's
  head counts divided by the group size. ``q_norm``/``k_norm`` act on one head's width
  and are shared by every head, so they stay as they are; so do sliding windows, the
  scale and the rotary embedding, which do not depend on the number of heads;
- MLP: ``gate_proj``/``up_proj`` all-to-sharded, ``down_proj`` sharded-to-all.

Anything else (state-space mixers, linear attention, routed experts, routers, norms)
stays whole on every rank: each computes it identically from the same input, which
needs no exchange and is exact. ``core.model.info`` counts those bytes in full on every
node with the same rule over the weights' names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn
from mlx.nn.layers.distributed import shard_linear

from core.worker.tensor_parts import ATTENTION, MLP, ROUTED, is_attention, is_mlp

# The names attention modules in mlx-lm give their query and key/value head counts.
QUERY_HEADS = ("n_heads", "num_heads", "num_attention_heads")
KV_HEADS = ("n_kv_heads", "num_kv_heads", "num_key_value_heads")
_LINEAR = (nn.Linear, nn.QuantizedLinear)


@dataclass
class Sharded:
    """What was split (module paths) and what stayed whole, for the rank's log and tests."""

    attention: list[str] = field(default_factory=list)
    mlp: list[str] = field(default_factory=list)
    whole: list[str] = field(default_factory=list)  # attentions whose heads it cannot split


def shard_layers(layers: list[nn.Module], group: mx.distributed.Group) -> Sharded:
    """Split the recognised attention and MLP modules of every layer over ``group``."""
    done = Sharded()
    for index, layer in enumerate(layers):
        for name, module in layer.named_modules():
            path = f"layers.{index}.{name}" if name else f"layers.{index}"
            if not ROUTED.isdisjoint(path.split(".")):
                continue
            children, own = _shape(module)
            if is_attention(children, own):
                if _shard_attention(module, group):
                    done.attention.append(path)
                else:
                    done.whole.append(path)
            elif is_mlp(children, own) and _linears(module, MLP):
                _shard_mlp(module, group)
                done.mlp.append(path)
    return done


def _shape(module: nn.Module) -> tuple[dict[str, tuple[int, ...]], bool]:
    """The module's children (name -> its weight's shape) and whether it holds a tensor
    of its own, in the terms ``tensor_parts`` reads from the weights' names (linears and
    norms only, as there: a child with other tensors or no weight counts as a tensor of
    the module's own)."""
    children: dict[str, tuple[int, ...]] = {}
    own = False
    for key, value in module.items():
        if isinstance(value, mx.array):
            own = True
        elif isinstance(value, nn.Module) and _leaf_weights(value):
            children[key] = tuple(value["weight"].shape)
        elif isinstance(value, nn.Module | list | dict) and _has_arrays(value):
            own = True
    return children, own


def _leaf_weights(module: nn.Module) -> bool:
    """A module whose tensors are its own weight (and bias, scales): a linear or a norm."""
    return bool(module.parameters()) and not module.children() and "weight" in module


def _has_arrays(value: object) -> bool:
    if isinstance(value, mx.array):
        return True
    if isinstance(value, nn.Module):
        return bool(value.parameters())
    if isinstance(value, dict):
        return any(_has_arrays(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_arrays(v) for v in value)
    return False


def _shard_attention(module: nn.Module, group: mx.distributed.Group) -> bool:
    """Split one attention's heads over the group; False (left whole) when its head
    counts are not where mlx-lm's modules keep them or do not divide."""
    n = group.size()
    heads = _heads(module, QUERY_HEADS)
    kv_heads = _heads(module, KV_HEADS)
    if heads is None or kv_heads is None or not _linears(module, ATTENTION):
        return False
    if heads[1] % n or kv_heads[1] % n:
        return False
    for name in ("q_proj", "k_proj", "v_proj"):
        setattr(module, name, shard_linear(getattr(module, name), "all-to-sharded", group=group))
    module.o_proj = shard_linear(module.o_proj, "sharded-to-all", group=group)
    for attribute, count in (heads, kv_heads):
        setattr(module, attribute, count // n)
    return True


def _linears(module: nn.Module, names: frozenset[str]) -> bool:
    """Every one of ``names`` the module has is a linear layer (an expert bank's
    ``SwitchLinear`` is not: it stays whole)."""
    return all(isinstance(module[name], _LINEAR) for name in names & set(module.keys()))


def _heads(module: nn.Module, names: tuple[str, ...]) -> tuple[str, int] | None:
    """The one attribute of ``names`` the module has, with its count; None unless exactly
    one is there."""
    found = [(name, getattr(module, name)) for name in names if hasattr(module, name)]
    if len(found) != 1 or not isinstance(found[0][1], int):
        return None
    return found[0]


def _shard_mlp(module: nn.Module, group: mx.distributed.Group) -> None:
    for name in sorted(MLP & set(module.keys())):
        how = "sharded-to-all" if name == "down_proj" else "all-to-sharded"
        setattr(module, name, shard_linear(getattr(module, name), how, group=group))
