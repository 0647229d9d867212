"""Memory after 500 requests (``MACMESH_BENCH_ONLY=serve_memory``): the demo 2-rank
pipeline behind the API (batching and the prompt cache at their defaults), 500 short
chat requests through ``/v1/chat/completions``, 8 clients at once, every prompt its own
(so the prompt cache keeps filling and must evict). The controller's resident memory
(this process: session + server) and each rank's are sampled before the first request
and after every 100; the slope (MB per 100 requests, least squares, over all samples and
from 200 requests on, once what is bounded has filled) should be flat: the prompt cache
is bounded in bytes, and nothing else may grow with the requests served.

    .venv/bin/python -m tests.benchmarks.bench_serve_memory   (one JSON document)
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

from tests.benchmarks.demo_api import demo_api

REQUESTS = 500
EVERY = 100
CLIENTS = 8


def _ask(url: str, model: str, n: int) -> int:
    """One short chat request of its own (a different prompt each), its HTTP status."""
    body = json.dumps(
        {
            "model": model,
            "max_tokens": 4,
            "messages": [{"role": "user", "content": f"Question {n}: what is {n} plus {n}?"}],
        }
    ).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as answer:
        answer.read()
        return int(answer.status)


def _rss_mb(pid: int | None = None) -> float:
    if pid is None:
        gc.collect()
    return round(psutil.Process(pid).memory_info().rss / 2**20, 1)


def _slope(xs: list[int], ys: list[float]) -> float:
    """MB per 100 requests, least squares."""
    return round(statistics.linear_regression(xs, ys).slope * EVERY, 2)


def bench_serve_memory(model: Path, requests: int = REQUESTS) -> dict[str, Any]:
    samples: list[dict[str, Any]] = []
    statuses: dict[int, int] = {}
    with demo_api(model, max_waiting=64) as api:
        job = api.session.job
        assert job is not None
        pids = {str(rank.rank): rank.pid for rank in job.ranks}

        def sample(served: int) -> None:
            ranks = {rank: _rss_mb(pid) for rank, pid in pids.items() if pid is not None}
            samples.append({"requests": served, "controller_mb": _rss_mb(), "ranks_mb": ranks})

        sample(0)
        with ThreadPoolExecutor(CLIENTS) as clients:
            for start in range(0, requests, EVERY):
                batch = range(start, min(start + EVERY, requests))
                for status in clients.map(lambda n: _ask(api.url, api.info.name, n), batch):
                    statuses[status] = statuses.get(status, 0) + 1
                sample(batch[-1] + 1)
    xs = [s["requests"] for s in samples]
    # The first 200 fill what is bounded (MLX's buffer cache, the prompt cache up to its
    # bound, the controller's kept summaries): the slope from there on is the one to watch.
    warm = slice(2, None)
    controller = [s["controller_mb"] for s in samples]
    slopes: dict[str, Any] = {
        "controller": _slope(xs, controller),
        "controller_from_200": _slope(xs[warm], controller[warm]),
    }
    for rank in samples[0]["ranks_mb"]:
        rss = [s["ranks_mb"][rank] for s in samples]
        slopes[f"rank{rank}"] = _slope(xs, rss)
        slopes[f"rank{rank}_from_200"] = _slope(xs[warm], rss[warm])
    return {
        "requests": requests,
        "clients_at_once": CLIENTS,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "samples": samples,
        "slope_mb_per_100_requests": slopes,
        "targets": {"slope_mb_per_100_requests": "flat (cache bounded)"},
    }


if __name__ == "__main__":
    from core.model.demo_model import ensure_demo_model

    print(json.dumps(bench_serve_memory(ensure_demo_model()), indent=2))
    sys.exit(0)
