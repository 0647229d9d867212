"""The published figures the estimate was fitted to, each with its source.

Every figure is a decode rate someone measured with MLX on a named Mac and a named model;
the model's bytes come from its published shape (parameters, layers, vocabulary) and its
storage format (MLX's affine quantization keeps a 16-bit scale and bias per group of 64
weights: 4-bit is 4.5 bits a weight, 6-bit 6.5, 8-bit 8.5). ``docs/estimate.md`` shows the
same table, and tests/unit/test_estimate.py checks that each estimate is within
``TOLERANCE`` of its figure and that the doc's numbers are the code's.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.plan.chips import CHIPS
from core.plan.estimate import (
    RDMA,
    TCP_RING,
    Estimate,
    LinkProfile,
    Stage,
    Workload,
    estimate_decode,
)
from core.worker.vocab import Strategy

__all__ = [
    "CALIBRATION",
    "TOLERANCE",
    "WORKED_EXAMPLES",
    "CalibrationPoint",
    "WorkedExample",
    "calibration_table",
    "dense_workload",
    "worked_examples_table",
]

TOLERANCE = 0.35


def dense_workload(
    *,
    params: float,
    embedding_params: float,
    layers: int,
    hidden: int,
    kv_heads: int,
    head_dim: int,
    bits_per_weight: float,
    tied: bool,
) -> Workload:
    """A dense transformer's workload from its published shape: the layers share the
    parameters that are neither embeddings nor (untied) head, evenly; KV cache in 16 bits."""
    heads_params = embedding_params if tied else 2 * embedding_params
    per_layer = (params - heads_params) * bits_per_weight / 8 / layers
    return Workload(
        layer_bytes=(int(per_layer),) * layers,
        head_bytes=int(embedding_params * bits_per_weight / 8),
        kv_bytes_per_token_layer=2 * kv_heads * head_dim * 2,
        exchange_bytes=hidden * 2,
    )


@dataclass(frozen=True)
class CalibrationPoint:
    """One published figure: what ran, on what, how fast, and where it was published."""

    model: str
    chip: str
    context_tokens: int  # tokens in the cache while decoding (prompt + half the answer)
    measured_tokens_per_s: float
    source: str
    work: Workload

    def estimate(self) -> Estimate:
        layers = len(self.work.layer_bytes)
        stage = Stage("mac", CHIPS[self.chip], 0, layers, reads_head=True)
        return estimate_decode(self.work, Strategy.SINGLE, [stage], None, self.context_tokens)

    @property
    def error(self) -> float:
        """(estimate - figure) / figure."""
        estimated = self.estimate().tokens_per_s
        assert estimated is not None
        return estimated / self.measured_tokens_per_s - 1


def _llama_70b(bits_per_weight: float) -> Workload:
    """Llama 3 / 3.3 70B: 70.55 B parameters, 80 layers, vocabulary 128,256, untied."""
    return dense_workload(
        params=70.55e9,
        embedding_params=128256 * 8192,
        layers=80,
        hidden=8192,
        kv_heads=8,
        head_dim=128,
        bits_per_weight=bits_per_weight,
        tied=False,
    )


CALIBRATION: tuple[CalibrationPoint, ...] = (
    CalibrationPoint(
        "Llama 3 70B Instruct, bf16",
        "M2 Ultra",
        16 + 50,
        4.7,
        "https://github.com/ml-explore/mlx-examples/pull/1069 (mlx_lm.generate, wired, "
        "16-token prompt, 100 tokens)",
        _llama_70b(16),
    ),
    CalibrationPoint(
        "Llama 3.3 70B Instruct, MLX 4-bit",
        "M3 Max",
        260 + 155,
        9.351,
        "https://github.com/ml-explore/mlx-examples/issues/1029 (M3 Max 64 GB, MLX 0.21.1, "
        "260-token prompt, 309 tokens)",
        _llama_70b(4.5),
    ),
    CalibrationPoint(
        "Qwen2.5 72B Instruct, MLX 6-bit",
        "M4 Max",
        34 + 321,
        7.919,
        "https://github.com/ml-explore/mlx-examples/issues/1281 (mlx_lm.generate, 34-token "
        "prompt, 642 tokens, peak memory 59.3 GB)",
        dense_workload(
            params=72.71e9,
            embedding_params=152064 * 8192,
            layers=80,
            hidden=8192,
            kv_heads=8,
            head_dim=128,
            bits_per_weight=6.5,
            tied=False,
        ),
    ),
    CalibrationPoint(
        "Llama 3.1 8B Instruct, MLX 4-bit",
        "M3 Ultra",
        140,
        119.39,
        "https://github.com/raullenchai/Rapid-MLX/pull/586 (M3 Ultra 256 GB, mlx 0.31.2, "
        "short-prompt median decode)",
        dense_workload(
            params=8.03e9,
            embedding_params=128256 * 4096,
            layers=32,
            hidden=4096,
            kv_heads=8,
            head_dim=128,
            bits_per_weight=4.5,
            tied=False,
        ),
    ),
    CalibrationPoint(
        "Qwen3 0.6B, MLX 8-bit",
        "M4 Pro",
        11 + 128,
        284.2,
        "https://github.com/waybarrios/vllm-mlx/issues/531 (M4 Pro 48 GB, 56 prompt tokens "
        "over 5 runs, 1280 generated)",
        dense_workload(
            params=0.596e9,
            embedding_params=151936 * 1024,
            layers=28,
            hidden=1024,
            kv_heads=8,
            head_dim=128,
            bits_per_weight=8.5,
            tied=True,
        ),
    ),
)


@dataclass(frozen=True)
class WorkedExample:
    """The doc's worked example: the 4-bit Llama 3.3 70B above on other Macs."""

    label: str
    strategy: Strategy
    chips: tuple[str, ...]
    link: LinkProfile | None
    context_tokens: int = 4096

    def estimate(self) -> Estimate:
        work = CALIBRATION[1].work
        layers = len(work.layer_bytes)
        n = len(self.chips)
        if self.strategy is Strategy.PIPELINE:
            bounds = [layers * i // n for i in range(n + 1)]
            stages = [
                Stage(f"mac{i}", CHIPS[chip], bounds[i], bounds[i + 1], reads_head=i == n - 1)
                for i, chip in enumerate(self.chips)
            ]
        else:
            stages = [
                Stage(f"mac{i}", CHIPS[chip], 0, layers, reads_head=True)
                for i, chip in enumerate(self.chips)
            ]
        return estimate_decode(work, self.strategy, stages, self.link, self.context_tokens)


WORKED_EXAMPLES: tuple[WorkedExample, ...] = (
    WorkedExample("1 × M3 Ultra", Strategy.SINGLE, ("M3 Ultra",), None),
    WorkedExample("2 × M3 Ultra, tensor, RDMA", Strategy.TENSOR, ("M3 Ultra",) * 2, RDMA),
    WorkedExample("2 × M3 Ultra, tensor, TCP", Strategy.TENSOR, ("M3 Ultra",) * 2, TCP_RING),
    WorkedExample("2 × M3 Ultra, pipeline, TCP", Strategy.PIPELINE, ("M3 Ultra",) * 2, TCP_RING),
    WorkedExample("4 × M4 Pro, tensor, RDMA", Strategy.TENSOR, ("M4 Pro",) * 4, RDMA),
    WorkedExample("4 × M4 Pro, pipeline, TCP", Strategy.PIPELINE, ("M4 Pro",) * 4, TCP_RING),
)


def calibration_table() -> str:
    """The calibration table as docs/estimate.md shows it (a test keeps them the same)."""
    rows = [
        "| model | Mac | context | published | estimate | error | source |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for point in CALIBRATION:
        estimated = point.estimate().tokens_per_s
        rows.append(
            f"| {point.model} | {point.chip} | {point.context_tokens} | "
            f"{point.measured_tokens_per_s:g} | {estimated:.2f} | {point.error:+.1%} | "
            f"{point.source} |"
        )
    return "\n".join(rows)


def worked_examples_table() -> str:
    """The worked example's rows as docs/estimate.md shows them."""
    rows = [
        "| Macs | bytes a token per node | compute | links | tokens/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for example in WORKED_EXAMPLES:
        estimate = example.estimate()
        most = max(node.bytes_per_token for node in estimate.nodes)
        rows.append(
            f"| {example.label} | {most / 1e9:.2f} GB | {estimate.compute_s * 1e3:.2f} ms | "
            f"{estimate.link_s * 1e3:.2f} ms | {estimate.tokens_per_s:.2f} |"
        )
    return "\n".join(rows)
