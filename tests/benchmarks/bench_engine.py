"""Engine benchmarks: launcher overhead against mlx.launch, telemetry overhead, controller memory.

Each comparison runs both sides in the same process run, alternating, on the
same model, prompt and token count, and reports medians.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path

import psutil

from core.run.job import mlxenv
from core.run.job.launcher import Job, JobSpec
from core.run.measure.telemetry import Telemetry
from tests.benchmarks.launch_compare import PROMPT, compare, macmesh_run, mlx_launch_run


def bench_launcher(model: Path, rounds: int = 3, max_tokens: int = 32) -> dict:
    """A 2-rank pipeline job through MacMesh and by hand with mlx.launch, alternating."""
    ours, theirs = [], []
    for _ in range(rounds):
        port = mlxenv.free_ports(1)[0]
        launch_args = ["--backend", "ring", "-n", "2", "--starting-port", str(port)]
        theirs.append(mlx_launch_run(launch_args, model, max_tokens))
        ours.append(macmesh_run(JobSpec(model=model, strategy="pipeline", nodes=2), max_tokens))
    return {
        "rounds": rounds,
        "max_tokens": max_tokens,
        **compare(ours, theirs),
        "targets": {"generation_tps_ratio": ">= 0.97", "start_to_first_token_delta_s": "<= 0.5"},
    }


def bench_telemetry(model: Path, rounds: int = 6, max_tokens: int = 48) -> dict:
    """One ready job per setting, the same requests alternating between them."""
    jobs = {}
    results: dict[bool, list[float]] = {True: [], False: []}
    try:
        for setting in (True, False):
            jobs[setting] = Job(
                JobSpec(model=model, strategy="pipeline", nodes=2, telemetry=setting)
            ).start()
            jobs[setting].wait_ready(timeout=300)
        for round_ in range(rounds):
            # Alternate which goes first, so neither gains from a warmer machine.
            for setting in (True, False) if round_ % 2 == 0 else (False, True):
                job = jobs[setting]
                done = job.wait_done(job.generate(PROMPT, max_tokens=max_tokens), timeout=600)
                results[setting].append(done["generation_tps"])
    finally:
        for job in jobs.values():
            job.stop()
    on, off = statistics.median(results[True]), statistics.median(results[False])
    return {
        "rounds": rounds,
        "max_tokens": max_tokens,
        "generation_tps_telemetry_on": round(on, 3),
        "generation_tps_telemetry_off": round(off, 3),
        "ratio": round(on / off, 3),
        "target": ">= 0.98",
    }


def bench_controller_memory(model: Path, seconds: float = 600.0, sample_s: float = 5.0) -> dict:
    """RSS of this controller process while the demo answers prompt after prompt."""
    process = psutil.Process()
    telemetry = Telemetry()
    job = Job(JobSpec(model=model, strategy="pipeline", nodes=2))
    job.event.connect(telemetry.feed)
    job.start()
    samples: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(sample_s):
            samples.append(process.memory_info().rss / 1e6)

    sampler = threading.Thread(target=sample, daemon=True)
    requests = 0
    try:
        job.wait_ready(timeout=300)
        sampler.start()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            request = job.generate(PROMPT, max_tokens=64)
            telemetry.request_started(request, time.monotonic())
            job.wait_done(request, timeout=600)
            telemetry.current()
            telemetry.link_series()
            requests += 1
    finally:
        stop.set()
        job.stop()
    if not samples:
        samples.append(process.memory_info().rss / 1e6)
    quarter = max(1, len(samples) // 4)
    return {
        "seconds": seconds,
        "requests": requests,
        "rss_mb_max": round(max(samples), 1),
        "rss_mb_first_quarter_mean": round(statistics.mean(samples[:quarter]), 1),
        "rss_mb_last_quarter_mean": round(statistics.mean(samples[-quarter:]), 1),
        "target": "rss_mb_max < 150 and no growth",
    }


def memory_seconds() -> float:
    return float(os.environ.get("MACMESH_BENCH_MEMORY_S", "600"))


if __name__ == "__main__":
    # `python -m tests.benchmarks.bench_engine memory MODEL`: a fresh controller
    # process, so its RSS is the controller's alone.
    import json

    print(json.dumps(bench_controller_memory(Path(sys.argv[2]), memory_seconds())))
