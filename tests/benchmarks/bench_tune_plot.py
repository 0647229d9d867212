"""The fine-tune loss plot's redraw with 10,000 points (issue 16's target: < 16 ms).

``bench_tune_plot()`` returns one dict (``make bench`` prints it under "tune_plot"): a
``LossPlot`` holding 10,000 iterations of train loss and tokens/s (and a validation loss
every 50), one point appended per tick as a live run does, then ``refresh`` + a repaint,
timed. ``full_*`` times the same with every point redrawn from scratch (a resize). It
runs in a child process (``python -m tests.benchmarks.bench_tune_plot measure``) for a
clean QApplication on the offscreen platform.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POINTS = 10_000
TICKS = 120
BUDGET_MS = 16.0


def bench_tune_plot() -> dict:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks.bench_tune_plot", "measure"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _loss(i: int) -> float:
    return 0.6 + 2.4 * math.exp(-i / 900) + 0.15 * math.sin(i * 0.7)


def measure() -> dict:
    from PySide6.QtWidgets import QApplication

    from gui.app import configure
    from gui.tune.loss_plot import LossPlot

    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure(app, "light")
    plot = LossPlot()
    plot.resize(900, 600)
    plot.show()
    app.processEvents()
    total = POINTS + TICKS
    plot.set_iterations(total)
    for i in range(1, POINTS + 1):
        plot.add_point(i, _loss(i), 400 + 30 * math.sin(i / 40))
        if i % 50 == 0:
            plot.add_validation(i, _loss(i) + 0.1)
    live, full = [], []
    for i in range(POINTS + 1, total + 1):
        plot.add_point(i, _loss(i), 410.0)
        started = time.perf_counter()
        plot.refresh()
        plot.repaint()
        live.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        plot.refresh(force=True)
        plot.repaint()
        full.append((time.perf_counter() - started) * 1000)
    points = plot.train.size
    plot.close()
    live, full = live[3:], full[3:]  # the first redraws build caches
    return {
        "points": points,
        "validation_points": plot.valid.size,
        "median_ms": round(statistics.median(live), 2),
        "p95_ms": round(sorted(live)[int(len(live) * 0.95)], 2),
        "max_ms": round(max(live), 2),
        "full_median_ms": round(statistics.median(full), 2),
        "budget_ms": BUDGET_MS,
        "within_budget": statistics.median(live) < BUDGET_MS,
        "platform": "offscreen",
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["measure"]:
        print(json.dumps(measure()))
    else:
        print(json.dumps(bench_tune_plot(), indent=2))
