"""A model folder → ModelInfo: architecture, shape, quantization and exact bytes per layer.

Everything comes from ``config.json``, the safetensors index and the safetensors headers;
no tensor is ever loaded, so a 1 TB model is read in milliseconds and the planner works
with real byte counts instead of parameter-count guesses. Problems a person can fix (a
wrong folder, an interrupted download, an architecture mlx-lm lacks) raise ``ModelError``
with a message that says what is wrong and what to do.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.model.safetensors_headers import FLOAT_DTYPES, HeaderError, TensorEntry, read_header
from core.units import count, size
from core.worker.shardfiles import LAYER_PATTERN

INDEX_NAME = "model.safetensors.index.json"
# mlx-lm's own rule (utils.sharded_load): a tensor belongs to layer N when its name has
# "layers.N." as a whole path component.
# Towers of multimodal checkpoints have "layers" too; they are not the language model's.
_NOT_TEXT = re.compile(r"vision|visual|audio|multi_modal|mm_projector")
_QUANT_SIDECARS = (".scales", ".biases", ".global_scale")
_DTYPE_LABELS = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}


class ModelError(Exception):
    """A model folder MacMesh cannot use; the message names the problem and the fix."""


@dataclass(frozen=True)
class ModelInfo:
    """What the planner and the app need to know about a model, read without loading it.

    ``layer_bytes[n]`` is the on-disk size of every tensor of transformer layer ``n``;
    ``shared_bytes`` the rest (embeddings, final norm, output head), which every pipeline
    stage keeps. ``kv_elements_per_token`` is per layer, keys and values together.
    """

    path: Path
    name: str
    architecture: str
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    parameter_count: int
    bytes_on_disk: int
    quantization: dict[str, Any] | None = field(hash=False)
    tie_word_embeddings: bool
    dtype: str
    context_length: int | None
    can_tensor_shard: bool
    has_native_pipeline: bool
    weight_files: tuple[Path, ...]
    layer_bytes: tuple[int, ...]
    shared_bytes: int
    kv_elements_per_token: int
    kv_split_by_tensor: bool = True

    @property
    def quantization_label(self) -> str:
        """ "4-bit", "8-bit mxfp8", "bf16", "fp16": what a person calls the weights' format."""
        if self.quantization:
            mode = self.quantization.get("mode", "affine")
            suffix = "" if mode == "affine" else f" {mode}"
            return f"{self.quantization['bits']}-bit{suffix}"
        return _DTYPE_LABELS.get(self.dtype, self.dtype)

    @property
    def weight_bytes(self) -> int:
        """All tensor bytes the model loads (layers + shared)."""
        return sum(self.layer_bytes) + self.shared_bytes

    @property
    def dtype_bytes(self) -> int:
        """Bytes per activation / KV-cache element (the model computes in ``dtype``)."""
        return {"float32": 4, "float64": 8}.get(self.dtype, 2)

    def summary(self) -> str:
        """One line for a list: "llama · 30 layers · 135M params · 4-bit · 93.6 MB"."""
        return " · ".join(
            [
                self.architecture,
                f"{self.layers} layers",
                f"{count(self.parameter_count)} params",
                self.quantization_label,
                size(self.bytes_on_disk),
            ]
        )


