"""Tiny random-weight models that mlx-lm loads like real ones.

Built with mlx-lm's own ``Model`` classes (so parameter names and shapes are exactly what
``mlx_lm.load`` expects, strict), saved over several safetensors files with an index (as
pipeline loading needs), with a self-contained byte-level BPE tokenizer and a ChatML
template. Every model is deterministic for a seed and weighs under 1 MB.

Two choices make the models useful for sharding tests:
- The output rows of special and unused token ids are zero, so greedy decoding never
  emits end-of-sequence or an id the tokenizer cannot decode: a run always produces
  exactly ``max_tokens`` tokens.
- Projections are scaled up (and embeddings down) from mlx's default init, so the next
  token depends on the layers and the whole context instead of echoing the last token:
  greedy text varies, and a wrongly sharded layer changes the output.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from core.worker.shardfiles import LAYER_PATTERN

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
EOS_TOKEN = "<|im_end|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# A few English merges on top of the 256 byte tokens: enough to make the BPE real
# (multi-byte tokens, merge order), small enough to read.
_MERGES = [
    ("Ġ", "t"),
    ("h", "e"),
    ("i", "n"),
    ("Ġ", "a"),
    ("e", "r"),
    ("o", "n"),
    ("Ġt", "he"),
    ("r", "e"),
    ("Ġ", "s"),
    ("a", "t"),
    ("e", "n"),
    ("Ġ", "w"),
    ("Ġ", "o"),
    ("Ġ", "c"),
    ("i", "s"),
    ("Ġ", "b"),
    ("o", "r"),
    ("e", "s"),
    ("Ġ", "f"),
    ("Ġ", "p"),
    ("i", "t"),
    ("a", "n"),
    ("a", "l"),
    ("e", "d"),
    ("Ġ", "m"),
    ("in", "g"),
    ("o", "u"),
    ("Ġ", "i"),
    ("Ġ", "h"),
    ("Ġ", "d"),
    ("l", "e"),
    ("a", "r"),
    ("Ġo", "f"),
    ("n", "d"),
    ("Ġa", "nd"),
    ("Ġ", "T"),
    ("Ġ", "W"),
    ("Ġ", "P"),
    ("Ġ", "F"),
    ("a", "p"),
    ("Ġc", "ap"),
    ("it", "al"),
    ("Ġcap", "ital"),
    ("Ġ", "is"),
    ("Ġi", "s"),
    ("W", "h"),
    ("Wh", "at"),
]
_ARCHS = ("llama", "qwen3")
# Measured over 2 archs x 3 seeds x 3 prompts: with mlx's default init (gain 1) greedy
# decoding often repeats one token 16 times; a gain of 3 on every projection and
# embeddings at a quarter scale give 10-16 distinct ids in the first 16 tokens.
_PROJ_GAIN = 3.0
_EMBED_SCALE = 0.25


def make_tiny_model(
    path: Path,
    arch: str = "llama",
    *,
    layers: int = 4,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 128,
    vocab: int = 512,
    head_dim: int | None = None,
    tie_embeddings: bool | None = None,
    quantize: bool = False,
    bits: int = 4,
    group_size: int = 32,
    shards: int = 2,
    seed: int = 0,
) -> Path:
    """Write a random-weight ``arch`` model folder at ``path`` and return ``path``.

    ``tie_embeddings`` defaults to True for llama (like SmolLM2) and False for qwen3, so the
    two fixtures cover both a tied head and a separate ``lm_head``. ``shards`` weight files
    split the layers in order; the first file also holds the embeddings and final norm,
    the last one the ``lm_head``.
    """
    if arch not in _ARCHS:
        raise ValueError(f"arch must be one of {_ARCHS}, not {arch!r}")
    tokenizer = build_tokenizer()
    if vocab < tokenizer.get_vocab_size():
        size = tokenizer.get_vocab_size()
        raise ValueError(f"vocab {vocab} is smaller than the tokenizer ({size} tokens)")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tie = arch == "llama" if tie_embeddings is None else tie_embeddings
    config = _config(arch, layers, hidden, heads, kv_heads, intermediate, vocab, head_dim, tie)
    config["eos_token_id"] = tokenizer.token_to_id(EOS_TOKEN)
    config["bos_token_id"] = tokenizer.token_to_id("<|endoftext|>")

    weights = _random_weights(config, tokenizer.get_vocab_size(), seed)
    if quantize:
        weights = _quantized(config, weights, bits, group_size)
        config["quantization"] = {"group_size": group_size, "bits": bits, "mode": "affine"}
        config["quantization_config"] = config["quantization"]
    _save_weights(path, weights, layers, shards)
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    _save_tokenizer(path, tokenizer)
    return path


def _config(
    arch: str,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    vocab: int,
    head_dim: int | None,
    tie: bool,
) -> dict:
    config = {
        "model_type": arch,
        "architectures": ["LlamaForCausalLM" if arch == "llama" else "Qwen3ForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "intermediate_size": intermediate,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim or hidden // heads,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
        "tie_word_embeddings": tie,
        "torch_dtype": "float32",
    }
    return config


def _random_weights(config: dict, used_tokens: int, seed: int) -> dict[str, mx.array]:
    """mlx-lm's own model with its own random init, then the two scalings above."""
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(config)
    mx.random.seed(seed)
    model = model_class(args_class.from_dict(config))
    weights = {
        name: value * _PROJ_GAIN if name.endswith("_proj.weight") else value
        for name, value in tree_flatten(model.parameters())
    }
    hidden = config["hidden_size"]
    embed = weights["model.embed_tokens.weight"] * _EMBED_SCALE
    if config["tie_word_embeddings"]:
        # Tied: the embedding is also the output head; silence the ids greedy must skip.
        embed = _zero_rows_from(embed, used_tokens - len(SPECIAL_TOKENS))
    else:
        head = mx.random.normal(weights["lm_head.weight"].shape, scale=hidden**-0.5)
        weights["lm_head.weight"] = _zero_rows_from(head, used_tokens - len(SPECIAL_TOKENS))
    weights["model.embed_tokens.weight"] = embed
    mx.eval(weights)
    return weights


