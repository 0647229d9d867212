"""Fit the speed estimate's constants (``core/plan/costs.py``) to the calibration figures
the estimate is fitted to (``core/plan/calibration.py``, ``fitted=True``), and print them
with the error on every figure, held-back ones included.

    .venv/bin/python -m tests.tools.fit_estimate

Deterministic: a coordinate search over fixed grids, from the constants in costs.py,
minimising the worst error over each figure's tolerance (dense ±12 %, MoE ±25 %) until no
step improves it. The figures held back never enter the objective.
"""

from __future__ import annotations

import json
import sys

import core.plan.estimate as estimate
from core.plan import calibration, costs

GRIDS: dict[str, list[float]] = {
    "EFFICIENCY": [x / 1000 for x in range(700, 960, 5)],
    "KV_GROUP_EXPONENT": [x / 20 for x in range(0, 21)],
    "LAYER_OVERHEAD_S": [x * 1e-6 for x in range(20, 81, 2)],
    "MOE_LAYER_OVERHEAD_S": [x * 1e-6 for x in range(80, 260, 5)],
    "PIPELINE_HOP_S": [x * 1e-5 for x in range(40, 250, 5)],
    "RDMA.latency_s": [x * 1e-6 for x in range(0, 41)],
    "RDMA.per_peer_s": [x * 1e-6 for x in range(0, 21)],
}


def _set(name: str, value: float) -> None:
    if name.startswith("RDMA."):
        object.__setattr__(costs.RDMA, name[5:], value)
    else:
        setattr(estimate, name, value)


def _get(name: str) -> float:
    if name.startswith("RDMA."):
        return float(getattr(costs.RDMA, name[5:]))
    return float(getattr(estimate, name))


def worst(points: tuple[calibration.CalibrationPoint, ...]) -> float:
    return max(abs(p.error) / p.tolerance for p in points)


def fit() -> dict[str, float]:
    fitted = tuple(p for p in calibration.ALL_CALIBRATION if p.fitted)
    best = worst(fitted)
    improved = True
    while improved:
        improved = False
        for name, grid in GRIDS.items():
            keep = _get(name)
            for value in grid:
                _set(name, value)
                score = worst(fitted)
                if score < best - 1e-9:
                    best, keep, improved = score, value, True
            _set(name, keep)
    return {name: _get(name) for name in GRIDS} | {"worst_over_tolerance": best}


def main() -> int:
    constants = fit()
    rows = [
        {
            "model": p.model,
            "macs": p.macs_label,
            "published": p.measured_tokens_per_s,
            "error": round(p.error, 4),
            "fitted": p.fitted,
        }
        for p in calibration.ALL_CALIBRATION
    ]
    json.dump({"constants": constants, "figures": rows}, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
