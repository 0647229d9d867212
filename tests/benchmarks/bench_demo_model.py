"""How long ``ensure_demo_model`` takes once the demo model is converted: every
``macmesh demo`` and the window's "Use the demo model" pay it (budget 0.5 s; the
functional suite checks only that it converts and rewrites nothing).

``bench_demo_model(model)`` returns JSON-able figures; run this file to print them.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from core.model.demo_model import ensure_demo_model

ENSURE_AGAIN_BUDGET_S = 0.5


def bench_demo_model(model: Path, runs: int = 11) -> dict:
    """Median and worst of ``runs`` calls on the converted folder ``model``."""
    cache = model.parents[1]
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        again = ensure_demo_model(cache)
        times.append(time.perf_counter() - started)
        assert again == model, f"ensure_demo_model answered {again}, not {model}"
    median = statistics.median(times)
    return {
        "ensure_again": {
            "median_s": round(median, 4),
            "max_s": round(max(times), 4),
            "runs": runs,
            "budget_s": ENSURE_AGAIN_BUDGET_S,
            "within_budget": median < ENSURE_AGAIN_BUDGET_S,
        }
    }


if __name__ == "__main__":
    print(json.dumps(bench_demo_model(ensure_demo_model()), indent=2))
