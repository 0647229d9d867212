"""CPU ranks on a real BLAS with float weights, against today's path (issue 17).

The demo model on the 2-rank pipeline, local ranks, the same prompts: the new path
(the launcher's OpenBLAS preload, float32 weights dequantized at load) against the old
one (no preload: MLX's bundled reference BLAS, weights kept 4-bit). Rounds alternate
the two arms so a shared machine's load hits both alike; figures are medians. While
rank 0 generates, the ranks' threads are counted: all of them (psutil num_threads) and
the busy ones (those that used over 5 % of a core meanwhile), against the cores.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path
from unittest import mock

import psutil

from core.run import cpu
from core.run.launcher import Job, JobSpec
from core.run.telemetry import rank_facts
from core.worker import protocol as p

ROUNDS = 3
MAX_TOKENS = 48
# A prompt of a few hundred tokens, so prompt tokens/s measures prefill, not overhead.
PROMPT = (
    "Here are some notes about lighthouses. "
    + " ".join(
        f"Lighthouse number {i} stands on a rocky cape, its lamp turning every night to warn "
        "ships away from the reef, and its keeper writes the weather in a logbook."
        for i in range(1, 9)
    )
    + " Write a short story about one of these keepers."
)


def _run(model: Path, new: bool) -> dict:
    spec = JobSpec(model=model, nodes=2, split=[18, 12], weights=None if new else ["quantized"] * 2)
    patch = mock.patch.object(cpu, "local_blas", return_value=None) if not new else None
    if patch:
        patch.start()
    loaded: list[dict] = []
    job = Job(spec)
    job.event.connect(lambda e: e["event"] == p.LOADED and loaded.append(rank_facts(e)))
    try:
        job.start()
        job.wait_ready(timeout=300)
    finally:
        if patch:
            patch.stop()
    try:
        job.wait_done(job.generate("Say hello.", max_tokens=4), timeout=300)  # warm up
        pids = [proc.pid for proc in job._procs]
        sampler = _ThreadSampler(pids)
        sampler.start()
        done = job.wait_done(job.generate(PROMPT, max_tokens=MAX_TOKENS), timeout=600)
        threads = sampler.finish()
    finally:
        job.stop()
    return {
        "prompt_tokens": done["prompt_tokens"],
        "prompt_tps": done["prompt_tps"],
        "generation_tps": done["generation_tps"],
        "ranks": sorted(loaded, key=lambda r: r["rank"]),
        **threads,
    }


class _ThreadSampler(threading.Thread):
    """The ranks' thread counts while they work: the most seen, and the busy ones."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(daemon=True)
        self._procs = [psutil.Process(pid) for pid in pids]
        self._halt = threading.Event()
        self.most = 0
        self._start_times = self._cpu_times()
        self._began = time.monotonic()

    def _cpu_times(self) -> dict[tuple[int, int], float]:
        times = {}
        for proc in self._procs:
            for thread in proc.threads():
                times[(proc.pid, thread.id)] = thread.user_time + thread.system_time
        return times

    def run(self) -> None:
        while not self._halt.wait(0.2):
            self.most = max(self.most, sum(proc.num_threads() for proc in self._procs))

    def finish(self) -> dict:
        self._halt.set()
        self.join()
        elapsed = time.monotonic() - self._began
        end = self._cpu_times()
        busy = sum(
            1 for key, t in end.items() if t - self._start_times.get(key, 0.0) > 0.05 * elapsed
        )
        return {"threads_total": self.most, "threads_busy": busy}


def bench_blas(model: Path) -> dict:
    runs: dict[str, list[dict]] = {"new": [], "old": []}
    for _ in range(ROUNDS):
        for arm in ("old", "new"):
            runs[arm].append(_run(model, arm == "new"))

    def median(arm: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[arm])

    cores = cpu.local_cores()
    result: dict = {"cores": cores, "rounds": ROUNDS, "max_tokens": MAX_TOKENS}
    for arm in ("new", "old"):
        result[arm] = {
            "generation_tps": median(arm, "generation_tps"),
            "prompt_tps": median(arm, "prompt_tps"),
            "prompt_tokens": runs[arm][0]["prompt_tokens"],
            "threads_total_max": max(run["threads_total"] for run in runs[arm]),
            "threads_busy_max": max(run["threads_busy"] for run in runs[arm]),
            "ranks": runs[arm][-1]["ranks"],
        }
    result["generation_ratio"] = round(
        result["new"]["generation_tps"] / result["old"]["generation_tps"], 2
    )
    result["prompt_ratio"] = round(result["new"]["prompt_tps"] / result["old"]["prompt_tps"], 2)
    result["busy_threads_within_cores_plus_1"] = result["new"]["threads_busy_max"] <= cores + 1
    result["targets"] = {"generation_ratio": 1.8, "prompt_ratio": 8.0, "threads": cores + 1}
    result["os_cpu_count"] = os.cpu_count()
    return result
