"""A job that goes wrong fails clearly, names the rank, and leaves nothing running."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from core.run.job import launcher, mlxenv
from core.run.job.launcher import Job, JobError, JobSpec, JobState
from core.worker import protocol as p
from core.worker.protocol import DEFAULT_BATCH
from tests.helpers.held_rank import HOLDING, held_python
from tests.helpers.jobs import _alive, assert_no_ranks_left, generating, run_job, wait_finished

pytestmark = pytest.mark.slow


def _ready_job(model: Path, **overrides) -> Job:
    job = Job(JobSpec(model=model, strategy="pipeline", nodes=2, **overrides)).start()
    job.wait_ready(timeout=120)
    return job


def test_killed_rank_mid_generation_fails_within_5s_naming_it(tiny_models) -> None:
    job = _ready_job(tiny_models["llama"])
    try:
        request = generating(job)
        os.kill(job.ranks[1].pid, signal.SIGKILL)
        assert wait_finished(job, 5.0) < 5.0
        assert job.state == JobState.FAILED
        assert job.message.startswith("Rank 1 was killed (signal 9) while generating")
        with pytest.raises(JobError):
            job.wait_done(request, timeout=1)
    finally:
        job.stop()
    assert_no_ranks_left(job)


def test_a_rank_killed_between_requests_is_said_to_be_serving(tiny_models) -> None:
    job = _ready_job(tiny_models["llama"])
    try:
        job.wait_done(job.generate("hello", max_tokens=2), timeout=60)
        os.kill(job.ranks[1].pid, signal.SIGKILL)
        wait_finished(job, 30.0)
        assert job.message.startswith("Rank 1 was killed (signal 9) while serving requests")
    finally:
        job.stop()
    assert_no_ranks_left(job)


@pytest.mark.parametrize(
    ("kind", "stage", "doing"),
    [
        (p.HEARTBEAT, "starting", "starting"),  # its first line: the peer waits to join
        (p.LOADING, "reading", "reading the model"),  # after joining: the peer waits to sync
    ],
)
def test_a_rank_frozen_while_loading_is_named_with_its_stage(
    tiny_models, tmp_path: Path, kind: str, stage: str, doing: str
) -> None:
    """Ranks beat from their first line and join the group only when all are up, so
    the healthy rank waiting for its frozen peer keeps beating and is not blamed.

    Rank 1 reads its model from a copy whose last weight file is a FIFO: opening it
    blocks, so the rank stays in its reading stage whatever the machine's load (a real
    model would move on to its weights before a late freeze lands)."""
    model = tiny_models["llama"]
    held = tmp_path / "held"
    shutil.copytree(model, held)
    last = sorted(held.glob("*.safetensors"))[-1]
    last.unlink()
    os.mkfifo(last)
    frozen: list[float] = []

    def freeze_rank1(event: dict) -> None:
        at_stage = event["event"] == kind and event.get("stage") == stage
        if event["rank"] == 1 and at_stage and not frozen:
            os.kill(job.ranks[1].pid, signal.SIGSTOP)
            frozen.append(time.monotonic())

    spec = JobSpec(
        model=model, strategy="pipeline", nodes=2, load_timeout_s=5.0, rank_models=[model, held]
    )
    job = Job(spec)
    job.event.connect(freeze_rank1)
    job.start()
    try:
        wait_finished(job, 120.0)  # a hang guard: the bound is asserted below
        failed_at = time.monotonic()
        assert frozen, f"rank 1 never reported {kind} {stage}"
        assert job.state == JobState.FAILED
        first_line = job.message.splitlines()[0]
        assert first_line.startswith("Rank 1 stopped responding: no sign of life for "), first_line
        assert first_line.endswith(f" while {doing}"), first_line
        # Blamed as its silence passed the loading watchdog, and every rank ended within
        # the launcher's own bound for that.
        silent_for = int(re.search(r"no sign of life for (\d+) s", first_line)[1])
        assert round(spec.load_timeout_s) <= silent_for <= spec.load_timeout_s + 1
        bound = spec.load_timeout_s + launcher.KNOCK_ON_S + launcher.END_WITHIN_S
        assert failed_at - frozen[0] < bound
    finally:
        job.stop()
    assert_no_ranks_left(job)


def test_hung_rank_trips_the_watchdog_and_everything_is_killed(tiny_models) -> None:
    job = _ready_job(tiny_models["llama"], watchdog_s=2.0)
    try:
        os.kill(job.ranks[1].pid, signal.SIGSTOP)
        wait_finished(job, 10.0)
        assert job.state == JobState.FAILED
        assert job.message.startswith("Rank 1 stopped responding")
    finally:
        job.stop()
    assert_no_ranks_left(job)


def test_stop_during_loading_is_clean(tiny_models) -> None:
    loading, stopping = threading.Event(), threading.Event()

    def hold_rank0(event: dict) -> None:
        # Rank 0 says "ready" once every rank has loaded: holding its reader at its first
        # loading event until Stop keeps the job loading, however fast the ranks are.
        if event["event"] == p.LOADING and event["rank"] == 0 and not loading.is_set():
            loading.set()
            stopping.wait(60)

    job = Job(JobSpec(model=tiny_models["qwen3"], nodes=2))
    job.event.connect(hold_rank0)
    job.state_changed.connect(lambda state, _: state == JobState.STOPPING and stopping.set())
    job.start()
    try:
        assert loading.wait(60), f"no rank started loading (state {job.state})"
        assert job.state == JobState.LOADING
        job.stop()
    finally:
        stopping.set()
        job.stop()
    assert job.state == JobState.STOPPED
    assert_no_ranks_left(job)


def test_stop_while_generating_is_clean(tiny_models) -> None:
    job = _ready_job(tiny_models["qwen3"])
    generating(job)  # tokens flow
    assert job.state == JobState.GENERATING
    job.stop()
    assert job.state == JobState.STOPPED
    assert_no_ranks_left(job)


def test_a_model_that_cannot_load_fails_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    job = Job(JobSpec(model=tmp_path, nodes=2)).start()
    try:
        wait_finished(job, 60)
        assert job.state == JobState.FAILED
        assert job.message.startswith("Rank ")
    finally:
        job.stop()
    assert_no_ranks_left(job)


@pytest.mark.parametrize("hold", [None, "mlx", "gil"])
def test_ranks_end_when_the_controller_is_killed(
    tiny_models, tmp_path: Path, hold: str | None
) -> None:
    """SIGKILL to the controller while every rank generates (None), or is inside a long
    native call: MLX matmuls, or a call that keeps the GIL so that no thread of the rank
    (its stdin reader included) can run (tests/helpers/held_rank.py). Every rank is gone
    within seconds: the ranks' lifeline (core/worker/lifeline.py) needs no GIL."""
    python = sys.executable if hold is None else held_python(tmp_path, hold)
    script = textwrap.dedent(
        f"""
        import sys, threading, time
        from pathlib import Path
        from core.run.job.launcher import Job, JobSpec
        held = set()
        all_held = threading.Event()

        def on_log(rank, line):
            if line == {HOLDING!r}:
                held.add(rank)
                if len(held) == 2:
                    all_held.set()

        # Held ranks answer one request at a time: the hold replaces that path's generate
        # (tests/helpers/held_rank.py), the batching path's steps are the same native calls.
        spec = JobSpec(
            model=Path({str(tiny_models["llama"])!r}),
            nodes=2,
            python={python!r},
            batch={1 if hold is not None else DEFAULT_BATCH!r},
        )
        job = Job(spec)
        job.log.connect(on_log)
        job.start()
        job.wait_ready(120)
        job.generate("a long story", max_tokens=100000)
        if {hold is not None!r}:
            assert all_held.wait(60), "the ranks never held"
        print(" ".join(str(s.pid) for s in job.ranks), flush=True)
        time.sleep(300)
        """
    )
    controller = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    try:
        pids = [int(pid) for pid in controller.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(pid) for pid in pids)
        time.sleep(0.5)  # well inside the call
        controller.kill()
        controller.wait()
        deadline = time.monotonic() + 5
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in pids if _alive(pid)], "ranks outlived their controller"
    finally:
        controller.kill()
        for pid in pids if "pids" in locals() else []:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_taken_port_is_retried_with_new_ports(tiny_models, monkeypatch) -> None:
    import socket

    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    busy = blocker.getsockname()[1]
    real = mlxenv.free_ports
    calls = []

    def first_busy(count: int, host: str = "127.0.0.1") -> list[int]:
        calls.append(count)
        ports = real(count, host)
        return [busy, *ports[1:]] if len(calls) == 1 else ports

    monkeypatch.setattr(mlxenv, "free_ports", first_busy)
    try:
        result = run_job(JobSpec(model=tiny_models["llama"], nodes=2), max_tokens=4)
    finally:
        blocker.close()
    assert len(calls) == 2
    assert len(result.tokens) == 4


