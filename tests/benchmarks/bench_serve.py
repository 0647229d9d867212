"""The API's cost (``MACMESH_BENCH_ONLY=serve``): one 2-rank demo job, asked directly
(``Session.ask``, tokens timed as their events reach the controller) and through the API
(curl streaming, tokens timed as their SSE lines reach the client), alternating, same
prompt and token count. curl runs in its own process, so this process's CPU time is the
controller's (session + server). Then 32 requests at once: all served, RSS before/after.

    .venv/bin/python -m tests.benchmarks.bench_serve   (one JSON document)
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from core.run.session import Session
from tests.benchmarks.demo_api import demo_api

PROMPT = "Tell me a long story about a lighthouse keeper and the sea."


def _direct(session: Session, max_tokens: int) -> dict[str, float]:
    arrivals: list[float] = []
    request: list[str] = []
    done = threading.Event()

    def on_event(event: dict) -> None:
        if request and event.get("request") == request[0]:
            if event["event"] == "token" and event.get("text"):  # as the API sends them
                arrivals.append(time.monotonic())
            elif event["event"] == "done":
                done.set()

    session.event.connect(on_event)
    cpu = psutil.Process().cpu_times()
    started = time.monotonic()
    request.append(session.ask(PROMPT, max_tokens=max_tokens))
    done.wait(600)
    used = psutil.Process().cpu_times()
    session.event.disconnect(on_event)
    return _figures(started, arrivals, cpu, used)


def _through_api(
    session: Session, url: str, model: str, max_tokens: int
) -> tuple[dict[str, float], dict[str, float]]:
    """The client's view (curl's lines) and the controller's (the same answer's token
    events as they reached the session): their ratio is what the API itself costs."""
    seen: list[float] = []

    def on_event(event: dict) -> None:
        if event["event"] == "token" and event.get("text"):  # a token the API sends
            seen.append(time.monotonic())

    session.event.connect(on_event)
    body = json.dumps(
        {
            "model": model,
            "stream": True,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": PROMPT}],
        }
    )
    cpu = psutil.Process().cpu_times()
    started = time.monotonic()
    curl = subprocess.Popen(
        ["curl", "-sN", "-H", "Content-Type: application/json", "-d", body, url],
        stdout=subprocess.PIPE,
        text=True,
    )
    arrivals = []
    assert curl.stdout is not None
    for line in curl.stdout:
        if line.startswith("data: {") and '"content": "' in line and '"role"' not in line:
            arrivals.append(time.monotonic())
    curl.wait()
    used = psutil.Process().cpu_times()
    session.event.disconnect(on_event)
    return _figures(started, arrivals, cpu, used), _figures(started, seen, cpu, used)


def _figures(started: float, arrivals: list[float], before: Any, after: Any) -> dict[str, float]:
    span = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else float("nan")
    elapsed = (arrivals[-1] if arrivals else time.monotonic()) - started
    cpu_s = (after.user + after.system) - (before.user + before.system)
    return {
        "tokens": len(arrivals),
        "tps": (len(arrivals) - 1) / span if span == span and span > 0 else 0.0,
        "ttft_s": arrivals[0] - started if arrivals else float("nan"),
        "cpu_pct": 100 * cpu_s / elapsed if elapsed > 0 else 0.0,
    }


def _queue_of(url: str, model: str, count: int) -> dict[str, Any]:
    body = json.dumps(
        {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi!"}]}
    )
    curls = [
        subprocess.Popen(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-d", body, url],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    codes = [curl.communicate()[0].strip() for curl in curls]
    return {"sent": count, "served": codes.count("200"), "codes": sorted(set(codes))}


def _rss_mb() -> float:
    gc.collect()
    return round(psutil.Process().memory_info().rss / 2**20, 1)


def bench_serve(model: Path, rounds: int = 3, max_tokens: int = 48) -> dict[str, Any]:
    with demo_api(model, max_waiting=32) as served:
        session, url, name = served.session, served.url, served.info.name
        _direct(session, 4)  # warm both paths once
        _through_api(session, url, name, 4)
        direct, api, behind = [], [], []
        for round_ in range(rounds):
            order = ("direct", "api") if round_ % 2 == 0 else ("api", "direct")
            for side in order:
                if side == "direct":
                    direct.append(_direct(session, max_tokens))
                else:
                    client, controller = _through_api(session, url, name, max_tokens)
                    api.append(client)
                    behind.append(controller)

        def median(runs: list[dict[str, float]], key: str) -> float:
            return statistics.median(r[key] for r in runs)

        rss_before = _rss_mb()
        first = _queue_of(url, name, 32)
        rss_after_first = _rss_mb()
        second = _queue_of(url, name, 32)
        rss_after = _rss_mb()
    return {
        "rounds": rounds,
        "max_tokens": max_tokens,
        "tokens_per_answer": [r["tokens"] for r in direct + api],
        "direct_tps": round(median(direct, "tps"), 3),
        "api_tps": round(median(api, "tps"), 3),
        "tps_ratio": round(median(api, "tps") / median(direct, "tps"), 3),
        # The same API answers as their tokens reached the controller: what the ranks did.
        "api_answers_tps_at_controller": round(median(behind, "tps"), 3),
        "api_vs_same_answers_at_controller": round(
            statistics.median(a["tps"] / b["tps"] for a, b in zip(api, behind, strict=True)), 3
        ),
        "api_ttft_added_to_same_answers_ms": round(
            1000
            * statistics.median(
                a["ttft_s"] - b["ttft_s"] for a, b in zip(api, behind, strict=True)
            ),
            1,
        ),
        "direct_ttft_s": round(median(direct, "ttft_s"), 4),
        "api_ttft_s": round(median(api, "ttft_s"), 4),
        "ttft_added_ms": round(1000 * (median(api, "ttft_s") - median(direct, "ttft_s")), 1),
        "controller_cpu_pct_direct": round(median(direct, "cpu_pct"), 2),
        "controller_cpu_pct_api": round(median(api, "cpu_pct"), 2),
        "queue_of_32": [first, second],
        "controller_rss_mb": {
            "before": rss_before,
            "after_32": rss_after_first,
            "after_64": rss_after,
        },
        "targets": {
            "tps_ratio": ">= 0.97",
            "ttft_added_ms": "<= 50",
            "controller_cpu_pct_above_direct": "< 5",
            "queue_of_32": "all served, RSS flat",
        },
    }


if __name__ == "__main__":
    from core.model.demo_model import ensure_demo_model

    print(json.dumps(bench_serve(ensure_demo_model()), indent=2))
    sys.exit(0)
