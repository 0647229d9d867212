"""Run a job to completion in a test and collect what it said."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.run.job.launcher import Job, JobSpec

PROMPT = "What is the capital of France?"


@dataclass
class Result:
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    done: dict = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)


def run_job(spec: JobSpec, prompt: str = PROMPT, max_tokens: int = 12) -> Result:
    """Start, generate once greedily, stop; raise JobError when the job fails."""
    job = Job(spec)
    result = Result()
    job.event.connect(result.events.append)
    job.start()
    try:
        job.wait_ready(timeout=180)
        request = job.generate(prompt, max_tokens=max_tokens)
        result.done = job.wait_done(request, timeout=180)
    finally:
        job.stop()
    result.tokens = [
        e["token"] for e in result.events if e["event"] == "token" and e["request"] == request
    ]
    result.text = result.done.get("text", "")
    assert_no_ranks_left(job)
    return result


def generating(job: Job) -> str:
    """Start a long request on a ready job and return its id once tokens flow."""
    tokens: list[dict] = []
    job.event.connect(lambda e: e["event"] == "token" and tokens.append(e))
    request = job.generate("tell me a long story", max_tokens=100_000)
    deadline = time.monotonic() + 30
    while len(tokens) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert tokens, "generation never started"
    return request


def wait_finished(job: Job, within: float) -> float:
    """Seconds until the job ended; fails the test if it has not within ``within``."""
    started = time.monotonic()
    assert job.wait(within), f"the job did not end within {within} s (state {job.state})"
    return time.monotonic() - started


def assert_no_ranks_left(job: Job) -> None:
    alive = [pid for pid in (s.pid for s in job.ranks) if pid and _alive(pid)]
    assert not alive, f"rank processes still running: {alive}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; only its parent's wait is missing.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # reaped since (ESRCH: mid-read)
        return False
    return not stat.split(") ")[-1].startswith("Z")
