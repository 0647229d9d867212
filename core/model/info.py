"""A model folder → ModelInfo: architecture, shape, quantization and exact bytes per layer.

Everything comes from ``config.json``, the safetensors index and the safetensors headers;
no tensor is ever loaded, so a 1 TB model is read in milliseconds and the planner works
with real byte counts instead of parameter-count guesses. Problems a person can fix (a
wrong folder, an interrupted download, an architecture mlx-lm lacks) raise ``ModelError``
with a message that says what is wrong and what to do; ``core/model/validate.py`` checks
every value read from those files first (types, bounded counts, names inside the folder).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.model.experts import Experts, is_routed_expert, read_experts
from core.model.safetensors_headers import (
    FLOAT_DTYPES,
    HeaderError,
    SafetensorsHeader,
    TensorEntry,
    check_complete,
    read_header,
)
from core.model.validate import (
    MAX_CONTEXT,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_INTERMEDIATE,
    MAX_LAYERS,
    MAX_VOCAB,
    ConfigView,
    ModelError,
    index_file_names,
    is_dir,
    is_file,
    read_json,
)
from core.units import count, size
from core.worker.shardfiles import LAYER_PATTERN
from core.worker.tensor_parts import part_name, split_tensors

INDEX_NAME = "model.safetensors.index.json"
# mlx-lm's own rule (utils.sharded_load): a tensor belongs to layer N when its name has
# "layers.N." as a whole path component.
# Towers of multimodal checkpoints have "layers" too; they are not the language model's.
_NOT_TEXT = re.compile(r"vision|visual|audio|multi_modal|mm_projector")
_QUANT_SIDECARS = (".scales", ".biases", ".global_scale")
_DTYPE_LABELS = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}


__all__ = ["INDEX_NAME", "ModelError", "ModelInfo", "read_model_info"]


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
    # mlx-lm has no tensor sharding for the architecture, so MacMesh's own splits its
    # attention and MLPs (``core.worker.tensor_shard``); ``tensor_whole_bytes`` of its
    # layers (the parts ``tensor_whole_parts`` names, largest first, and the norms) stay
    # whole on every node.
    own_tensor_sharding: bool = False
    tensor_whole_bytes: int = 0
    tensor_whole_parts: tuple[str, ...] = ()
    # The all-reduces a token's step makes under it (one a split attention or MLP); 0:
    # two a layer, as mlx-lm's sharding.
    tensor_exchanges: int = 0
    # The routed experts of a mixture of experts (none for a dense model): what a token
    # reads of each layer is the rest of it and ``per_token`` of ``total`` experts.
    experts: Experts = field(default_factory=Experts, hash=False)
    # Every safetensors file holds its header only: planned from the layout, the weights
    # are not here (``read_model_info(header_only_ok=True)``, the Hub's headers).
    weights_absent: bool = False

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
        """One line for a list: "llama · 30 layers · 135M params · 4-bit · 93.6 MB weights" (the
        safetensors' bytes, as the Model pane's Weights; a library's size is the folder's)."""
        return " · ".join(
            [
                self.architecture,
                f"{self.layers} layers",
                f"{count(self.parameter_count)} params",
                self.quantization_label,
                f"{size(self.bytes_on_disk)} weights",
            ]
        )


def read_model_info(
    folder: Path, *, check_data: bool = True, header_only_ok: bool = False
) -> ModelInfo:
    """Read ``folder``'s config, index and safetensors headers into a ModelInfo.

    A folder whose every safetensors file stops right after its header (the layout of a
    model without its weights: MacMesh's copies of the Hub's headers) is read with
    ``weights_absent`` set when ``header_only_ok`` (to plan it) and refused, saying so,
    otherwise. ``check_data=False`` accepts any file shorter than its header says (test
    fixtures); every other check still runs.
    """
    folder = Path(folder).expanduser()
    config = _read_config(folder)
    can_tensor_shard, has_native_pipeline = _architecture_support(config)
    files = _weight_files(folder)
    tensors: dict[str, TensorEntry] = {}
    origin: dict[str, Path] = {}
    bytes_on_disk = 0
    headers = _read_headers(folder, files)
    weights_absent = all(header.header_only for header in headers.values())
    if check_data and not (weights_absent and header_only_ok):
        _check_data(folder, headers, weights_absent)
    for file, header in headers.items():
        tensors.update(header.tensors)
        origin.update(dict.fromkeys(header.tensors, file))
        bytes_on_disk += header.declared_size

    layers = config.count("num_hidden_layers", "n_layer", "num_layers", limit=MAX_LAYERS)
    hidden = config.count("hidden_size", "d_model", "n_embd", limit=MAX_HIDDEN)
    heads = config.count("num_attention_heads", "n_head", limit=MAX_HEADS)
    kv_heads = config.count("num_key_value_heads", limit=MAX_HEADS, default=heads)
    head_dim = config.count("head_dim", limit=MAX_HIDDEN, default=hidden // heads or -1)
    if head_dim < 1:
        raise ModelError(
            f"{config.path}: hidden_size ({hidden}) is smaller than num_attention_heads "
            f"({heads}), so a head has no width: the file is wrong."
        )
    quantization = config.quantization()
    named_dtype = config.name("torch_dtype", "dtype")  # checked even when tensors say it
    layer_bytes, shared_bytes, seen, expert_bytes = _tally_bytes(tensors, layers)
    missing = sorted(set(range(layers)) - seen)
    if missing:
        shown = ", ".join(str(n) for n in missing[:8]) + (" ..." if len(missing) > 8 else "")
        raise ModelError(
            f"config.json says {layers} layers but the weights have none for layer(s) "
            f"{shown} in {folder}. The download is incomplete: download the model again."
        )
    # Multi-head latent attention (DeepSeek-style) caches one compressed latent plus
    # the rotary key per token, shared by all heads, so tensor sharding cannot split it.
    kv_rank = config.count("kv_lora_rank", limit=MAX_HIDDEN, default=0, minimum=0)
    whole_bytes, whole_parts, exchanges = (
        (0, (), 0) if can_tensor_shard else _tensor_whole(tensors, layers)
    )
    return ModelInfo(
        path=folder,
        name=folder.name,
        architecture=config.top["model_type"],
        layers=layers,
        hidden_size=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=config.count(
            "intermediate_size", "ffn_dim", "n_inner", limit=MAX_INTERMEDIATE, default=0
        ),
        vocab_size=config.count("vocab_size", limit=MAX_VOCAB, default=0),
        parameter_count=_parameter_count(tensors, origin, quantization),
        bytes_on_disk=bytes_on_disk,
        quantization=_public_quantization(quantization),
        tie_word_embeddings=config.flag("tie_word_embeddings"),
        dtype=_dtype(tensors) or named_dtype or "bfloat16",
        context_length=config.count(
            "max_position_embeddings",
            "max_sequence_length",
            "n_positions",
            limit=MAX_CONTEXT,
            default=0,
        )
        or None,
        can_tensor_shard=can_tensor_shard or whole_bytes < sum(layer_bytes),
        own_tensor_sharding=not can_tensor_shard,
        tensor_whole_bytes=whole_bytes,
        tensor_whole_parts=whole_parts,
        tensor_exchanges=exchanges,
        has_native_pipeline=has_native_pipeline,
        weight_files=tuple(files),
        layer_bytes=tuple(layer_bytes),
        shared_bytes=shared_bytes,
        kv_elements_per_token=(
            kv_rank + config.count("qk_rope_head_dim", limit=MAX_HIDDEN, default=0, minimum=0)
            if kv_rank
            else 2 * kv_heads * head_dim
        ),
        kv_split_by_tensor=not kv_rank,
        experts=read_experts(config, expert_bytes),
        weights_absent=weights_absent,
    )


def _read_headers(folder: Path, files: list[Path]) -> dict[Path, SafetensorsHeader]:
    """Every weight file's header, not yet checked against the file's size."""
    headers = {}
    for file in files:
        try:
            headers[file] = read_header(file, check_data=False)
        except HeaderError as error:
            raise ModelError(
                f"Cannot use the weights in {folder}: {error}. Download or convert the model again."
            ) from error
    return headers


def _check_data(folder: Path, headers: dict[Path, SafetensorsHeader], weights_absent: bool) -> None:
    """ModelError unless every file holds all the data its header describes."""
    if weights_absent:
        raise ModelError(
            f"{folder} holds only the safetensors headers of {folder.name}, not its weights "
            f"(every file stops after its header). `macmesh plan {folder}` plans it from "
            "them; to run it, download the model."
        )
    for file, header in headers.items():
        try:
            check_complete(file, header)
        except HeaderError as error:
            raise ModelError(
                f"Cannot use the weights in {folder}: {error}. Download or convert the model again."
            ) from error


def _read_config(folder: Path) -> ConfigView:
    if not is_dir(folder):
        raise ModelError(f"{folder} is not a folder. Choose the folder that holds config.json.")
    path = folder / "config.json"
    if not is_file(path):
        raise ModelError(
            f"{folder} has no config.json, so it is not a model folder. Choose the folder "
            "that holds config.json and the .safetensors weights."
        )
    return ConfigView.of(path, read_json(path, "Download the model again or fix the file."))


def _architecture_support(config: ConfigView) -> tuple[bool, bool]:
    """(has tensor sharding, has mlx-lm's own pipeline), from mlx-lm's model module.

    Imports the module (cheap next to loading weights) but never builds the model.
    """
    import importlib

    import mlx_lm
    from mlx_lm.utils import _get_classes

    try:
        model_class, _ = _get_classes(config.top)
    except (ValueError, ImportError, AttributeError) as error:  # AttributeError: not a model
        raise ModelError(
            f"The installed mlx-lm {mlx_lm.__version__} does not support the architecture "
            f"{config.top['model_type']!r} ({config.path} model_type). Update mlx-lm on every "
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
    if is_file(index):
        again = "Download the model again."
        names = index_file_names(index, read_json(index, again), again)
        missing = [name for name in names if not is_file(folder / name)]
        if missing:
            raise ModelError(
                f"{INDEX_NAME} in {folder} names {', '.join(missing)}, which "
                f"{'is' if len(missing) == 1 else 'are'} not there. The download is "
                "incomplete: download the model again."
            )
        files = [folder / name for name in names]
    else:
        # Regular files only: a FIFO or device named like a weight file would block a read.
        files = [file for file in sorted(folder.glob("model*.safetensors")) if is_file(file)]
    if not files:
        raise ModelError(
            f"{folder} has no weight files (model*.safetensors). MacMesh runs MLX "
            "safetensors models: download one from mlx-community, or convert with mlx_lm.convert."
        )
    return files


def _tally_bytes(
    tensors: dict[str, TensorEntry], layers: int
) -> tuple[list[int], int, set[int], list[int]]:
    """Bytes per layer, shared bytes, the layer numbers that have any tensor, and the
    bytes of each layer's routed experts (part of its bytes).

    Layer numbers past the config's count (multi-token-prediction layers) are dropped by
    mlx-lm's sanitize, so they are neither layers nor shared here.
    """
    per_layer = [0] * layers
    experts = [0] * layers
    shared = 0
    seen: set[int] = set()
    for name, tensor in tensors.items():
        match = LAYER_PATTERN.search(name)
        if match and not _NOT_TEXT.search(name[: match.start()]):
            n = int(match.group(1))
            if n < layers:
                per_layer[n] += tensor.nbytes
                seen.add(n)
                if is_routed_expert(name[match.end() :]):
                    experts[n] += tensor.nbytes
        else:
            shared += tensor.nbytes
    return per_layer, shared, seen, experts


def _tensor_whole(tensors: dict[str, TensorEntry], layers: int) -> tuple[int, tuple[str, ...], int]:
    """The layers' bytes MacMesh's own tensor sharding keeps whole on every node
    (``core.worker.tensor_parts``), the parts holding them, largest first (norms, always
    whole and small, unnamed), and the modules it splits: one exchange each a step."""
    modules = split_tensors({n: t.shape for n, t in tensors.items()}, routed=is_routed_expert)
    split = {name for names in modules.values() for name in names}
    whole = 0
    parts: dict[str, int] = {}
    recurrent: set[str] = set()  # parts with a state-space decay (Mamba, GatedDeltaNet)
    for name, tensor in tensors.items():
        match = LAYER_PATTERN.search(name)
        if not match or _NOT_TEXT.search(name[: match.start()]) or int(match.group(1)) >= layers:
            continue
        if name not in split:
            whole += tensor.nbytes
            part = part_name(name[match.end() :])
            if "norm" not in name[match.end() :]:
                parts[part] = parts.get(part, 0) + tensor.nbytes
            if name.endswith(".A_log"):
                recurrent.add(part)
    ordered = sorted(parts, key=lambda part: -parts[part])
    exchanges = sum(1 for path in modules if _layer_of(path, layers))
    return whole, tuple(_part_label(part, part in recurrent) for part in ordered), exchanges


def _layer_of(path: str, layers: int) -> bool:
    """A module path inside one of the model's text decoder layers."""
    match = LAYER_PATTERN.search(path + ".")
    return match is not None and not _NOT_TEXT.search(path) and int(match.group(1)) < layers


def _part_label(part: str, recurrent: bool) -> str:
    """ "mixer (recurrent)", "mlp.switch_mlp (routed experts)": a part and what it is."""
    if recurrent:
        return f"{part} (recurrent)"
    if is_routed_expert(part):
        return f"{part} (routed experts)"
    return part


def _public_quantization(quantization: dict[str, Any] | None) -> dict[str, Any] | None:
    if quantization is None:
        return None
    return {
        "bits": int(quantization["bits"]),
        "group_size": int(quantization["group_size"]),
        "mode": str(quantization.get("mode", "affine")),
    }


def _parameter_count(
    tensors: dict[str, TensorEntry],
    origin: dict[str, Path],
    quantization: dict[str, Any] | None,
) -> int:
    """Logical parameters: a packed uint32 weight holds 32/bits of them; scales are not."""
    quantization = quantization or {}
    total = 0
    for name, tensor in tensors.items():
        module, _, leaf = name.rpartition(".")
        scales = tensors.get(f"{module}.scales")
        if f".{leaf}" in _QUANT_SIDECARS and scales is not None:
            continue
        if tensor.dtype == "U32" and scales is not None:
            override = quantization.get(module)
            bits = override.get("bits") if isinstance(override, dict) else None
            bits = bits or quantization.get("bits")
            if not bits:
                bits = _bits_from_shapes(tensor, scales, quantization, origin[name], name)
            total += tensor.numel * 32 // int(bits)
        else:
            total += tensor.numel
    return total


def _bits_from_shapes(
    packed: TensorEntry, scales: TensorEntry, quantization: dict[str, Any], file: Path, name: str
) -> int:
    """Bits of a quantized weight with no config entry: packed width over input width."""
    group = int(quantization.get("group_size", 64))
    inputs = scales.shape[-1] * group if scales.shape else 0
    if not packed.shape or inputs < 1:
        raise ModelError(
            f"Cannot use the weights in {file.parent}: {file.name}: tensor {name!r} is packed "
            "but its scales give no width to tell its bits. Download or convert the model again."
        )
    return max(1, packed.shape[-1] * 32 // inputs)


def _dtype(tensors: dict[str, TensorEntry]) -> str | None:
    """The floating dtype holding the most bytes: what the model computes and caches in
    (None when no tensor is floating: config.json says)."""
    by_dtype: dict[str, int] = {}
    for tensor in tensors.values():
        if tensor.dtype in FLOAT_DTYPES:
            by_dtype[tensor.dtype] = by_dtype.get(tensor.dtype, 0) + tensor.nbytes
    if by_dtype:
        return FLOAT_DTYPES[max(sorted(by_dtype), key=lambda d: by_dtype[d])]
    return None
