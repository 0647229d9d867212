"""Engine benchmarks: launcher overhead against mlx.launch, telemetry overhead, controller memory.

Each comparison runs both sides in the same process run, alternating, on the
same model, prompt and token count, and reports medians.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from core import mlxenv
from core.launcher import Job, JobSpec
from core.telemetry import Telemetry
from core.worker import protocol as p

PROMPT = "Write a short story about a lighthouse keeper."


def _macmesh_run(model: Path, max_tokens: int, telemetry: bool = True) -> dict:
    """Start a 2-rank pipeline job, ask once as soon as it is ready, stop."""
    first_token: list[float] = []
    started = time.monotonic()
    job = Job(JobSpec(model=model, strategy="pipeline", nodes=2, telemetry=telemetry))
    job.event.connect(
        lambda e: e["event"] == p.TOKEN and not first_token and first_token.append(time.monotonic())
    )
    job.start()
    try:
        job.wait_ready(timeout=300)
        done = job.wait_done(job.generate(PROMPT, max_tokens=max_tokens), timeout=600)
    finally:
        job.stop()
    return {
        "generation_tps": done["generation_tps"],
        "start_to_first_token_s": (first_token[0] if first_token else time.monotonic()) - started,
    }


def _mlx_launch_run(model: Path, max_tokens: int) -> dict:
    """The same job by hand: mlx.launch starting the same worker in one-shot form."""
    launcher = shutil.which("mlx.launch", path=str(Path(sys.executable).parent))
    if launcher is None:
        raise RuntimeError("mlx.launch is not installed next to this Python")
    port = mlxenv.free_ports(1)[0]
    argv = [
        launcher, "--backend", "ring", "-n", "2", "--starting-port", str(port), "--",
        sys.executable, "-m", "core.worker", "--model", str(model), "--strategy", "pipeline",
        "--backend", "ring", "--prompt", PROMPT, "--max-tokens", str(max_tokens),
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first_token = None
    done = None
    for line in proc.stdout:
        # mlx.launch interleaves both ranks' output: rank 0's events are the ones we want.
        event = p.parse_event(line)
        if event is None or event["rank"] != 0:
            continue
        if event["event"] == p.TOKEN and first_token is None:
            first_token = time.monotonic()
        elif event["event"] == p.DONE:
            done = event
    proc.wait(timeout=60)
    if done is None:
        raise RuntimeError("the mlx.launch run produced no answer")
    return {
        "generation_tps": done["generation_tps"],
        "start_to_first_token_s": (first_token or time.monotonic()) - started,
    }


def bench_launcher(model: Path, rounds: int = 3, max_tokens: int = 32) -> dict:
    ours, theirs = [], []
    for _ in range(rounds):
        theirs.append(_mlx_launch_run(model, max_tokens))
        ours.append(_macmesh_run(model, max_tokens))
    tps_ours = statistics.median(r["generation_tps"] for r in ours)
    tps_theirs = statistics.median(r["generation_tps"] for r in theirs)
    ttft_ours = statistics.median(r["start_to_first_token_s"] for r in ours)
    ttft_theirs = statistics.median(r["start_to_first_token_s"] for r in theirs)
    return {
        "rounds": rounds,
        "max_tokens": max_tokens,
        "macmesh_generation_tps": round(tps_ours, 3),
        "mlx_launch_generation_tps": round(tps_theirs, 3),
        "generation_tps_ratio": round(tps_ours / tps_theirs, 3),
        "macmesh_start_to_first_token_s": round(ttft_ours, 3),
        "mlx_launch_start_to_first_token_s": round(ttft_theirs, 3),
        "start_to_first_token_delta_s": round(ttft_ours - ttft_theirs, 3),
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
