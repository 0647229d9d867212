"""The tiny random models load in mlx-lm like real ones and decode deterministically."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.nn as nn
import pytest
from mlx_lm import load, stream_generate

from tests.helpers.tiny_models import SPECIAL_TOKENS, make_tiny_model

PROMPT = [{"role": "user", "content": "What is the capital of France?"}]


def _greedy(folder: Path, tokens: int) -> list[int]:
    model, tokenizer = load(str(folder))
    prompt = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True)
    return [r.token for r in stream_generate(model, tokenizer, prompt, max_tokens=tokens)]


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_loads_strictly_and_decodes_deterministically(tiny_models: dict[str, Path], arch: str):
    first = _greedy(tiny_models[arch], 8)
    second = _greedy(tiny_models[arch], 8)
    assert first == second
    assert len(first) == 8  # never stops early: greedy cannot pick end-of-sequence


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_greedy_text_varies(tiny_models: dict[str, Path], arch: str):
    tokens = _greedy(tiny_models[arch], 16)
    assert len(set(tokens)) >= 4, tokens


def test_quantized_variant_loads_and_decodes(tmp_path: Path):
    folder = make_tiny_model(tmp_path / "q", arch="qwen3", quantize=True, bits=4, group_size=32)
    config = json.loads((folder / "config.json").read_text())
    assert config["quantization"] == {"group_size": 32, "bits": 4, "mode": "affine"}
    model, _ = load(str(folder))
    assert isinstance(model.model.layers[0].self_attn.q_proj, nn.QuantizedLinear)
    assert isinstance(model.model.embed_tokens, nn.QuantizedEmbedding)
    tokens = _greedy(folder, 8)
    assert len(tokens) == 8
    assert tokens == _greedy(folder, 8)


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path: Path):
    a = make_tiny_model(tmp_path / "a", seed=3)
    b = make_tiny_model(tmp_path / "b", seed=3)
    c = make_tiny_model(tmp_path / "c", seed=4)
    for file in sorted(a.iterdir()):
        assert file.read_bytes() == (b / file.name).read_bytes(), file.name
    weights = "model-00001-of-00002.safetensors"
    assert (a / weights).read_bytes() != (c / weights).read_bytes()


def test_weights_split_by_layer_with_a_complete_index(tmp_path: Path):
    folder = make_tiny_model(tmp_path / "m", arch="qwen3", layers=6, shards=3)
    weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    files = sorted(set(weight_map.values()))
    assert files == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert weight_map["model.embed_tokens.weight"] == files[0]
    assert weight_map["model.norm.weight"] == files[0]
    assert weight_map["lm_head.weight"] == files[2]  # qwen3 fixture: untied head
    for layer, file in ((0, 0), (1, 0), (2, 1), (3, 1), (4, 2), (5, 2)):
        assert weight_map[f"model.layers.{layer}.self_attn.q_norm.weight"] == files[file]
    import mlx.core as mx

    stored = {name for file in files for name in mx.load(str(folder / file))}
    assert stored == set(weight_map)


def test_tokenizer_is_byte_level_with_chat_specials(tiny_models: dict[str, Path]):
    _, tokenizer = load(str(tiny_models["llama"]))
    text = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tokenizer.encode(text)
    for special in SPECIAL_TOKENS[1:]:
        assert tokenizer.convert_tokens_to_ids(special) in ids
    assert tokenizer.decode(ids) == text
    assert tokenizer.encode("é") == [195, 169]  # UTF-8 bytes are the first 256 ids
    assert tokenizer.eos_token_ids == {tokenizer.convert_tokens_to_ids("<|im_end|>")}
    config = json.loads((tiny_models["llama"] / "config.json").read_text())
    assert len(tokenizer.get_vocab()) <= config["vocab_size"]


def test_models_stay_small(tiny_models: dict[str, Path]):
    for folder in tiny_models.values():
        assert sum(f.stat().st_size for f in folder.iterdir()) < 5_000_000
