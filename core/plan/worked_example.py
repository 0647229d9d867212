"""The doc's worked example (docs/estimate.md): the 4-bit Llama 3.3 70B of the calibration
on other Macs, one table a test keeps the same as the code."""

from __future__ import annotations

from dataclasses import dataclass

from core.plan.calibration import CALIBRATION, estimate_on_chips
from core.plan.estimate import RDMA, TCP_RING, Estimate, LinkProfile
from core.worker.vocab import Strategy

__all__ = ["WORKED_EXAMPLES", "WorkedExample", "worked_examples_table"]


@dataclass(frozen=True)
class WorkedExample:
    """The doc's worked example: the 4-bit Llama 3.3 70B above on other Macs."""

    label: str
    strategy: Strategy
    chips: tuple[str, ...]
    link: LinkProfile | None
    context_tokens: int = 4096

    def estimate(self) -> Estimate:
        return estimate_on_chips(
            CALIBRATION[1].work, self.strategy, self.chips, self.link, self.context_tokens
        )


WORKED_EXAMPLES: tuple[WorkedExample, ...] = (
    WorkedExample("1 × M3 Ultra", Strategy.SINGLE, ("M3 Ultra",), None),
    WorkedExample("2 × M3 Ultra, tensor, RDMA", Strategy.TENSOR, ("M3 Ultra",) * 2, RDMA),
    WorkedExample("2 × M3 Ultra, tensor, TCP", Strategy.TENSOR, ("M3 Ultra",) * 2, TCP_RING),
    WorkedExample("2 × M3 Ultra, pipeline, TCP", Strategy.PIPELINE, ("M3 Ultra",) * 2, TCP_RING),
    WorkedExample("4 × M4 Pro, tensor, RDMA", Strategy.TENSOR, ("M4 Pro",) * 4, RDMA),
    WorkedExample("4 × M4 Pro, pipeline, TCP", Strategy.PIPELINE, ("M4 Pro",) * 4, TCP_RING),
)


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
