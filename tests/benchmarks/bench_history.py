"""Run history at scale (issue 15): 1,000 runs, each with an hour-long tokens/s series
and two links at 2 samples/s; how long opening the History view's list takes
(``History(path).runs()``: a fresh process would do the same work), and one run's
series read back."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from core.run.measure.history import History, RunRecord

RUNS = 1000
SAMPLES = 200  # per series, per run (a minute and a half at 2 samples/s)


def _record(i: int) -> RunRecord:
    points = [(t / 2, float(i % 17 + t % 5)) for t in range(SAMPLES)]
    return RunRecord(
        kind=("chat", "compare", "linktest", "api")[i % 4],
        model="SmolLM2-135M-Instruct",
        nodes=["Studio A", "Studio B", "Studio C"],
        strategy="pipeline",
        backend="ring",
        split=[10, 10, 10],
        versions={"macmesh": "0.1.0", "mlx": "0.32.4"},
        figures={"generation_tps": 5.0 + i % 7, "prompt_tps": 80.0, "ttft_s": 0.7},
        series={"tokens_per_s": points, "link 0↔1 bytes_per_s": points},
        started=1_700_000_000.0 + i * 60,
    )


def bench_history() -> dict:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "history.sqlite3"
        history = History(path)
        started = time.perf_counter()
        for i in range(RUNS):
            history.add(_record(i))
        filled_s = time.perf_counter() - started
        opens, reads = [], []
        for _ in range(7):
            t0 = time.perf_counter()
            listed = History(path).runs()
            opens.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            one = history.get(listed[RUNS // 2].id or 0)
            reads.append(time.perf_counter() - t0)
        assert len(listed) == RUNS and one is not None
        return {
            "runs": RUNS,
            "samples_per_series": SAMPLES,
            "file_mb": round(path.stat().st_size / 1e6, 1),
            "fill_s": round(filled_s, 2),
            "open_list_ms_median": round(statistics.median(opens) * 1000, 1),
            "open_list_ms_max": round(max(opens) * 1000, 1),
            "one_run_with_series_ms_median": round(statistics.median(reads) * 1000, 1),
            "target_open_ms": 300,
        }


if __name__ == "__main__":
    import json

    print(json.dumps(bench_history(), indent=2))