def _zero_rows_from(matrix: mx.array, first: int) -> mx.array:
    keep = (mx.arange(matrix.shape[0]) < first)[:, None]
    return mx.where(keep, matrix, mx.zeros_like(matrix))


def _quantized(
    config: dict, weights: dict[str, mx.array], bits: int, group_size: int
) -> dict[str, mx.array]:
    """Quantize every Linear and Embedding of the model with mlx's nn.quantize."""
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    model.load_weights(list(weights.items()), strict=True)
    nn.quantize(model, group_size=group_size, bits=bits)
    quantized = dict(tree_flatten(model.parameters()))
    mx.eval(quantized)
    return quantized


def _save_weights(path: Path, weights: dict[str, mx.array], layers: int, shards: int) -> None:
    shards = max(1, min(shards, layers))
    files = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    parts: list[dict[str, mx.array]] = [{} for _ in files]
    for name in sorted(weights):
        match = LAYER_PATTERN.search(name)
        if match:
            index = int(match.group(1)) * shards // layers
        else:
            index = shards - 1 if name.startswith("lm_head") else 0
        parts[index][name] = weights[name]
    weight_map = {}
    for file, part in zip(files, parts, strict=True):
        mx.save_safetensors(str(path / file), part, metadata={"format": "mlx"})
        weight_map.update(dict.fromkeys(part, file))
    total = sum(v.nbytes for v in weights.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def build_tokenizer() -> Tokenizer:
    """Byte-level BPE: 256 byte tokens (ids 0-255 in byte order), merges, then specials."""
    alphabet = _bytes_to_unicode()
    vocab = {alphabet[b]: b for b in range(256)}
    for left, right in _MERGES:
        if left not in vocab or right not in vocab:
            raise AssertionError(f"merge {left!r} {right!r} uses an unknown token")
        vocab.setdefault(left + right, len(vocab))
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=list(_MERGES)))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return tokenizer


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in character for every byte (the ByteLevel alphabet)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def _save_tokenizer(path: Path, tokenizer: Tokenizer) -> None:
    tokenizer.save(str(path / "tokenizer.json"))
    added = {
        str(tokenizer.token_to_id(token)): {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for token in SPECIAL_TOKENS
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 2048,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
