"""A GGUF's byte-level BPE tokenizer → Hugging Face tokenizer files.

GGUF files carry the vocabulary, merges, token types (3 = control/special)
and chat template in their metadata; ``write_tokenizer`` turns them into
``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json``
that mlx-lm (through transformers) loads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_TOKEN_TYPE_CONTROL = 3


def metadata_int(metadata: dict[str, Any], key: str, default: int | None = None) -> int:
    """GGUF scalars arrive as 0-d mx arrays."""
    if key not in metadata:
        if default is None:
            raise ValueError(f"the demo GGUF lacks metadata {key!r}")
        return default
    return int(metadata[key].item())


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_tokenizer(folder: Path, metadata: dict[str, Any], max_length: int) -> None:
    """tokenizer.json plus the config files transformers reads beside it."""
    special = _special_tokens(metadata)
    _build_tokenizer(metadata, list(special.values())).save(str(folder / "tokenizer.json"))
    names = _special_names(metadata)
    extra = [token for token in special.values() if token not in names.values()]
    special_map = {**names, "additional_special_tokens": extra}
    _write_json(folder / "special_tokens_map.json", special_map)
    added = {
        str(token_id): {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for token_id, token in special.items()
    }
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special_map,
        "added_tokens_decoder": added,
        "add_bos_token": bool(metadata_int(metadata, "tokenizer.ggml.add_bos_token", 0)),
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_length,
        "chat_template": metadata["tokenizer.chat_template"],
    }
    _write_json(folder / "tokenizer_config.json", tokenizer_config)


def _special_tokens(metadata: dict[str, Any]) -> dict[int, str]:
    """Control tokens (GGUF token type 3) by id; they must never be split."""
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    types = metadata["tokenizer.ggml.token_type"].tolist()
    return {i: tokens[i] for i, kind in enumerate(types) if kind == _TOKEN_TYPE_CONTROL}


def _special_names(metadata: dict[str, Any]) -> dict[str, str]:
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    keys = {
        "bos_token": "tokenizer.ggml.bos_token_id",
        "eos_token": "tokenizer.ggml.eos_token_id",
        "unk_token": "tokenizer.ggml.unknown_token_id",
        "pad_token": "tokenizer.ggml.padding_token_id",
    }
    return {
        name: tokens[metadata_int(metadata, key)] for name, key in keys.items() if key in metadata
    }


def _build_tokenizer(metadata: dict[str, Any], special: list[str]) -> Any:
    """A byte-level BPE equal to llama.cpp's 'smollm' pre-tokenizer.

    llama.cpp splits every digit on its own before the GPT-2 regex, hence the
    Digits step ahead of ByteLevel.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    if metadata.get("tokenizer.ggml.model") != "gpt2":
        raise ValueError(f"unexpected tokenizer {metadata.get('tokenizer.ggml.model')!r}")
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    vocab = {token: index for index, token in enumerate(tokens)}
    merges = [tuple(merge.split(" ", 1)) for merge in metadata["tokenizer.ggml.merges"]]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    return tokenizer
