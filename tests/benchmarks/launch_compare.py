"""MacMesh's launcher against ``mlx.launch`` on the same worker, prompt and token count:
one timed run of each side, and the medians of many (bench_engine: local ranks;
bench_remote: ranks over SSH)."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from core.run.job.launcher import Job, JobSpec
from core.worker import protocol as p

PROMPT = "Write a short story about a lighthouse keeper."


def macmesh_run(spec: JobSpec, max_tokens: int) -> dict:
    """Start the job, ask once as soon as it is ready, stop."""
    first_token: list[float] = []
    started = time.monotonic()
    job = Job(spec)
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


def mlx_launch_run(
    launch_args: Sequence[str], model: Path, max_tokens: int, env: dict[str, str] | None = None
) -> dict:
    """The same job by hand: ``mlx.launch <launch_args>`` starting the worker in one-shot
    form (``env``: the environment mlx.launch runs in, default this one's)."""
    launcher = shutil.which("mlx.launch", path=str(Path(sys.executable).parent))
    if launcher is None:
        raise RuntimeError("mlx.launch is not installed next to this Python")
    argv = [
        launcher, *launch_args, "--",
        sys.executable, "-m", "core.worker", "--model", str(model), "--strategy", "pipeline",
        "--backend", "ring", "--prompt", PROMPT, "--max-tokens", str(max_tokens),
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        text=True, env=env,
    )  # fmt: skip
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


def compare(ours: list[dict], theirs: list[dict]) -> dict:
    """Medians of both sides' runs, and how ours compares."""
    tps_ours = statistics.median(r["generation_tps"] for r in ours)
    tps_theirs = statistics.median(r["generation_tps"] for r in theirs)
    ttft_ours = statistics.median(r["start_to_first_token_s"] for r in ours)
    ttft_theirs = statistics.median(r["start_to_first_token_s"] for r in theirs)
    return {
        "macmesh_generation_tps": round(tps_ours, 3),
        "mlx_launch_generation_tps": round(tps_theirs, 3),
        "generation_tps_ratio": round(tps_ours / tps_theirs, 3),
        "macmesh_start_to_first_token_s": round(ttft_ours, 3),
        "mlx_launch_start_to_first_token_s": round(ttft_theirs, 3),
        "start_to_first_token_delta_s": round(ttft_ours - ttft_theirs, 3),
    }
