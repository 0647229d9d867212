"""Tiny random-weight models of any architecture mlx-lm ships, from its own classes.

``make_arch_model(path, model_type)`` writes a folder mlx-lm loads like a real model:
mlx-lm's own ``Model`` for ``model_type`` built from a small config (``arch_config``:
every size field of the architecture's ``ModelArgs`` set small by name, ``SMALL``, then the
architecture's own fields, ``OVERRIDES``), its own random init, saved over two safetensors
files with an index, with the byte-level tokenizer and ChatML template of ``tiny_models``.
Only the output rows of a few printable byte tokens are non-zero (``_output_ids``), so
greedy decoding never ends early (a run gives exactly its ``max_tokens``) and an answer's
text tokenizes back into the tokens generated.

``UNBUILDABLE`` names the model files that cannot be made tiny here, each with the reason.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import pkgutil
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten

from tests.helpers.tiny_models import (
    _MERGES,
    EOS_TOKEN,
    _save_tokenizer,
    _save_weights,
    build_tokenizer,
)

VOCAB = 512
MAX_PARAMS = 4_000_000  # a config field left at its real size shows here, not as 5 GB
LAYERS = 4

# Every size-like field any ModelArgs has, by name: small values that agree with each
# other (hidden 64 = 4 heads x 16; 2 KV heads; experts 4, 2 a token).
SMALL: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": LAYERS,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": VOCAB,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "layer_norm_epsilon": 1e-5,
    "layer_norm_eps": 1e-5,
    "norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    # the same sizes under other names (GPT-2, DBRX, OpenELM...)
    "n_layer": LAYERS,
    "n_layers": LAYERS,
    "num_layers": LAYERS,
    "n_embd": 64,
    "d_model": 64,
    "hidden_dim": 64,
    "dim": 64,
    "n_head": 4,
    "n_heads": 4,
    "num_heads": 4,
    "n_kv_heads": 2,
    "num_kv_heads": 2,
    "n_inner": 128,
    "n_ctx": 2048,
    "n_positions": 2048,
    "rotary_emb_base": 10000.0,
    "rotary_pct": 0.5,
    "post_norm": False,
    "qk_norm": False,
    "use_qk_norm": False,
    "layer_group_size": 2,
    "group_norm_size": 1,
    "conv_window": 2,
    "sliding_window_layers": [0, 2],
    "num_kv_reuse_layers": 0,
    "index_head_dim": 16,
    "index_n_heads": 2,
    "index_topk": 4,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "rope_interleave": True,
    "is_moe_layer": [False, True, False, True],
    "logits_scaling": 1.0,
    "attention_multiplier": 0.25,
    "embedding_multiplier": 1.0,
    "residual_multiplier": 1.0,
    "moe_topk": 2,
    "num_shared_expert": 1,
    "use_mixed_mlp_moe": False,
    "use_cla": False,
    "cla_share_factor": 1,
    "conv_bias": False,
    "conv_L_cache": 3,
    "block_dim": 64,
    "block_multiple_of": 16,
    "block_ffn_dim_multiplier": 1.0,
    "block_auto_adjust_ff_dim": False,
    "block_ff_dim": 128,
    "use_expert_bias": False,
    "num_dense_layers": 1,
    "block_size": 2048,
    "dim_model_base": 64,
    "scale_depth": 1.0,
    "scale_emb": 1.0,
    "shared_intermediate_size": 64,
    "rotary_dim": 8,
    "model_max_length": 2048,
    "intermediate_size_mlp": 128,
    "no_rope_layers": [1, 1, 1, 0],
    "attention_chunk_size": 8,
    "interleave_moe_layer_step": 1,
}

# Fields that change what an architecture is (which layers slide, its rope): set only
# where ModelArgs has no default for them.
WHEN_REQUIRED: dict[str, Any] = {
    "hidden_act": "silu",
    "rope_parameters": {
        "rope_theta": 10000.0,
        "rope_type": "default",
        "type": "default",
        "partial_rotary_factor": 0.5,
        "llama_4_scaling_beta": 0.0,
        "original_max_position_embeddings": 2048,
        "factor": 1.0,
    },
    "layer_types": ["sliding_attention", "full_attention"] * (LAYERS // 2),
    "global_head_dim": 16,
    "vocab_size_per_layer_input": VOCAB,
    "hidden_size_per_layer_input": 8,
    "num_kv_shared_layers": 0,
}

SMALL |= {
    # mixtures of experts
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "moe_num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 64,
    "moe_shared_expert_intermediate_size": 64,
    "n_shared_experts": 1,
    "num_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.0,
    # multi-head latent attention
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    # sliding windows
    "sliding_window": 8,
    "sliding_window_pattern": 2,
    # linear attention, state spaces
    "linear_num_value_heads": 4,
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_conv_kernel_dim": 4,
    "full_attention_interval": 2,
    "partial_rotary_factor": 0.5,
    "conv_kernel": 4,
    "mamba_d_conv": 4,
    "mamba_d_state": 16,
    "mamba_expand": 2,
    "mamba_num_heads": 8,
    "mamba_head_dim": 16,
    "mamba_n_heads": 8,
    "mamba_d_head": 16,
    "mamba_d_ssm": 128,
    "mamba_n_groups": 1,
    "mamba_chunk_size": 16,
    "ssm_state_size": 16,
    "state_size": 16,
    "n_groups": 1,
    "time_step_rank": 8,
    "time_step_limit": (0.0, float("inf")),
    "use_bias": False,
    "use_conv_bias": True,
    "mamba_proj_bias": False,
    "mamba_conv_bias": True,
    "mamba_dt_rank": 8,
}

# Per architecture: the fields that shape it (which layers attend, which are recurrent).
OVERRIDES: dict[str, dict[str, Any]] = {
    "gpt_oss": {"layer_types": ["sliding_attention", "full_attention"] * 2},
    "gemma3_text": {"query_pre_attn_scalar": 16},
    "qwen3_next": {"num_key_value_heads": 2},
    "qwen3_5": {
        "text_config": {
            "model_type": "qwen3_5_text",
            **{
                k: SMALL[k]
                for k in (
                    "hidden_size",
                    "num_hidden_layers",
                    "intermediate_size",
                    "num_attention_heads",
                    "num_key_value_heads",
                    "head_dim",
                    "vocab_size",
                    "max_position_embeddings",
                    "rms_norm_eps",
                    "linear_num_value_heads",
                    "linear_num_key_heads",
                    "linear_key_head_dim",
                    "linear_value_head_dim",
                    "linear_conv_kernel_dim",
                    "full_attention_interval",
                    "tie_word_embeddings",
                )
            },
            "rope_parameters": {
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.5,
                "type": "default",
            },
        }
    },
    "deepseek_v3": {"num_key_value_heads": 4},
    "nemotron_h": {
        "hybrid_override_pattern": ["M", "*", "M", "-"],
        "mamba_num_heads": 8,
        "mamba_head_dim": 16,
        "attention_bias": False,
        "mamba_proj_bias": False,
        "mlp_bias": False,
    },
    "afmoe": {"layer_types": ["sliding_attention", "full_attention"] * 2},
    "exaone_moe": {"layer_types": ["sliding_attention", "full_attention"] * 2},
    "gear": {"layer_types": ["sliding_attention", "full_attention"] * 2},
    "mamba2": {"num_heads": 8, "head_dim": 16, "intermediate_size": 128},
    "deepseek_v2": {
        "rope_scaling": {
            "type": "yarn",
            "factor": 1.0,
            "original_max_position_embeddings": 2048,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        }
    },
    # mlx-lm reads the pattern as a string, transformers' config (the tokenizer's load)
    # as a number unless the layer types are given.
    "exaone4": {
        "sliding_window_pattern": "LG",
        "layer_types": ["sliding_attention", "full_attention"] * 2,
    },
    "dbrx": {
        "attn_config": {"kv_n_heads": 2, "clip_qkv": 8.0, "rope_theta": 10000.0},
        "ffn_config": {"ffn_hidden_size": 128, "moe_num_experts": 4, "moe_top_k": 2},
    },
    "nemotron": {"hidden_act": "relu2"},
    "stablelm": {"use_qkv_bias": False},
    "step3p5": {"num_attention_groups": 2},
    "olmo_hybrid": {"linear_allow_neg_eigval": False},
    "phi3small": {
        "dense_attention_every_n_layers": 2,
        "ff_intermediate_size": 128,
        "gegelu_limit": 20.0,
    },
    "recurrent_gemma": {
        "conv1d_width": 4,
        "logits_soft_cap": 30.0,
        "attention_window_size": 8,
        "block_types": ["recurrent", "attention"],
    },
    "rwkv7": {
        "a_low_rank_dim": 8,
        "v_low_rank_dim": 8,
        "gate_low_rank_dim": 8,
        "decay_low_rank_dim": 8,
    },
    "granitemoehybrid": {"layer_types": ["mamba", "attention"] * 2},
    "mellum": {"layer_types": ["full_attention"] * LAYERS},
    "hunyuan": {"rope_scaling": {"alpha": 1.0, "factor": 1.0, "type": "dynamic"}},
    "ministral3": {"rope_parameters": WHEN_REQUIRED["rope_parameters"]},
    "mistral4": {"rope_parameters": WHEN_REQUIRED["rope_parameters"]},
    "kimi_k3": {"rope_parameters": WHEN_REQUIRED["rope_parameters"]},
    "gemma4_text": {
        "layer_types": WHEN_REQUIRED["layer_types"],
        "global_head_dim": 16,
        "vocab_size_per_layer_input": VOCAB,
        "hidden_size_per_layer_input": 8,
        "num_kv_shared_layers": 0,
        "sliding_window_pattern": 2,
    },
    "lfm2": {"full_attn_idxs": [1, 3], "layer_types": None},
    "lfm2_moe": {"full_attn_idxs": [1, 3], "layer_types": None},
    "kimi_linear": {
        "linear_attn_config": {
            "kda_layers": [1, 3],
            "full_attn_layers": [2, 4],
            "head_dim": 16,
            "num_heads": 4,
            "short_conv_kernel_size": 4,
        },
    },
    "jamba": {
        "attn_layer_offset": 1,
        "attn_layer_period": 2,
        "expert_layer_offset": 1,
        "expert_layer_period": 2,
    },
}

UNBUILDABLE: dict[str, str] = {
    "bitnet": "its BitLinear layers run a Metal kernel; mlx-lm has no CPU path for them",
    "phi3small": "built and loaded, its forward corrupts the heap on MLX's CPU backend "
    "(3 of 4 runs alone ended in SIGSEGV or SIGABRT under MALLOC_CHECK_=3): an MLX / "
    "mlx-lm fault to report, not one to run in this suite",
    "olmo": "mlx-lm's module needs the ai2-olmo package (it exits without it)",
    "prism_hadamard_qwen35": "needs a Hadamard pack file next to the weights",
    "phixtral": "its sizes are fields named apart from every other config (n_embd under "
    "another schema): a 1.2-billion-parameter model at these settings",
    "nemotron-nas": "one block config per layer (attention and FFN variants, some "
    "no-ops) not written here yet",
    "llama4": "vision tower and text model under text_config/vision_config: the text "
    "model is llama4_text, which the matrix covers",
    "lfm2-vl": "vision tower config not written here; its text model lfm2 is covered",
    "minimax_m3_vl": "vision tower config not written here; its text model minimax is covered",
    "muse_spark": "seven coupled text fields (per-layer rope, layer types, soft caps) not "
    "written here yet",
    "longcat_flash": "zero-computation experts and MLA scales: seven coupled fields not "
    "written here yet",
    "longcat_flash_ngram": "as longcat_flash, with n-gram embeddings",
    "mimo_v2_flash": "ten coupled fields for its hybrid sliding/full pattern and sinks not "
    "written here yet",
    "openelm": "per-layer head counts and FFN multipliers (five coupled fields) not "
    "written here yet",
    "qwen": "Qwen 1's fields (kv_channels, a different MLP width rule) not written here "
    "yet: the generic sizes do not fit it",
    "plamo": "its key/value heads come from a field the generic sizes do not set",
    "spark2_5": "per-layer-type rope parameters not written here yet",
    "step3p5": "its router's top-k and grouped attention fields not written here yet",
    "mellum": "its layer type names are not the generic ones; not written here yet",
    "minicpm3": "its long-rope scaling factors (lists per head dimension) not written here yet",
    "kimi_k3": "its rope and MLA fields not written here yet",
    "gemma3n": "audio and vision towers, per-layer inputs and KV caches shared across "
    "layers: a dozen coupled config fields not written here yet",
}


def _output_ids() -> set[int]:
    """The byte tokens an answer is made of: printable ASCII characters that no merge
    uses, so an answer's text tokenizes back into the very tokens generated. A chat's
    next turn then extends the cached tokens exactly, as with a real model, and reuses
    them whatever the cache type (a sliding window past its size, a recurrent state:
    caches that cannot be cut back to a shorter prefix)."""
    merged = {ch for left, right in _MERGES for ch in left + right}
    return {
        b for b in range(ord("!"), ord("~") + 1) if chr(b) not in merged and chr(b) not in "<>|"
    }


_OUTPUT_IDS = _output_ids()


def model_types() -> list[str]:
    """Every model file mlx-lm ships (its ``mlx_lm/models/*.py`` but its helpers)."""
    import mlx_lm.models as models

    helpers = {
        "base",
        "cache",
        "activations",
        "pipeline",
        "rope_utils",
        "switch_layers",
        "gated_delta",
        "ssm",
        "mla",
        "bitlinear_layers",
    }
    names = [m.name for m in pkgutil.iter_modules(models.__path__)]
    return sorted(n for n in names if n not in helpers)


def arch_config(model_type: str) -> dict[str, Any]:
    """A small config for ``model_type``: its ModelArgs' size fields set small."""
    module = importlib.import_module(f"mlx_lm.models.{model_type}")
    declared = dataclasses.fields(module.ModelArgs)
    fields = {f.name for f in declared}
    required = {
        f.name
        for f in declared
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    config: dict[str, Any] = {"model_type": model_type}
    config.update({k: v for k, v in SMALL.items() if k in fields})
    config.update({k: v for k, v in WHEN_REQUIRED.items() if k in required})
    if "text_config" in fields:  # a wrapper (multimodal, or text under text_config)
        text_type = f"{model_type}_text"
        try:
            config["text_config"] = arch_config(text_type)
        except ModuleNotFoundError:
            config["text_config"] = {**SMALL, "model_type": model_type}
    config.update(OVERRIDES.get(model_type, {}))
    if "time_step_limit" in config:
        config["time_step_limit"] = list(config["time_step_limit"])
    return config


def build_model(config: dict[str, Any], seed: int = 0) -> Any:
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(config)
    mx.random.seed(seed)
    return model_class(args_class.from_dict(config))


def make_arch_model(path: Path, model_type: str, *, seed: int = 0, shards: int = 2) -> Path:
    """Write a tiny random-weight ``model_type`` folder at ``path`` and return ``path``."""
    if model_type in UNBUILDABLE:
        raise ValueError(f"{model_type}: {UNBUILDABLE[model_type]}")
    tokenizer = build_tokenizer()
    config = arch_config(model_type)
    config["eos_token_id"] = tokenizer.token_to_id(EOS_TOKEN)
    config["bos_token_id"] = tokenizer.token_to_id("<|endoftext|>")
    config["torch_dtype"] = "float32"
    model = build_model(config, seed)
    weights = dict(tree_flatten(model.parameters()))
    count = sum(v.size for v in weights.values())  # shapes only: nothing evaluated yet
    if count > MAX_PARAMS:
        big = sorted(weights, key=lambda k: -weights[k].size)[:3]
        raise ValueError(f"{model_type} is not tiny: {count:,} parameters (largest: {big})")
    allowed = mx.array([i in _OUTPUT_IDS for i in range(VOCAB)])[:, None]
    for name, value in weights.items():
        # The output head (or the tied embedding): only the ids greedy may give can win.
        head = name.endswith("lm_head.weight") or name.endswith("embed_tokens.weight")
        head = head or name.endswith(("output.weight", "wte.weight", "embeddings.weight"))
        if head and value.ndim == 2 and value.shape[0] == VOCAB:
            weights[name] = mx.where(allowed, value, mx.zeros_like(value))
    mx.eval(weights)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    layers = LAYERS
    _save_weights(path, weights, layers, shards)
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    _save_tokenizer(path, tokenizer)
    return path


def _text(config: dict[str, Any]) -> dict[str, Any]:
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else config
