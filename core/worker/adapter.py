"""Base model + adapter on a rank: mlx-lm's adapter applied to the whole model, then fused.

The adapter is an mlx-lm adapter folder (``adapter_config.json`` + ``adapters.safetensors``,
as ``mlx_lm.lora`` and MacMesh's fine-tune write it). ``apply_adapter`` runs before the
model is sharded: mlx-lm's own ``load_adapters`` turns the adapted linears into LoRA (or
DoRA) layers and loads the adapter's weights, and each layer's own ``fuse`` folds them
into a plain linear (``W + scale * B^T A^T``), so tensor and pipeline sharding see an
ordinary model. The weights are still lazy then: a pipeline rank computes the fused
weights of its own layers only.

A quantized base's fused layers stay float where the rank runs float anyway (the CPU's
fast path dequantizes every layer: exactly the base's weights plus the adapter's update),
and are quantized again elsewhere (Metal: the base's memory, as ``mlx_lm.fuse`` does).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.tuner.utils import load_adapters

CONFIG = "adapter_config.json"
WEIGHTS = "adapters.safetensors"
FINE_TUNE_TYPES = ("lora", "dora", "full")
_ADAPTER_LEAVES = ("lora_a", "lora_b", "m")


class AdapterError(Exception):
    """The adapter cannot be applied to this model; the message says why, for a person."""


def read_config(folder: Path) -> dict[str, Any]:
    """The folder's ``adapter_config.json``; AdapterError when it is not an adapter."""
    folder = Path(folder)
    if not folder.is_dir():
        raise AdapterError(f"the adapter folder {folder} does not exist on this node")
    for name in (CONFIG, WEIGHTS):
        if not (folder / name).is_file():
            raise AdapterError(f"{folder} is not an adapter folder: it has no {name}")
    try:
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterError(f"{folder / CONFIG} cannot be read: {exc}") from None
    except RecursionError:
        raise AdapterError(f"{folder / CONFIG} is nested too deeply") from None
    if not isinstance(config, dict):
        raise AdapterError(f"{folder / CONFIG} is not a JSON object")
    kind = config.get("fine_tune_type", "lora")
    if kind not in FINE_TUNE_TYPES:
        raise AdapterError(
            f"the adapter in {folder} is of type {kind!r}, which mlx-lm cannot apply "
            f"(it knows {', '.join(FINE_TUNE_TYPES)})"
        )
    if kind != "full":
        lora = config.get("lora_parameters")
        missing = [
            k for k in ("rank", "scale", "dropout") if not isinstance(lora, dict) or k not in lora
        ]
        if missing or not isinstance(config.get("num_layers"), int):
            what = ", ".join(f"lora_parameters.{k}" for k in missing) or "num_layers"
            raise AdapterError(f"{folder / CONFIG} lacks {what}: not an mlx-lm adapter")
    return config


def apply_adapter(model: nn.Module, folder: Path, *, dequantize: bool) -> dict[str, Any]:
    """Apply the adapter at ``folder`` to ``model`` (whole, before sharding) and fuse it;
    AdapterError when it does not fit this model. Returns what was done, for the
    ``loaded`` event: ``{"name", "type", "fused", "precision"}``."""
    folder = Path(folder)
    config = read_config(folder)
    kind = config.get("fine_tune_type", "lora")
    try:
        load_adapters(model, str(folder))
    except ValueError as exc:
        raise AdapterError(_mismatch(folder, str(exc))) from None
    except (KeyError, TypeError) as exc:
        raise AdapterError(f"{folder / CONFIG} cannot be applied: {exc}") from None
    except OSError as exc:
        raise AdapterError(f"{folder / WEIGHTS} cannot be read: {exc}") from None
    fused = [(name, module.fuse(dequantize=dequantize)) for name, module in _fusable(model)]
    if fused:
        model.update_modules(tree_unflatten(fused))
    parameters: dict[str, Any] = dict(tree_flatten(model.parameters()))
    left = [
        name for name in parameters if name.rsplit(".", 1)[-1] in _ADAPTER_LEAVES and kind != "full"
    ]
    if left:
        raise AdapterError(
            f"mlx-lm cannot fuse the adapter into {left[0].rsplit('.', 1)[0]} "
            f"({len(left)} adapter tensors left unfused), so it cannot be sharded"
        )
    quantized = any(isinstance(m, nn.QuantizedLinear) for _, m in fused)
    return {
        "name": _name(folder),
        "type": kind,
        "fused": len(fused),
        "precision": "re-quantized" if quantized else "float",
    }


def _fusable(model: nn.Module) -> list[tuple[str, Any]]:
    return [(name, m) for name, m in model.named_modules() if hasattr(m, "fuse")]


def _mismatch(folder: Path, message: str) -> str:
    """mlx-lm's list of incompatible tensors as one line."""
    problems = [line.strip() for line in message.splitlines()[1:] if line.strip()]
    if not problems:
        return f"the adapter in {folder} does not fit this model: {message}"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"the adapter in {folder} was made for another base model: {problems[0]}{more}"


def _name(folder: Path) -> str:
    """The adapter's name: macmesh.json's when there is one, else the folder's."""
    try:
        meta = json.loads((folder / "macmesh.json").read_text(encoding="utf-8"))
        if isinstance(meta, dict) and isinstance(meta.get("name"), str):
            return str(meta["name"])
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        pass
    return folder.name