def test_two_jobs_at_once_do_not_collide(tiny_models) -> None:
    jobs = [Job(JobSpec(model=tiny_models[a], nodes=2)).start() for a in ("llama", "qwen3")]
    try:
        for job in jobs:
            job.wait_ready(timeout=120)
        requests = [job.generate("hello", max_tokens=4) for job in jobs]
        for job, request in zip(jobs, requests, strict=True):
            assert job.wait_done(request, timeout=60)["generation_tokens"] == 4
    finally:
        for job in jobs:
            job.stop()
    for job in jobs:
        assert_no_ranks_left(job)


def test_a_refused_request_fails_alone_and_the_job_lives_on(tiny_models) -> None:
    job = _ready_job(tiny_models["llama"])
    try:
        bad = job.generate("hello", max_tokens=0)
        with pytest.raises(JobError, match="max_tokens"):
            job.wait_done(bad, timeout=30)
        good = job.generate("hello", max_tokens=3)
        assert job.wait_done(good, timeout=60)["generation_tokens"] == 3
        assert job.state == JobState.READY
    finally:
        job.stop()
    assert_no_ranks_left(job)


@pytest.mark.parametrize("strategy", ["pipeline", "tensor"])
def test_many_back_to_back_requests_keep_the_ranks_in_step(tiny_models, strategy: str) -> None:
    """Generation prefetches the next step asynchronously: the next command's broadcast
    must not overlap that step's collectives (it once garbled the command on the wire)."""
    job = _ready_job(tiny_models["qwen3"]) if strategy == "pipeline" else None
    if job is None:
        job = Job(JobSpec(model=tiny_models["qwen3"], strategy="tensor", nodes=2)).start()
        job.wait_ready(timeout=120)
    try:
        for n in range(40):
            request = job.generate(f"request {n}", max_tokens=1 + n % 3)
            assert job.wait_done(request, timeout=60)["generation_tokens"] == 1 + n % 3
    finally:
        job.stop()
    assert_no_ranks_left(job)


def test_idle_ranks_wait_without_burning_a_core(tiny_models) -> None:
    """Waiting inside an MLX ring collective spins a core; idle ranks wait on stdin."""
    import psutil

    job = _ready_job(tiny_models["llama"])
    try:
        job.wait_done(job.generate("warm up", max_tokens=2), timeout=60)
        ranks = [psutil.Process(status.pid) for status in job.ranks]
        before = [sum(p.cpu_times()[:2]) for p in ranks]
        time.sleep(2.0)
        used = [sum(p.cpu_times()[:2]) - b for p, b in zip(ranks, before, strict=True)]
        assert max(used) < 0.5, f"CPU seconds used by idle ranks over 2 s: {used}"
    finally:
        job.stop()
    assert_no_ranks_left(job)
