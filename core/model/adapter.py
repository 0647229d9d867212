"""Before a Start with an adapter: is the folder an adapter, and made for this model?

Checked on this Mac, before anything starts, so a wrong folder gets one line instead of a
failed job: the folder holds mlx-lm's adapter files; the base model ``macmesh.json``
names (when there is one) is this model; and every tensor of ``adapters.safetensors``
fits the model's layer it adapts (shapes read from both files' headers, nothing loaded).
The worker checks again as it applies it (``core.worker.adapter``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.jsonfile import FileProblem, read_json
from core.model.info import ModelInfo
from core.model.safetensors_headers import HeaderError, TensorEntry, read_header

CONFIG = "adapter_config.json"
WEIGHTS = "adapters.safetensors"
METADATA = "macmesh.json"
ADAPTER_JSON_CAP = 4 << 20  # an adapter's config: a few KB
# What a node needs to apply the adapter (checkpoints stay on this Mac).
SHIPPED = (CONFIG, WEIGHTS, METADATA)
_LAYER = re.compile(r"\.layers\.(\d+)\.")


class AdapterError(ValueError):
    """The folder is not an adapter this model can use; the message says why, in a line."""


@dataclass(frozen=True)
class AdapterUse:
    """An adapter checked against a model."""

    path: Path
    name: str
    base_model: str | None  # macmesh.json's, when the folder has one
    kind: str  # mlx-lm's fine_tune_type: lora, dora or full
    files: tuple[str, ...]  # what every node needs, relative to path


def check_adapter(info: ModelInfo, folder: Path | str) -> AdapterUse:
    """``folder`` as an adapter of ``info``'s model; AdapterError (one line) when it is
    not an adapter, or was made for another base model."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise AdapterError(f"{folder} is not a folder: give the adapter's folder")
    for name in (CONFIG, WEIGHTS):
        if not (folder / name).is_file():
            raise AdapterError(f"{folder} is not an adapter folder: it has no {name}")
    config = _json(folder / CONFIG)
    meta = _json(folder / METADATA) if (folder / METADATA).is_file() else {}
    kind = str(config.get("fine_tune_type", "lora"))
    name = str(meta.get("name") or folder.name)
    base = meta.get("base_model")
    if isinstance(base, str) and base and base not in (info.name, info.path.name):
        raise AdapterError(
            f"the adapter {name!r} was made for {base}, not for {info.name}: "
            f"choose {base} as the model, or an adapter trained on {info.name}"
        )
    _check_shapes(info, folder, name, kind)
    files = tuple(f for f in SHIPPED if (folder / f).is_file())
    return AdapterUse(folder, name, base if isinstance(base, str) else None, kind, files)


def _json(path: Path) -> dict[str, Any]:
    try:
        value = read_json(path, ADAPTER_JSON_CAP)
    except FileProblem as problem:
        raise AdapterError(f"{path} cannot be read: {problem.what}") from None
    if not isinstance(value, dict):
        raise AdapterError(f"{path} is not a JSON object: not an adapter")
    return value


def _check_shapes(info: ModelInfo, folder: Path, name: str, kind: str) -> None:
    try:
        adapter = read_header(folder / WEIGHTS).tensors
        model: dict[str, TensorEntry] = {}
        for file in info.weight_files:
            model.update(read_header(file, check_data=False).tensors)
    except HeaderError as exc:
        raise AdapterError(f"the adapter {name!r} cannot be read: {exc}") from None
    if not adapter:
        raise AdapterError(f"the adapter {name!r} holds no tensors")
    bits = (info.quantization or {}).get("bits")
    problems = [
        problem
        for tensor, entry in sorted(adapter.items())
        if (problem := _problem(tensor, entry.shape, model, info.layers, kind, bits))
    ]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise AdapterError(
            f"the adapter {name!r} was made for another base model than {info.name}: "
            f"{problems[0]}{more}"
        )


def _problem(
    tensor: str,
    shape: tuple[int, ...],
    model: dict[str, TensorEntry],
    layers: int,
    kind: str,
    bits: object,
) -> str | None:
    """Why ``tensor`` does not fit the model, or None."""
    layer = _LAYER.search(tensor)
    if layer and int(layer.group(1)) >= layers:
        return f"{tensor} adapts layer {layer.group(1)}, and the model has {layers} layers"
    if kind == "full":
        found = model.get(tensor)
        if found is None:
            return f"the model has no {tensor}"
        return None if found.shape == shape else f"{tensor} is {shape}, the model's {found.shape}"
    module, _, leaf = tensor.rpartition(".")
    if leaf not in ("lora_a", "lora_b") or len(shape) != 2:
        return None  # DoRA's magnitudes, embeddings: the worker checks them as it loads
    base = model.get(f"{module}.weight")
    if base is None:
        return f"the model has no {module}"
    if len(base.shape) != 2:
        return None
    out_dims, in_dims = base.shape
    if f"{module}.scales" in model and isinstance(bits, int) and bits > 0:
        in_dims = in_dims * 32 // bits  # packed: 32 // bits values per uint32
    wanted = in_dims if leaf == "lora_a" else out_dims
    got = shape[0] if leaf == "lora_a" else shape[1]
    if got == wanted:
        return None
    side = "input" if leaf == "lora_a" else "output"
    return f"{module} has {wanted} {side} features here, {got} in the adapter"
