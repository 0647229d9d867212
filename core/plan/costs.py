"""The constants of the speed estimate (``core/plan/estimate.py``): the share of a chip's
bandwidth a decode step reaches, the fixed costs MLX pays per layer and per pipeline hop,
the links' costs, and the band an estimate is given with. Each was fitted to published
figures (``core/plan/calibration.py``, ``python -m tests.tools.fit_estimate``) or comes
from a published measurement; ``docs/estimate.md`` lists them with their sources.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BAND_DENSE",
    "BAND_MOE",
    "EFFICIENCY",
    "KV_GROUP_EXPONENT",
    "LABEL",
    "LAYER_OVERHEAD_S",
    "MOE_LAYER_OVERHEAD_S",
    "PIPELINE_HOP_S",
    "RDMA",
    "TCP_RING",
    "LinkProfile",
]

LABEL = "estimate"
# Share of the published bandwidth a decode step reaches. Attention reads each KV head
# once per query head sharing it, partly from the GPU's cache: the cache counts
# (query heads per KV head) ** KV_GROUP_EXPONENT times (fitted on MiniMax at 30K and 146K tokens).
EFFICIENCY = 0.835
KV_GROUP_EXPONENT = 0.45
# The fixed cost of a layer per decode step: about 17 kernels a dense layer launches
# (norms, projections, rotary, attention, cache update, the MLP, the adds) at ~2.4 µs
# each. A mixture-of-experts layer launches more (router, top-k, softmax, gathers, the
# weighted sum) and its gathered products run below the bandwidth of a plain one: fitted.
LAYER_OVERHEAD_S = 40e-6
MOE_LAYER_OVERHEAD_S = 150e-6
# A pipeline's hand-off from one Mac to the next: the stage's GPU work finished, its
# activation sent and the next stage's work started, beyond the link's own latency.
PIPELINE_HOP_S = 1.2e-3
# The estimate's band: the share either side of it the published figures fall in (the
# worst error of the calibration's dense figures, and of its mixture-of-experts figures,
# fitted and held back alike), so "31 tokens/s (likely 25-38)" says what it knows.
BAND_DENSE = 0.12
BAND_MOE = 0.24


@dataclass(frozen=True)
class LinkProfile:
    """How a link costs an exchange: a fixed latency plus bytes at its rate. ``mesh``: an
    all-reduce is one round to every peer (JACCL's mesh), each peer adding ``per_peer_s``;
    otherwise a ring's 2(N-1) steps of ``latency_s`` each."""

    name: str
    latency_s: float
    bytes_per_s: float
    mesh: bool
    source: str
    per_peer_s: float = 0.0

    def all_reduce_s(self, nodes: int, vector_bytes: float) -> float:
        """One all-reduce of ``vector_bytes`` over ``nodes``."""
        moved = vector_bytes * 2 * (nodes - 1) / nodes
        if self.mesh:
            return self.latency_s + (nodes - 1) * self.per_peer_s + moved / self.bytes_per_s
        return 2 * (nodes - 1) * self.latency_s + moved / self.bytes_per_s


# An all-reduce of an activation vector through MLX's JACCL over Thunderbolt 5 RDMA, GPU
# synchronisation included: fitted to exo's Llama 4 runs on 1, 2 and 4 M3 Ultras (15 µs,
# + 8 µs per peer), within the "< 50 µs" of Jeff Geerling's RDMA write-up; the rate is
# PyTorch's TCCL over Thunderbolt 5 RDMA (1 MiB in 0.15 ms, 16 MiB in 1.85 ms: 9.25 GB/s).
RDMA = LinkProfile(
    "RDMA over Thunderbolt 5",
    15e-6,
    9.25e9,
    mesh=True,
    source="15 µs + 8 µs per peer a round, fitted to Llama 4 over RDMA on 2 and 4 M3 "
    "Ultras; 9.25 GB/s from all-reduce timings over Thunderbolt 5 RDMA",
    per_peer_s=8e-6,
)
# Thunderbolt networking over TCP before RDMA: ~300 µs a message (Jeff Geerling's RDMA
# write-up); the rate is 10 Gb/s Ethernet's, which activation vectors of a few KB never
# fill, so a Thunderbolt 4 and a Thunderbolt 5 cable cost the same here.
TCP_RING = LinkProfile(
    "MLX ring over TCP",
    300e-6,
    10e9 / 8,
    mesh=False,
    source="300 µs a message over TCP (Thunderbolt networking without RDMA: a Thunderbolt "
    "4 cable, or 5 with RDMA off), 10 Gb/s; an activation vector of a few KB costs the "
    "latency, not the cable's rate, so Thunderbolt 4 and 5 give the same figure",
)
