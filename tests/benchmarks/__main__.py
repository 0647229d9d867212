"""`make bench`: every benchmark, one JSON document on stdout (progress on stderr).

MACMESH_BENCH_ONLY=planner,demo_model,discovery,probe,gui,launcher,remote,remote_timeouts,
copy,telemetry,memory,blas,history,linktest,compare,ring_path,library,serve,batching,adapter,
finetune,tune_fit,tune_plot,peak_memory,slowloris,estimate,serve_memory,shared_serve,
serve_many,kv_cache,structured,tools,join_cost picks some;
MACMESH_BENCH_MEMORY_S shortens the controller-memory run (default 600 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from core.model.demo_model import ensure_demo_model
from tests.benchmarks import bench_engine


def _memory(model) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks.bench_engine", "memory", str(model)],
        stdout=subprocess.PIPE,  # its stderr (progress, failures) goes straight through
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _planner(_model) -> dict:
    from tests.benchmarks.bench_planner import bench_planner

    return bench_planner()


def _demo_model(model) -> dict:
    from tests.benchmarks.bench_demo_model import bench_demo_model

    return bench_demo_model(model)


def _remote(model) -> dict:
    from tests.benchmarks.bench_remote import bench_remote

    return bench_remote(model)


def _remote_timeouts(_model) -> dict:
    from tests.benchmarks.bench_remote import bench_timeouts

    return bench_timeouts()


def _gui(_model) -> dict:
    from tests.benchmarks.bench_gui import bench_gui

    return bench_gui()


def _discovery(_model) -> dict:
    from tests.benchmarks.bench_discovery import bench_discovery

    return bench_discovery()


def _probe(_model) -> dict:
    from tests.benchmarks.bench_discovery import bench_probe

    return bench_probe()


def _blas(model) -> dict:
    from tests.benchmarks.bench_blas import bench_blas

    return bench_blas(model)


def _serve(model) -> dict:
    from tests.benchmarks.bench_serve import bench_serve

    return bench_serve(model)


def _batching(model) -> dict:
    from tests.benchmarks.bench_batching import bench_batching

    return bench_batching(model)


def _copy(_model) -> dict:
    from tests.benchmarks.bench_copy import bench_copy

    return bench_copy()


def _history(_model) -> dict:
    from tests.benchmarks.bench_history import bench_history

    return bench_history()


def _linktest(model) -> dict:
    from tests.benchmarks.bench_linktest import bench_linktest

    return bench_linktest(model)


def _compare(model) -> dict:
    from tests.benchmarks.bench_compare import bench_compare

    return bench_compare(model)


def _ring_path(model) -> dict:
    from tests.benchmarks.bench_ring_path import bench_ring_path

    return bench_ring_path(model)


def _library(_model) -> dict:
    from tests.benchmarks.bench_library import bench_library

    return bench_library()


def _adapter(model) -> dict:
    from tests.benchmarks.bench_adapter import bench_adapter

    return bench_adapter(model)


def _finetune(model) -> dict:
    from tests.benchmarks.bench_finetune import bench_finetune

    return bench_finetune(model)


def _tune_plot(_model) -> dict:
    from tests.benchmarks.bench_tune_plot import bench_tune_plot

    return bench_tune_plot()


def _peak_memory(model) -> dict:
    from tests.benchmarks.bench_peak_memory import bench_peak_memory

    return bench_peak_memory(model)


def _serve_memory(model) -> dict:
    from tests.benchmarks.bench_serve_memory import bench_serve_memory

    return bench_serve_memory(model)


def _slowloris(_model) -> dict:
    from tests.benchmarks.bench_slowloris import bench_slowloris

    return bench_slowloris()


def _estimate(_model) -> dict:
    """The estimate for real Macs against every published figure of its calibration, fitted
    and held back, with each one's error and tolerance (docs/estimate.md)."""
    from core.plan.calibration import ALL_CALIBRATION

    points = [
        {
            "model": point.model,
            "macs": point.macs_label,
            "context_tokens": point.context_tokens,
            "published_tokens_per_s": point.measured_tokens_per_s,
            "estimate_tokens_per_s": round(point.estimate().tokens_per_s or 0.0, 2),
            "error": round(point.error, 4),
            "fitted": point.fitted,
            "tolerance": point.tolerance,
            "source": point.source,
        }
        for point in ALL_CALIBRATION
    ]

    def worst(chosen: list[dict]) -> float:
        return max((abs(p["error"]) for p in chosen), default=0.0)

    dense = [p for p, c in zip(points, ALL_CALIBRATION, strict=True) if not c.moe]
    moe = [p for p, c in zip(points, ALL_CALIBRATION, strict=True) if c.moe]
    return {
        "points": points,
        "worst_error_dense": worst(dense),
        "worst_error_moe_fitted": worst([p for p in moe if p["fitted"]]),
        "worst_error_moe_held_back": worst([p for p in moe if not p["fitted"]]),
        "within": all(abs(p["error"]) <= p["tolerance"] for p in points),
    }


def _tools(model) -> dict:
    from tests.benchmarks.bench_tools import bench_tools

    return bench_tools(model)


def _shared_serve(model) -> dict:
    from tests.benchmarks.bench_shared_serve import bench_shared_serve

    return bench_shared_serve(model)


def _serve_many(model) -> dict:
    from tests.benchmarks.bench_serve_many import bench_serve_many

    return bench_serve_many(model)


def _kv_cache(model) -> dict:
    from tests.benchmarks.bench_kv_cache import bench_kv_cache

    return bench_kv_cache(model)


def _structured(model) -> dict:
    from tests.benchmarks.bench_structured import bench_structured

    return bench_structured(model)


def _join_cost(model) -> dict:
    from tests.benchmarks.bench_join_cost import bench_join_cost

    return bench_join_cost(model)


def _tune_fit(_model) -> dict:
    from tests.benchmarks.bench_tune_fit import bench_tune_fit

    return bench_tune_fit()


BENCHES = {
    "planner": _planner,
    "demo_model": _demo_model,
    "discovery": _discovery,
    "probe": _probe,
    "gui": _gui,
    "launcher": bench_engine.bench_launcher,
    "remote": _remote,
    "remote_timeouts": _remote_timeouts,
    "copy": _copy,
    "telemetry": bench_engine.bench_telemetry,
    "memory": _memory,
    "blas": _blas,
    "history": _history,
    "linktest": _linktest,
    "compare": _compare,
    "ring_path": _ring_path,
    "library": _library,
    "serve": _serve,
    "batching": _batching,
    "adapter": _adapter,
    "finetune": _finetune,
    "tune_plot": _tune_plot,
    "tune_fit": _tune_fit,
    "peak_memory": _peak_memory,
    "slowloris": _slowloris,
    "estimate": _estimate,
    "serve_memory": _serve_memory,
    "shared_serve": _shared_serve,
    "serve_many": _serve_many,
    "kv_cache": _kv_cache,
    "structured": _structured,
    "join_cost": _join_cost,
    "tools": _tools,
}


def main() -> int:
    only = [name for name in os.environ.get("MACMESH_BENCH_ONLY", "").split(",") if name]
    model = ensure_demo_model()
    results = {"model": model.name, "cpu_count": os.cpu_count()}
    for name, bench in BENCHES.items():
        if only and name not in only:
            continue
        sys.stderr.write(f"bench {name}…\n")
        started = time.monotonic()
        results[name] = bench(model)
        results[name]["bench_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(results, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
