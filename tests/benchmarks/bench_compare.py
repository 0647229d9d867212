"""What Compare adds to its two runs (issue 15): ``compare()`` on 2 demo Macs, its wall
time against the two runs' own (each from its launch to every rank stopped); the rest
is probing, planning and choosing the one Mac. Target: at most 2 s more."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from core.model.info import read_model_info
from core.run import demo
from core.run.session import simulated_hosts
from core.run.tasks.compare import compare

ROUNDS = 2


def bench_compare(model: Path) -> dict:
    info = read_model_info(model)
    hosts = simulated_hosts(demo.demo_facts(2))
    overheads, totals, ratios = [], [], []
    for _ in range(ROUNDS):
        started = time.monotonic()
        result = compare(info, hosts, "pipeline", "What is the capital of France?", 16)
        total = time.monotonic() - started
        runs = (result.single.run_s if result.single else 0.0) + result.cluster.run_s
        totals.append(total)
        overheads.append(total - runs)
        ratios.append(result.ratio or 0.0)
    return {
        "rounds": ROUNDS,
        "wall_s_median": round(statistics.median(totals), 2),
        "added_s_median": round(statistics.median(overheads), 3),
        "added_s_max": round(max(overheads), 3),
        "ratio_median": round(statistics.median(ratios), 3),
        "target_added_s": 2.0,
    }