def read_model_info(folder: Path, *, check_data: bool = True) -> ModelInfo:
    """Read ``folder``'s config, index and safetensors headers into a ModelInfo.

    ``check_data=False`` accepts files that hold only their header (test fixtures that
    describe a 400 GB model in a few kB); every other check still runs.
    """
    folder = Path(folder).expanduser()
    config = _read_config(folder)
    text = _text_config(config)
    architecture = str(config["model_type"])
    can_tensor_shard, has_native_pipeline = _architecture_support(config)
    files = _weight_files(folder)
    tensors: dict[str, TensorEntry] = {}
    bytes_on_disk = 0
    for file in files:
        try:
            header = read_header(file, check_data=check_data)
        except HeaderError as error:
            raise ModelError(
                f"Cannot use the weights in {folder}: {error}. Download or convert the model again."
            ) from error
        tensors.update(header.tensors)
        bytes_on_disk += header.declared_size

    layers = _int(text, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _int(text, "hidden_size", "d_model", "n_embd")
    heads = _int(text, "num_attention_heads", "n_head")
    kv_heads = _int(text, "num_key_value_heads", default=heads)
    head_dim = _int(text, "head_dim", default=hidden // heads if heads else 0)
    quantization = _quantization(config)
    layer_bytes, shared_bytes, seen = _tally_bytes(tensors, layers)
    missing = sorted(set(range(layers)) - seen)
    if missing:
        shown = ", ".join(str(n) for n in missing[:8]) + (" ..." if len(missing) > 8 else "")
        raise ModelError(
            f"config.json says {layers} layers but the weights have none for layer(s) "
            f"{shown} in {folder}. The download is incomplete: download the model again."
        )
    kv_rank = text.get("kv_lora_rank")
    return ModelInfo(
        path=folder,
        name=folder.name,
        architecture=architecture,
        layers=layers,
        hidden_size=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=_int(text, "intermediate_size", "ffn_dim", "n_inner", default=0),
        vocab_size=_int(text, "vocab_size", default=0),
        parameter_count=_parameter_count(tensors, config),
        bytes_on_disk=bytes_on_disk,
        quantization=_public_quantization(quantization),
        tie_word_embeddings=bool(
            text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))
        ),
        dtype=_dtype(tensors, text),
        context_length=_int(
            text, "max_position_embeddings", "max_sequence_length", "n_positions", default=0
        )
        or None,
        can_tensor_shard=can_tensor_shard,
        has_native_pipeline=has_native_pipeline,
        weight_files=tuple(files),
        layer_bytes=tuple(layer_bytes),
        shared_bytes=shared_bytes,
        # Multi-head latent attention (DeepSeek-style) caches one compressed latent plus
        # the rotary key per token, shared by all heads, so tensor sharding cannot split it.
        kv_elements_per_token=(
            int(kv_rank) + _int(text, "qk_rope_head_dim", default=0)
            if kv_rank
            else 2 * kv_heads * head_dim
        ),
        kv_split_by_tensor=not kv_rank,
    )


