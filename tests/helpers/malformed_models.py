"""A corpus of malformed model folders: each a small valid model broken in one way.

``valid_model`` writes a 2-layer llama whose safetensors files hold their data (zeros,
sparse on disk), so every check runs, as ``macmesh plan`` runs them. Each ``Case`` breaks
one file of such a folder and says which file and which field the one-line ``ModelError``
must name. The hypothesis tests fuzz the same three files beyond these cases.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.header_models import llama_config, llama_tensors, write_header_only_model

INDEX = "model.safetensors.index.json"
FIRST = "model-00001-of-00002.safetensors"
DEEP = 100_000


def valid_config() -> dict:
    return llama_config(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=256)


def valid_model(folder: Path, config: dict | None = None) -> Path:
    """A small llama (two weight files and an index) that ``read_model_info`` accepts."""
    config = config or valid_config()
    write_header_only_model(folder, config, llama_tensors(config), files=2)
    for file in folder.glob("*.safetensors"):
        fill_data(file)
    return folder


def fill_data(file: Path) -> None:
    """Extend a header-only file to the size its header declares (zeros, sparse)."""
    raw = file.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    end = max((e["data_offsets"][1] for k, e in header.items() if k != "__metadata__"), default=0)
    os.truncate(file, 8 + length + end)


def write_header(file: Path, header: object, *, raw: bytes | None = None) -> None:
    """Replace ``file`` with a safetensors file holding ``header`` (or ``raw`` header bytes)."""
    body = raw if raw is not None else json.dumps(header).encode()
    file.write_bytes(struct.pack("<Q", len(body)) + body)


def edit_json(path: Path, change: Callable[[dict], object]) -> None:
    """Rewrite a JSON file with ``change`` applied (it edits in place or returns the new)."""
    content = json.loads(path.read_text())
    changed = change(content)
    path.write_text(json.dumps(content if changed is None else changed))


def set_config(**values: object) -> Callable[[Path], None]:
    return lambda folder: edit_json(folder / "config.json", lambda c: c.update(values))


def set_weight_map(weight_map: object) -> Callable[[Path], None]:
    return lambda folder: edit_json(
        folder / INDEX, lambda index: {**index, "weight_map": weight_map}
    )


def set_tensor(**entry: object) -> Callable[[Path], None]:
    """One tensor of the first file replaced by ``entry`` (other keys kept)."""

    def change(folder: Path) -> None:
        raw = (folder / FIRST).read_bytes()
        (length,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + length])
        name = next(k for k in sorted(header) if k != "__metadata__")
        header[name] = {**header[name], **entry}
        write_header(folder / FIRST, header)

    return change


def write_raw(name: str, content: bytes) -> Callable[[Path], None]:
    return lambda folder: (folder / name).write_bytes(content)


def deep_json(depth: int = DEEP) -> bytes:
    return b"[" * depth + b"]" * depth


def make_directory(name: str) -> Callable[[Path], None]:
    """A file replaced by a folder of the same name: there, but not a file."""

    def change(folder: Path) -> None:
        (folder / name).unlink()
        (folder / name).mkdir()

    return change


def _deep_header(folder: Path) -> None:
    body = b'{"x":' + deep_json() + b"}"
    write_header(folder / FIRST, None, raw=body)


def _shape_infinity(folder: Path) -> None:
    raw = b'{"x": {"dtype": "F32", "shape": [Infinity], "data_offsets": [0, 4]}}'
    write_header(folder / FIRST, None, raw=raw)


def _shape_1e400(folder: Path) -> None:
    raw = b'{"x": {"dtype": "F32", "shape": [1e400, 2], "data_offsets": [0, 4]}}'
    write_header(folder / FIRST, None, raw=raw)


def _huge_header_length(folder: Path) -> None:
    (folder / FIRST).write_bytes(struct.pack("<Q", 2**40) + b"{}")


def _quantized(**quantization: object) -> Callable[[Path], None]:
    return set_config(quantization={"group_size": 64, "bits": 4, **quantization})


@dataclass(frozen=True)
class Case:
    """One malformed folder: how to break a valid one, and what the message must name."""

    name: str
    breaks: Callable[[Path], None]
    file: str
    field: str

    def build(self, folder: Path) -> Path:
        valid_model(folder)
        self.breaks(folder)
        return folder


CASES: tuple[Case, ...] = (
    # config.json: types
    Case("model_type_list", set_config(model_type=["llama"]), "config.json", "model_type"),
    Case("model_type_dict", set_config(model_type={"a": 1}), "config.json", "model_type"),
    Case("model_type_path", set_config(model_type="../x"), "config.json", "model_type"),
    Case("model_type_not_a_model", set_config(model_type="base"), "config.json", "model_type"),
    Case("architectures_objects", set_config(architectures=[{}]), "config.json", "architectures"),
    Case("text_config_list", set_config(text_config=[1]), "config.json", "text_config"),
    Case("bits_four", _quantized(bits="four"), "config.json", "quantization.bits"),
    Case("bits_99", _quantized(bits=99), "config.json", "quantization.bits"),
    Case("group_size_0", _quantized(group_size=0), "config.json", "quantization.group_size"),
    Case("quantization_list", set_config(quantization=[4]), "config.json", "quantization"),
    Case("kv_lora_rank_abc", set_config(kv_lora_rank="abc"), "config.json", "kv_lora_rank"),
    Case("tie_yes", set_config(tie_word_embeddings="yes"), "config.json", "tie_word_embeddings"),
    Case("torch_dtype_dict", set_config(torch_dtype={"a": 1}), "config.json", "torch_dtype"),
    # config.json: counts
    Case("layers_1e12", set_config(num_hidden_layers=10**12), "config.json", "num_hidden_layers"),
    Case("layers_1e7", set_config(num_hidden_layers=10**7), "config.json", "num_hidden_layers"),
    Case("layers_huge", set_config(num_hidden_layers=10**100), "config.json", "num_hidden_layers"),
    Case("layers_float", set_config(num_hidden_layers=2.5), "config.json", "num_hidden_layers"),
    Case("heads_0", set_config(num_attention_heads=0), "config.json", "num_attention_heads"),
    Case(
        "heads_negative", set_config(num_attention_heads=-4), "config.json", "num_attention_heads"
    ),
    Case("heads_text", set_config(num_attention_heads="4"), "config.json", "num_attention_heads"),
    Case("kv_heads_0", set_config(num_key_value_heads=0), "config.json", "num_key_value_heads"),
    Case("hidden_negative", set_config(hidden_size=-64), "config.json", "hidden_size"),
    Case("hidden_below_heads", set_config(hidden_size=2), "config.json", "hidden_size"),
    Case("head_dim_0", set_config(head_dim=0), "config.json", "head_dim"),
    Case("vocab_negative", set_config(vocab_size=-1), "config.json", "vocab_size"),
    Case("vocab_1e9", set_config(vocab_size=10**9), "config.json", "vocab_size"),
    Case(
        "intermediate_true", set_config(intermediate_size=True), "config.json", "intermediate_size"
    ),
    Case(
        "context_negative",
        set_config(max_position_embeddings=-1),
        "config.json",
        "max_position_embeddings",
    ),
    Case(
        "nested_layers",
        set_config(text_config={"num_hidden_layers": -2}),
        "config.json",
        "text_config.num_hidden_layers",
    ),
    # config.json: the file itself
    Case("config_deep", write_raw("config.json", deep_json()), "config.json", "nested too deep"),
    Case("config_not_object", write_raw("config.json", b"[1, 2]"), "config.json", "JSON object"),
    Case("config_big_int", write_raw("config.json", b"9" * 5000), "config.json", "not valid JSON"),
    Case(
        "config_not_utf8", write_raw("config.json", b"\xff\xfe{"), "config.json", "not valid JSON"
    ),
    Case("config_a_folder", make_directory("config.json"), "config.json", "no config.json"),
    # the index
    Case("weight_map_list", set_weight_map(["a"]), INDEX, "weight_map"),
    Case("weight_map_int_values", set_weight_map({"x": 1}), INDEX, "weight_map"),
    Case("weight_map_escapes", set_weight_map({"x": "../../../../etc/hostname"}), INDEX, "outside"),
    Case("weight_map_absolute", set_weight_map({"x": "/etc/hostname"}), INDEX, "outside"),
    Case("index_deep", write_raw(INDEX, deep_json()), INDEX, "nested too deep"),
    Case("index_empty", set_weight_map({}), INDEX, "weight_map"),
    # safetensors headers
    Case("header_deep", _deep_header, FIRST, "nested too deep"),
    Case("shape_infinity", _shape_infinity, FIRST, "shape"),
    Case("shape_1e400", _shape_1e400, FIRST, "shape"),
    Case("shape_negative", set_tensor(shape=[-1, 64]), FIRST, "shape"),
    Case("shape_text", set_tensor(shape="64"), FIRST, "shape"),
    Case("dtype_unknown", set_tensor(dtype="Q9"), FIRST, "dtype"),
    Case("dtype_list", set_tensor(dtype=["F32"]), FIRST, "dtype"),
    Case("offsets_infinity", set_tensor(data_offsets=[0, 1e400]), FIRST, "byte range"),
    Case("header_length_huge", _huge_header_length, FIRST, "header"),
    Case("weights_a_folder", make_directory(FIRST), FIRST, "not there"),
)

# What ``macmesh plan PATH`` is run on in a subprocess (each costs an interpreter start).
CLI_CASES = (
    "layers_1e12",
    "model_type_dict",
    "weight_map_escapes",
    "bits_four",
    "config_deep",
    "shape_infinity",
    "heads_0",
)


def case(name: str) -> Case:
    return next(c for c in CASES if c.name == name)
