"""CPU ranks on a real BLAS with float weights, against today's path (issue 17).

The demo model on the 2-rank pipeline, local ranks, the same prompts: the new path
(the launcher's OpenBLAS preload, float32 weights dequantized at load) against the old
one (``MACMESH_CPU_FAST=0``: MLX's bundled reference BLAS, weights kept 4-bit). Rounds alternate
the two arms so a shared machine's load hits both alike; figures are medians. While
rank 0 generates, the ranks' threads are counted: all of them (psutil num_threads) and
the busy ones (those that used over 5 % of a core meanwhile), and, in one extra run,
how many want a core at once (``_ThreadSampler``), against the cores.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from pathlib import Path
from unittest import mock

from core.envvars import ENV_CPU_FAST
from core.run.job import cpu
from core.run.job.launcher import Job, JobSpec
from core.run.measure.telemetry import rank_facts
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


def _run(model: Path, new: bool, sample_hz: float = 0.0) -> dict:
    spec = JobSpec(model=model, nodes=2, split=[18, 12])
    # Today's path is the one MACMESH_CPU_FAST=0 gives: no preload, quantized weights.
    patch = mock.patch.dict(os.environ, {ENV_CPU_FAST: "0"}) if not new else None
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
        sampler = _ThreadSampler(pids, sample_hz)
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
    """The ranks' threads while they work, read from Linux's /proc.

    "Threads while generating" counts the threads that want a core at the same moment:
    each sample reads every rank thread's scheduler state, and the ones running or
    runnable (``R``) are added up. Threads that sleep (a rank's main thread waiting on
    its stream, the ring thread of the rank that is not its turn) take no core, so they
    are not oversubscription. Alongside: every thread the ranks own (``threads_total``),
    the ones that used over 5 % of a core (``threads_busy``), and from ``schedstat`` the
    average number on a core and the average waiting for one (the queue others' work,
    on a shared machine, adds to as well).
    """

    def __init__(self, pids: list[int], hz: float = 0.0) -> None:
        super().__init__(daemon=True)
        self._pids = pids
        self._period = 1.0 / hz if hz else 0.2
        self._sample_states = bool(hz)
        self._halt = threading.Event()
        self.most = 0
        self.runnable: list[int] = []
        self._start = self._schedstat()
        self._began = time.monotonic()

    def _tasks(self) -> list[Path]:
        tasks: list[Path] = []
        for pid in self._pids:
            with contextlib.suppress(OSError):
                tasks.extend(Path(f"/proc/{pid}/task").iterdir())
        return tasks

    def _schedstat(self) -> dict[str, tuple[int, int]]:
        stats = {}
        for task in self._tasks():
            try:
                run_ns, wait_ns, _ = (task / "schedstat").read_text().split()
            except (OSError, ValueError):
                continue
            stats[str(task)] = (int(run_ns), int(wait_ns))
        return stats

    def _running_now(self, tasks: list[Path]) -> int:
        count = 0
        for task in tasks:
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue
            # The state follows the command name, which is in parentheses.
            if stat[stat.rindex(")") + 2] == "R":
                count += 1
        return count

    def run(self) -> None:
        tasks = self._tasks()
        while not self._halt.wait(self._period):
            self.most = max(self.most, len(tasks))
            if self._sample_states:
                self.runnable.append(self._running_now(tasks))
            else:
                tasks = self._tasks()

    def finish(self) -> dict:
        self._halt.set()
        self.join()
        elapsed = time.monotonic() - self._began
        end = self._schedstat()
        ran = {k: (r - self._start.get(k, (0, 0))[0]) / 1e9 for k, (r, _) in end.items()}
        waited = sum(w - self._start.get(k, (0, 0))[1] for k, (_, w) in end.items()) / 1e9
        result = {
            "threads_total": self.most,
            "threads_busy": sum(1 for t in ran.values() if t > 0.05 * elapsed),
            "cores_used_avg": round(sum(ran.values()) / elapsed, 2),
            "threads_waiting_avg": round(waited / elapsed, 2),
        }
        if self.runnable:
            ordered = sorted(self.runnable)
            result["threads_runnable"] = {
                "samples": len(ordered),
                "mean": round(statistics.fmean(ordered), 2),
                "p95": ordered[int(0.95 * (len(ordered) - 1))],
                "max": ordered[-1],
            }
        return result


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
            "cores_used_avg": median(arm, "cores_used_avg"),
            "threads_waiting_avg": median(arm, "threads_waiting_avg"),
            "ranks": runs[arm][-1]["ranks"],
        }
    result["generation_ratio"] = round(
        result["new"]["generation_tps"] / result["old"]["generation_tps"], 2
    )
    result["prompt_ratio"] = round(result["new"]["prompt_tps"] / result["old"]["prompt_tps"], 2)
    # One more run of the new path, its threads' states sampled (200 per second: the
    # sampling costs a little CPU, so the timed rounds above go without it).
    sampled = _run(model, True, sample_hz=200)
    result["threads_while_generating"] = sampled["threads_runnable"]
    result["runnable_threads_within_cores_plus_1"] = sampled["threads_runnable"]["p95"] <= cores + 1
    result["targets"] = {
        "generation_ratio": 1.8,
        "prompt_ratio": 8.0,
        "runnable_threads_p95": cores + 1,
    }
    result["os_cpu_count"] = os.cpu_count()
    # Where a token's time goes on the new path (one process, a rank's environment).
    from tests.benchmarks.token_profile import token_profile

    result["token_profile"] = token_profile(model)
    return result