def _read_config(folder: Path) -> dict[str, Any]:
    if not folder.is_dir():
        raise ModelError(f"{folder} is not a folder. Choose the folder that holds config.json.")
    path = folder / "config.json"
    if not path.is_file():
        raise ModelError(
            f"{folder} has no config.json, so it is not a model folder. Choose the folder "
            "that holds config.json and the .safetensors weights."
        )
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelError(
            f"{path} is not valid JSON ({error}). Download the model again or fix the file."
        ) from error
    if not isinstance(config, dict) or not config.get("model_type"):
        raise ModelError(f"{path} does not say the model's architecture (model_type).")
    return config


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs nest the language model under text_config: its shape is there,
    and the top level fills in what it lacks (some put tie_word_embeddings there)."""
    nested = config.get("text_config")
    if isinstance(nested, dict):
        return {**{k: v for k, v in config.items() if k != "text_config"}, **nested}
    return config


def _architecture_support(config: dict[str, Any]) -> tuple[bool, bool]:
    """(has tensor sharding, has mlx-lm's own pipeline), from mlx-lm's model module.

    Imports the module (cheap next to loading weights) but never builds the model.
    """
    import importlib

    import mlx_lm
    from mlx_lm.utils import _get_classes

    try:
        model_class, _ = _get_classes(config)
    except (ValueError, ImportError) as error:
        raise ModelError(
            f"The installed mlx-lm {mlx_lm.__version__} does not support the architecture "
            f"{config['model_type']!r} (config.json model_type). Update mlx-lm on every "
            "Mac, or choose a model with a supported architecture."
        ) from error
    module = importlib.import_module(model_class.__module__)
    native_pipeline = any(
        isinstance(cls, type) and cls.__module__ == module.__name__ and hasattr(cls, "pipeline")
        for cls in vars(module).values()
    )
    return hasattr(model_class, "shard"), native_pipeline


def _weight_files(folder: Path) -> list[Path]:
    """The index's files when there is one, else ``model*.safetensors`` as mlx-lm globs."""
    index = folder / INDEX_NAME
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
            raise ModelError(
                f"{index} is not a valid safetensors index. Download the model again."
            ) from error
        missing = [name for name in names if not (folder / name).is_file()]
        if missing:
            raise ModelError(
                f"{INDEX_NAME} in {folder} names {', '.join(missing)}, which "
                f"{'is' if len(missing) == 1 else 'are'} not there. The download is "
                "incomplete: download the model again."
            )
        files = [folder / name for name in names]
    else:
        files = sorted(folder.glob("model*.safetensors"))
    if not files:
        raise ModelError(
            f"{folder} has no weight files (model*.safetensors). MacMesh runs MLX "
            "safetensors models: download one from mlx-community, or convert with mlx_lm.convert."
        )
    return files


def _tally_bytes(tensors: dict[str, TensorEntry], layers: int) -> tuple[list[int], int, set[int]]:
    """Bytes per layer, shared bytes, and the layer numbers that have any tensor.

    Layer numbers past the config's count (multi-token-prediction layers) are dropped by
    mlx-lm's sanitize, so they are neither layers nor shared here.
    """
    per_layer = [0] * layers
    shared = 0
    seen: set[int] = set()
    for name, tensor in tensors.items():
        match = LAYER_PATTERN.search(name)
        if match and not _NOT_TEXT.search(name[: match.start()]):
            n = int(match.group(1))
            if n < layers:
                per_layer[n] += tensor.nbytes
                seen.add(n)
        else:
            shared += tensor.nbytes
    return per_layer, shared, seen


def _quantization(config: dict[str, Any]) -> dict[str, Any] | None:
    for key in ("quantization", "quantization_config"):
        for source in (config, config.get("text_config") or {}):
            value = source.get(key)
            if isinstance(value, dict) and "bits" in value and "group_size" in value:
                return value
    return None


def _public_quantization(quantization: dict[str, Any] | None) -> dict[str, Any] | None:
    if quantization is None:
        return None
    return {
        "bits": int(quantization["bits"]),
        "group_size": int(quantization["group_size"]),
        "mode": str(quantization.get("mode", "affine")),
    }


def _parameter_count(tensors: dict[str, TensorEntry], config: dict[str, Any]) -> int:
    """Logical parameters: a packed uint32 weight holds 32/bits of them; scales are not."""
    quantization = _quantization(config) or {}
    total = 0
    for name, tensor in tensors.items():
        module, _, leaf = name.rpartition(".")
        if f".{leaf}" in _QUANT_SIDECARS and f"{module}.scales" in tensors:
            continue
        if tensor.dtype == "U32" and f"{module}.scales" in tensors:
            override = quantization.get(module)
            bits = override.get("bits") if isinstance(override, dict) else None
            bits = bits or quantization.get("bits") or _bits_from_shapes(tensors, module, config)
            total += tensor.numel * 32 // int(bits)
        else:
            total += tensor.numel
    return total


def _bits_from_shapes(tensors: dict[str, TensorEntry], module: str, config: dict) -> int:
    """Bits of a quantized weight with no config entry: packed width over input width."""
    group = int((_quantization(config) or {}).get("group_size", 64))
    packed = tensors[f"{module}.weight"].shape[-1]
    inputs = tensors[f"{module}.scales"].shape[-1] * group
    return max(1, packed * 32 // inputs)


def _dtype(tensors: dict[str, TensorEntry], config: dict[str, Any]) -> str:
    """The floating dtype holding the most bytes: what the model computes and caches in."""
    by_dtype: dict[str, int] = {}
    for tensor in tensors.values():
        if tensor.dtype in FLOAT_DTYPES:
            by_dtype[tensor.dtype] = by_dtype.get(tensor.dtype, 0) + tensor.nbytes
    if by_dtype:
        return FLOAT_DTYPES[max(sorted(by_dtype), key=lambda d: by_dtype[d])]
    return str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")


def _int(config: dict[str, Any], *keys: str, default: int | None = None) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    if default is None:
        raise ModelError(
            f"config.json has no {keys[0]}: MacMesh cannot tell the model's shape. "
            "The file is incomplete or describes a model mlx-lm cannot run."
        )
    return default
