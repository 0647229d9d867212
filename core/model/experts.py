"""Which of a model's weights a token reads: the routed experts of a mixture of experts.

A mixture-of-experts layer keeps ``num_experts`` expert MLPs and a router that sends each
token to ``num_experts_per_tok`` of them; a token reads the layer's other weights (the
attention, shared experts, the router, a dense MLP) whole and only its ``k`` routed experts.
mlx-lm stores a layer's routed experts stacked, one tensor per projection with the experts
along its first axis, under ``switch_mlp`` or ``experts`` (``mlp.switch_mlp.gate_proj``,
``feed_forward.experts.down_proj``); a checkpoint not yet converted keeps one tensor per
expert (``experts.17.up_proj``). Either way, a tensor whose path has a ``switch_mlp`` or
``experts`` component is a routed expert; ``shared_experts`` is not.

The count of experts and ``k`` come from config.json, for the families mlx-lm ships. A
model whose family is not known here is counted as dense (every expert read), and
``Experts.note`` says so: an estimate that counts too much, said, rather than a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.model.validate import MAX_LAYERS, ConfigView

__all__ = ["MOE_FAMILIES", "Experts", "is_routed_expert", "read_experts"]

# mlx-lm's mixture-of-experts architectures (model_type), each with the config key of its
# expert count; k is ``num_experts_per_tok`` (or ``top_k``) unless ``_K_KEYS`` says otherwise.
# Every one of them stores its routed experts under ``switch_mlp`` or ``experts``.
MOE_FAMILIES: dict[str, str] = {
    "qwen2_moe": "num_experts",
    "qwen3_moe": "num_experts",
    "qwen3_next": "num_experts",
    "qwen3_5": "num_experts",
    "qwen3_5_moe": "num_experts",
    "qwen3_vl_moe": "num_experts",
    "deepseek": "n_routed_experts",
    "deepseek_v2": "n_routed_experts",
    "deepseek_v3": "n_routed_experts",
    "deepseek_v32": "n_routed_experts",
    "deepseek_v41": "n_routed_experts",
    "kimi_k2": "n_routed_experts",
    "kimi_k25": "n_routed_experts",
    "kimi_linear": "num_experts",
    "kimi_k3": "num_experts",
    "glm4_moe": "n_routed_experts",
    "glm4_moe_lite": "n_routed_experts",
    "glm_moe_dsa": "n_routed_experts",
    "solar_open": "n_routed_experts",
    "dots1": "n_routed_experts",
    "mimo_v2_flash": "n_routed_experts",
    "mistral4": "n_routed_experts",
    "nemotron_h": "n_routed_experts",
    "longcat_flash": "n_routed_experts",
    "gpt_oss": "num_local_experts",
    "llama4": "num_local_experts",
    "llama4_text": "num_local_experts",
    "mixtral": "num_local_experts",
    "minimax": "num_local_experts",
    "minimax_m3_vl": "num_local_experts",
    "phimoe": "num_local_experts",
    "phixtral": "num_local_experts",
    "granitemoe": "num_local_experts",
    "granitemoehybrid": "num_local_experts",
    "muse_spark": "num_local_experts",
    "olmoe": "num_experts",
    "bailing_moe": "num_experts",
    "bailing_moe_linear": "num_experts",
    "bailing_hybrid": "num_experts",
    "bailing_moe_v3": "num_experts",
    "Klear": "num_experts",
    "afmoe": "num_experts",
    "exaone_moe": "num_experts",
    "jamba": "num_experts",
    "laguna": "num_experts",
    "lfm2_moe": "num_experts",
    "mellum": "num_experts",
    "hunyuan": "num_experts",
    "gemma4_text": "num_experts",
    "ernie4_5_moe": "moe_num_experts",
    "step3p5": "moe_num_experts",
}
_K_KEYS: dict[str, tuple[str, ...]] = {
    "kimi_linear": ("num_experts_per_token",),
    "kimi_k3": ("num_experts_per_token",),
    "hunyuan": ("moe_topk",),
    "longcat_flash": ("moe_topk",),
    "gemma4_text": ("top_k_experts",),
    "ernie4_5_moe": ("moe_k",),
    "step3p5": ("moe_top_k",),
}
_ROUTED = frozenset({"switch_mlp", "experts"})


@dataclass(frozen=True)
class Experts:
    """A model's routed experts: how many, how many a token reads, and their bytes per
    layer (all experts of the layer; 0 in a dense layer). ``per_token == total`` and an
    empty ``layer_bytes`` for a dense model; ``note`` says when a MoE is counted dense."""

    total: int = 0
    per_token: int = 0
    layer_bytes: tuple[int, ...] = ()
    note: str = ""

    @property
    def moe(self) -> bool:
        return bool(self.total) and any(self.layer_bytes)

    def read_share(self, batch: int = 1) -> float:
        """The share of a layer's routed experts a step of ``batch`` tokens reads, with
        uniform routing: N·(1 - (1 - k/N)^B) of N experts (an upper bound: real routing
        is skewed, so tokens share experts more often)."""
        if not self.moe:
            return 1.0
        return 1 - (1 - self.per_token / self.total) ** max(1, batch)


def is_routed_expert(name: str) -> bool:
    """``model.layers.3.mlp.switch_mlp.up_proj.weight`` yes; ``...shared_experts...`` no."""
    return not _ROUTED.isdisjoint(name.split("."))


def read_experts(config: ConfigView, expert_bytes: list[int]) -> Experts:
    """The model's routed experts from its config and the bytes the headers gave each
    layer's routed-expert tensors (``is_routed_expert``)."""
    if not any(expert_bytes):
        return Experts()
    model_type = str(config.top["model_type"])
    key = MOE_FAMILIES.get(model_type)
    if key is None:
        return Experts(
            note=f"{model_type} stores experts but MacMesh does not know how it routes "
            "them, so every expert is counted as read (the estimate is low)"
        )
    total = config.count(key, limit=MAX_LAYERS * 16, default=0, minimum=0)
    k_keys = _K_KEYS.get(model_type, ("num_experts_per_tok", "top_k"))
    k = config.count(*k_keys, limit=MAX_LAYERS * 16, default=0, minimum=0)
    if not total or not k or k > total:
        return Experts(
            note=f"config.json gives no usable {key} / {k_keys[0]} for this "
            f"{model_type} model, so every expert is counted as read (the estimate is low)"
        )
    return Experts(total, k, tuple(expert_bytes))
