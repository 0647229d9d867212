"""Planned vs peak memory per rank (issue 26, target peak <= 1.1 x planned): pipeline over
2 ranks, tensor over 2 (the demo model: 3, its heads divide by 3) and one rank, on a random
float16 llama of about 1.8 GB (16 layers, hidden 2048) and on the 4-bit demo model, each a
real demo job on this machine. A rank's peak is its own measure (``core.worker.residency``:
anonymous resident on Linux) above what it held before reading a weight.

``bench_peak_memory(model)`` returns JSON-able figures; run this file to print them.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from core.model.demo_model import ensure_demo_model
from tests.helpers.peaks import TOLERANCE, demo_summary, make_float16_llama, rank_rows

RUNS = {"pipeline": ("pipeline", 2), "tensor": ("tensor", 2), "one rank": ("single", 1)}
DEMO_RUNS = {**RUNS, "tensor": ("tensor", 3)}


def _table(model: Path, runs: dict[str, tuple[str, int]], cache: Path) -> dict[str, Any]:
    table = {}
    for label, (strategy, nodes) in runs.items():
        started = time.monotonic()
        rows = rank_rows(demo_summary(model, strategy, nodes, cache, max_tokens=4))
        worst = max(row["peak_over_plan"] or 0.0 for row in rows)
        table[label] = {
            "ranks": rows,
            "worst_peak_over_plan": worst,
            "within_target": worst <= TOLERANCE,
            "seconds": round(time.monotonic() - started, 1),
        }
    return table


def bench_peak_memory(demo: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="macmesh-peak-") as folder:
        llama = make_float16_llama(Path(folder) / "llama-f16")
        size = sum(f.stat().st_size for f in llama.glob("*.safetensors"))
        return {
            "target_peak_over_plan": TOLERANCE,
            "float16_llama": {
                "size_mb": round(size / (1 << 20)),
                **_table(llama, RUNS, Path(folder) / "cache"),
            },
            "demo_model_4bit": _table(demo, DEMO_RUNS, demo.parents[1]),
        }


if __name__ == "__main__":
    print(json.dumps(bench_peak_memory(ensure_demo_model()), indent=2))
