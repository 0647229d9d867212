"""What the speed estimate says (``core/plan/estimate.py`` computes it): tokens/s at batch 1
with its band, the aggregate at the planned batch, each node's part, and the basis in
words, for the CLI, ``--json``, the Model pane and Compare. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.plan.costs import (
    EFFICIENCY,
    KV_GROUP_EXPONENT,
    LABEL,
    LAYER_OVERHEAD_S,
    MOE_LAYER_OVERHEAD_S,
    PIPELINE_HOP_S,
    LinkProfile,
)
from core.units import rate
from core.worker.vocab import Strategy

__all__ = ["Estimate", "NodeLoad", "band_text"]


@dataclass(frozen=True)
class NodeLoad:
    """One node's part of a token: the bytes it reads and the time that takes."""

    node: str
    chip: str
    bandwidth_gbs: float
    layers: int
    bytes_per_token: int
    seconds: float


def band_text(value: float, band: tuple[float, float]) -> str:
    """ "31.0 tokens/s (likely 25.4–38.0)", with the precision every tokens/s figure of
    the app is shown with (``core.units.rate``)."""
    return f"{rate(value)} tokens/s (likely {rate(band[0])}–{rate(band[1])})"


@dataclass(frozen=True)
class Estimate:
    """The estimate for a plan: tokens/s (None when a chip is unknown, with the reason)."""

    strategy: Strategy
    tokens_per_s: float | None
    compute_s: float
    link_s: float
    nodes: tuple[NodeLoad, ...]
    link: LinkProfile | None
    context_tokens: int
    reason: str = ""
    # A multi-Mac plan's answer to "would one Mac be as fast?": the fastest Mac of the
    # plan alone (its name, its chip, its estimate) when the model fits it; None otherwise.
    alone: tuple[str, str, float] | None = None
    # The share either side of tokens_per_s the published figures fall in (costs.BAND_*).
    band_share: float = 0.0
    # The aggregate tokens/s of ``batch`` sequences decoded at once (its step's time).
    batch: int = 1
    aggregate_tokens_per_s: float | None = None
    # Routed experts: "8 of 128 experts a token" for a mixture of experts, or why the
    # model is counted dense; "" for a dense model.
    experts: str = ""
    fixed_s: float = 0.0  # the part of compute_s that is per-layer fixed cost

    @property
    def seconds_per_token(self) -> float:
        return self.compute_s + self.link_s

    @property
    def band(self) -> tuple[float, float] | None:
        """The likely range of a measurement: a figure ``e`` off the estimate means the
        estimate is ``rate / (1 + e)``, so the band is rate/(1+share) to rate/(1-share)."""
        if self.tokens_per_s is None:
            return None
        return (
            self.tokens_per_s / (1 + self.band_share),
            self.tokens_per_s / (1 - self.band_share),
        )

    def rate_text(self) -> str:
        """ "31.0 tokens/s (likely 25.4–38.0)", or "no estimate: why"."""
        band = self.band
        if self.tokens_per_s is None or band is None:
            return f"no {LABEL}: {self.reason}"
        return band_text(self.tokens_per_s, band)

    def aggregate_text(self) -> str:
        """ "8 at once: 61.0 tokens/s in all" at a batch above 1, else ""."""
        if self.tokens_per_s is None or self.batch < 2 or self.aggregate_tokens_per_s is None:
            return ""
        return f"{self.batch} at once: {rate(self.aggregate_tokens_per_s)} tokens/s in all"

    def figures_text(self) -> str:
        """ "31.0 tokens/s (likely 25.4–38.0); 8 at once: 61.0 tokens/s in all", or "no
        estimate: why": what the Model pane shows under each strategy and ``plan`` lists
        per strategy."""
        aggregate = self.aggregate_text()
        return f"{self.rate_text()}; {aggregate}" if aggregate else self.rate_text()

    def summary(self) -> str:
        """One line: "Estimate for real Macs: 14.2 tokens/s (likely 12.1–16.6) (2 × M3
        Ultra, tensor over RDMA over Thunderbolt 5); 8 at once: 61.0 tokens/s in all" or
        "No estimate: chip unknown for mini"."""
        if self.tokens_per_s is None:
            return f"No {LABEL}: {self.reason}"
        chips = _chip_counts(self.nodes)
        how = self.strategy.value
        if self.link is not None:
            how += f" over {self.link.name}"
        line = f"Estimate for real Macs: {self.rate_text()} ({chips}, {how})"
        if self.aggregate_text():
            line += f"; {self.aggregate_text()}"
        if self.alone is not None:
            node, chip, alone = self.alone
            line += f"; {node} ({chip}) alone: {rate(alone)} tokens/s"
        return line

    def basis(self) -> str:
        """Where the number comes from, in a few lines: for a tooltip and the CLI."""
        if self.tokens_per_s is None:
            return (
                f"No {LABEL}: {self.reason}. The estimate needs each Mac's chip "
                "(its memory bandwidth) and a plan that fits."
            )
        lines = [
            "An estimate, not a measurement (model and sources: docs/estimate.md).",
            f"Each token reads its active weights and the KV cache ({self.context_tokens} "
            f"tokens, counted (query heads per KV head)^{KV_GROUP_EXPONENT:g} times) at "
            f"{EFFICIENCY:.0%} of the chip's published memory bandwidth, plus "
            f"{LAYER_OVERHEAD_S * 1e6:.0f} µs per layer "
            f"({MOE_LAYER_OVERHEAD_S * 1e6:.0f} µs more per mixture-of-experts layer):",
        ]
        if self.experts:
            lines.append(f"  {self.experts}.")
        lines += [
            f"  {n.node} ({n.chip}, {n.bandwidth_gbs:g} GB/s): {n.layers} layers, "
            f"{n.bytes_per_token / 1e9:.2f} GB a token, {n.seconds * 1e3:.1f} ms"
            for n in self.nodes
        ]
        if self.link is not None:
            hops = (
                f" (with {PIPELINE_HOP_S * 1e3:.1f} ms a hand-off between Macs)"
                if self.strategy is Strategy.PIPELINE
                else ""
            )
            lines.append(
                f"Links ({self.link.name}: {self.link.source}): {self.link_s * 1e3:.2f} ms "
                f"a token{hops}."
            )
        lines.append(
            f"{self.seconds_per_token * 1e3:.1f} ms a token = {self.rate_text()}; the band is "
            f"±{self.band_share:.0%}, the worst error on the published figures of its kind."
        )
        if self.aggregate_text():
            lines.append(
                f"{self.batch} requests at once: {rate(self.aggregate_tokens_per_s)} tokens/s in "
                "all (each step reads the experts the batch routes to, every sequence's KV "
                "cache, and pays the fixed costs once; the GPU's arithmetic is assumed not "
                "to bound it first)."
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        """JSON-able, labelled as an estimate with its basis."""
        known = self.tokens_per_s is not None
        band = self.band
        return {
            "label": LABEL,
            "tokens_per_s": round(self.tokens_per_s, 2) if self.tokens_per_s is not None else None,
            "tokens_per_s_band": None if band is None else [round(band[0], 2), round(band[1], 2)],
            "band_share": self.band_share,
            "batch": self.batch,
            "aggregate_tokens_per_s": None
            if self.aggregate_tokens_per_s is None
            else round(self.aggregate_tokens_per_s, 2),
            "seconds_per_token": round(self.seconds_per_token, 6) if known else None,
            "compute_s": round(self.compute_s, 6),
            "fixed_s": round(self.fixed_s, 6),
            "link_s": round(self.link_s, 6),
            "strategy": self.strategy.value,
            "context_tokens": self.context_tokens,
            "experts": self.experts,
            "link": None
            if self.link is None
            else {
                "name": self.link.name,
                "latency_us": round(self.link.latency_s * 1e6, 1),
                "per_peer_us": round(self.link.per_peer_s * 1e6, 1),
                "gb_per_s": round(self.link.bytes_per_s / 1e9, 3),
            },
            "nodes": [
                {
                    "node": n.node,
                    "chip": n.chip,
                    "bandwidth_gbs": n.bandwidth_gbs,
                    "layers": n.layers,
                    "bytes_per_token": n.bytes_per_token,
                    "seconds": round(n.seconds, 6),
                }
                for n in self.nodes
            ],
            "efficiency": EFFICIENCY,
            "kv_group_exponent": KV_GROUP_EXPONENT,
            "layer_overhead_us": LAYER_OVERHEAD_S * 1e6,
            "moe_layer_overhead_us": MOE_LAYER_OVERHEAD_S * 1e6,
            "pipeline_hop_ms": PIPELINE_HOP_S * 1e3,
            "reason": self.reason,
            "alone": None
            if self.alone is None
            else {
                "node": self.alone[0],
                "chip": self.alone[1],
                "tokens_per_s": round(self.alone[2], 2),
            },
            "basis": self.basis(),
            "time_to_first_token": None,
            "time_to_first_token_reason": "not estimated: prefill is bound by GPU arithmetic, "
            "which Apple does not publish",
        }


def _chip_counts(loads: Sequence[NodeLoad]) -> str:
    counts: dict[str, int] = {}
    for load in loads:
        counts[load.chip] = counts.get(load.chip, 0) + 1
    return " + ".join(f"{c} × {chip}" if c > 1 else chip for chip, c in counts.items())
