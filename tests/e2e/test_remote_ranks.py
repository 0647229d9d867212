"""Ranks on simulated hosts through a real sshd: the same tokens as one process, and
every failure clear, naming the rank, with nothing left running on any host."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from core.remote.targets import Target
from core.run.job import launcher, mlxenv
from core.run.job.launcher import Job, JobError, JobSpec, JobState
from tests.helpers.jobs import assert_no_ranks_left, generating, run_job, wait_finished
from tests.helpers.procs import name_of
from tests.helpers.remote import loopback_targets, wait_nothing_left, workers
from tests.helpers.sshd import SSHServer, running_sshd
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(tiny_models: dict[str, Path]) -> dict[str, list[int]]:
    return {arch: run_job(JobSpec(model=tiny_models[arch], nodes=1)).tokens for arch in ("llama",)}


@pytest.mark.parametrize("hosts", [2, 3])
def test_ring_job_over_ssh_matches_one_process(
    sshd: SSHServer, tmp_path: Path, tiny_models, reference, hosts: int
) -> None:
    targets = loopback_targets(sshd, tmp_path, hosts)
    result = run_job(JobSpec(model=tiny_models["llama"], strategy="pipeline", targets=targets))
    assert result.tokens == reference["llama"]
    hellos = {e["rank"]: e for e in result.events if e["event"] == "hello"}
    assert sorted(hellos) == list(range(hosts)) and hellos[0]["size"] == hosts
    assert wait_nothing_left(sshd) == []


def test_the_worker_is_shipped_once_and_each_ranks_files_are_removed(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    from core.remote.ship import worker_bundle

    digest, _ = worker_bundle()
    targets = loopback_targets(sshd, tmp_path, 2)
    for _ in range(2):
        run_job(JobSpec(model=tiny_models["llama"], targets=targets), max_tokens=2)
    for target in targets:
        root = Path(target.cache_root)
        assert [p.name for p in (root / "worker").iterdir()] == [digest]
        assert (root / "worker" / digest / "core" / "worker" / "main.py").is_file()
        assert list((root / "jobs").iterdir()) == []  # each rank's folder went with it


# -- faults --------------------------------------------------------------------------------


def _ready_job(model: Path, targets, **overrides) -> Job:
    job = Job(JobSpec(model=model, strategy="pipeline", targets=targets, **overrides)).start()
    job.wait_ready(timeout=120)
    return job


def _assert_nothing_left(job: Job, server: SSHServer) -> None:
    assert_no_ranks_left(job)
    assert workers(server.port) == []
    assert wait_nothing_left(server) == []
    assert _job_folders(job.spec.targets or []) == []  # removed by the controller


def _job_folders(targets) -> list[str]:
    """The rank folders left under the targets' ``jobs/`` folders."""
    return sorted(
        f"{target.name}/{folder.name}"
        for target in targets
        if (Path(target.cache_root) / "jobs").is_dir()
        for folder in (Path(target.cache_root) / "jobs").iterdir()
    )


def test_a_killed_remote_rank_fails_the_job_within_5s_naming_it(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    job = _ready_job(tiny_models["llama"], loopback_targets(sshd, tmp_path, 2))
    try:
        request = generating(job)
        [worker] = workers(sshd.port, rank=1)
        worker.send_signal(signal.SIGKILL)
        assert wait_finished(job, 5.0) < 5.0
        assert job.state == JobState.FAILED
        assert job.message.startswith("Rank 1 on node1 was killed (signal 9) while generating")
        with pytest.raises(JobError):
            job.wait_done(request, timeout=1)
    finally:
        job.stop()
    _assert_nothing_left(job, sshd)


def test_a_hung_remote_rank_trips_the_watchdog_and_everything_is_killed(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    job = _ready_job(tiny_models["llama"], loopback_targets(sshd, tmp_path, 2), watchdog_s=2.0)
    try:
        [worker] = workers(sshd.port, rank=1)
        worker.send_signal(signal.SIGSTOP)
        wait_finished(job, 15.0)
        assert job.state == JobState.FAILED
        assert job.message.startswith("Rank 1 on node1 stopped responding")
    finally:
        job.stop()
    _assert_nothing_left(job, sshd)


def test_a_frozen_ssh_link_fails_within_the_watchdog_plus_the_end_bound(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    """The sshd serving rank 1's session is stopped: its channel, and any signal sent
    over that session, go unanswered. The rank is blamed once silent past the watchdog,
    and a fresh connection ends it within the launcher's bound (it took 28 s more)."""
    job = _ready_job(tiny_models["llama"], loopback_targets(sshd, tmp_path, 2), watchdog_s=3.0)
    link = None
    try:
        generating(job)
        [worker] = workers(sshd.port, rank=1)
        link = next(p for p in worker.parents() if name_of(p).startswith("sshd"))
        link.suspend()  # SIGSTOP
        frozen_at = time.monotonic()
        wait_finished(job, 60.0)  # a hang guard: the bound is asserted below
        failed_in = time.monotonic() - frozen_at
        assert job.state == JobState.FAILED
        first_line = job.message.splitlines()[0]
        assert first_line.startswith("Rank 1 on node1 stopped responding"), first_line
        assert first_line.endswith(" while generating"), first_line
        assert failed_in < job.spec.watchdog_s + launcher.KNOCK_ON_S + launcher.END_WITHIN_S
    finally:
        if link is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                link.resume()
        job.stop()
    _assert_nothing_left(job, sshd)


def test_stop_mid_answer_removes_every_ranks_folder(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    """Stop ends each rank's shell too (its own clean-up never runs): the controller
    removes the folders."""
    targets = loopback_targets(sshd, tmp_path, 2)
    job = _ready_job(tiny_models["llama"], targets)
    try:
        generating(job)
        assert len(_job_folders(targets)) == 2
    finally:
        job.stop()
    _assert_nothing_left(job, sshd)


def test_a_start_sweeps_folders_of_dead_jobs_and_never_a_live_ones(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    targets = loopback_targets(sshd, tmp_path, 2)
    jobs = Path(targets[0].cache_root) / "jobs"
    dead = subprocess.Popen(["sleep", "0"], start_new_session=True)
    dead.wait()  # its process group is gone
    live = subprocess.Popen(["sleep", "600"], start_new_session=True)
    planted = {
        "0123456789-1-rank0": str(dead.pid),  # a killed rank's
        "live000000-1-rank1": str(live.pid),  # another controller's running job
        "oldnopgid0-1-rank0": None,  # an older MacMesh's, long ago
        "newnopgid0-1-rank1": None,  # being made right now (no pgid yet)
    }
    for name, pgid in planted.items():
        (jobs / name).mkdir(parents=True)
        (jobs / name / "hostfile.json").write_text("[]")
        if pgid is not None:
            (jobs / name / "pgid").write_text(pgid + "\n")
    long_ago = time.time() - 3600
    os.utime(jobs / "oldnopgid0-1-rank0", (long_ago, long_ago))
    try:
        run_job(JobSpec(model=tiny_models["llama"], targets=targets), max_tokens=2)
        assert sorted(p.name for p in jobs.iterdir()) == [
            "live000000-1-rank1",
            "newnopgid0-1-rank1",
        ]
        assert (jobs / "live000000-1-rank1" / "hostfile.json").read_text() == "[]"
        assert live.poll() is None
    finally:
        live.kill()
        live.wait()
    assert wait_nothing_left(sshd) == []


def test_stop_during_loading_over_ssh_is_clean(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    job = Job(JobSpec(model=tiny_models["qwen3"], targets=loopback_targets(sshd, tmp_path, 2)))
    job.start()
    wait_until(lambda: job.state == JobState.LOADING, 30, "the ranks to start loading")
    job.stop()
    assert job.state == JobState.STOPPED
    _assert_nothing_left(job, sshd)


def test_stop_while_connecting_is_clean(sshd: SSHServer, tmp_path: Path, tiny_models) -> None:
    job = Job(JobSpec(model=tiny_models["qwen3"], targets=loopback_targets(sshd, tmp_path, 2)))
    before = set(threading.enumerate())
    job.start()
    [monitor] = [  # prepares the nodes, then monitors the ranks
        t for t in set(threading.enumerate()) - before if t.name == "macmesh-job-monitor"
    ]
    assert job.state == JobState.STARTING
    job.stop()
    assert job.state == JobState.STOPPED
    # The preparation finishing late must not start ranks: wait for it to finish.
    wait_until(lambda: not monitor.is_alive(), 60, "the node preparation to finish")
    assert job.state == JobState.STOPPED and job.ranks == []
    _assert_nothing_left(job, sshd)


def test_losing_sshd_mid_run_fails_the_job_and_the_workers_exit(
    tmp_path: Path, tiny_models
) -> None:
    with running_sshd(tmp_path / "sshd") as server:
        job = _ready_job(tiny_models["llama"], loopback_targets(server, tmp_path, 2))
        try:
            generating(job)
            assert len(workers(server.port)) == 2
            # The listener and every per-connection sshd die: the sessions drop.
            sshds = [server.process.pid] + [
                p.pid for p in psutil.Process(server.process.pid).children(recursive=True)
                if name_of(p) == "sshd"
            ]  # fmt: skip
            for pid in sshds:
                os.kill(pid, signal.SIGKILL)
            assert wait_finished(job, 5.0) < 5.0
            assert job.state == JobState.FAILED
            assert re.match(
                r"Rank \d on node\d lost its SSH connection to 127\.0\.0\.\d", job.message
            )
            # Nobody can kill them now: the workers end because their stdin closed.
            deadline = time.monotonic() + 10
            while workers(server.port) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert workers(server.port) == []
        finally:
            job.stop()


def test_a_taken_port_on_a_host_is_retried_with_new_ports(
    sshd: SSHServer, tmp_path: Path, tiny_models, monkeypatch
) -> None:
    blocker = socket.socket()
    blocker.bind(("127.0.0.3", 0))
    blocker.listen()
    busy = blocker.getsockname()[1]
    real = mlxenv.rank_ports
    calls: list[list[str]] = []

    def first_busy(addresses: list[str]) -> list[int]:
        calls.append(addresses)
        ports = real(addresses)
        return [ports[0], busy, *ports[2:]] if len(calls) == 1 else ports

    monkeypatch.setattr(mlxenv, "rank_ports", first_busy)
    try:
        result = run_job(
            JobSpec(model=tiny_models["llama"], targets=loopback_targets(sshd, tmp_path, 2)),
            max_tokens=4,
        )
    finally:
        blocker.close()
    assert calls == [["127.0.0.2", "127.0.0.3"]] * 2
    assert len(result.tokens) == 4
    assert wait_nothing_left(sshd) == []


# -- what runs the worker ------------------------------------------------------------------


def _fake_python(path: Path, mlx_version: str) -> str:
    """A node's Python that reports another mlx (and is otherwise this one)."""
    path.write_text(
        "#!/bin/sh\n"
        f'if [ "$*" = "-m core.worker --version" ]; then\n'
        f'  {sys.executable} "$@" | sed \'s/"mlx": "[^"]*"/"mlx": "{mlx_version}"/\'\n'
        "  exit 0\nfi\n"
        f'exec {sys.executable} "$@"\n'
    )
    path.chmod(0o755)
    return str(path)


def test_another_mlx_on_one_node_fails_before_any_rank_starts(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    targets = loopback_targets(sshd, tmp_path, 2)
    targets[1] = dataclasses.replace(
        targets[1], python=_fake_python(tmp_path / "old-python", "0.29.0")
    )
    job = Job(JobSpec(model=tiny_models["llama"], targets=targets)).start()
    wait_finished(job, 30)
    assert job.state == JobState.FAILED
    assert "Every node must run the same mlx" in job.message
    assert "0.29.0 on 127.0.0.3" in job.message and job.ranks == []
    assert wait_nothing_left(sshd) == []


def test_a_node_without_that_python_is_named_with_the_fix(
    sshd: SSHServer, tmp_path: Path, tiny_models
) -> None:
    targets = loopback_targets(sshd, tmp_path, 2)
    targets[1] = dataclasses.replace(targets[1], python="/nowhere/python3")
    job = Job(JobSpec(model=tiny_models["llama"], targets=targets)).start()
    wait_finished(job, 30)
    assert job.state == JobState.FAILED
    assert job.message.startswith("There is no Python at /nowhere/python3 on 127.0.0.3")
    assert "set that node's Python" in job.message


def test_an_unreachable_node_fails_the_job_with_the_ssh_reason(tmp_path: Path, tiny_models) -> None:
    with socket.socket() as closed:  # a port where nothing listens
        closed.bind(("127.0.0.2", 0))
        port = closed.getsockname()[1]
    target = Target("gone", "127.0.0.2", port=port, ssh_dir=tmp_path, known_hosts=tmp_path / "kh")
    job = Job(JobSpec(model=tiny_models["llama"], targets=[target, target])).start()
    wait_finished(job, 30)
    assert job.state == JobState.FAILED
    assert job.message == f"No SSH server answers on 127.0.0.2 port {port}."


def test_the_demo_model_over_ssh_gives_one_process_tokens(
    sshd: SSHServer, tmp_path: Path, demo_model: Path
) -> None:
    expected = run_job(JobSpec(model=demo_model, nodes=1), max_tokens=8).tokens
    targets = loopback_targets(sshd, tmp_path, 2)
    result = run_job(JobSpec(model=demo_model, strategy="pipeline", targets=targets), max_tokens=8)
    assert len(expected) >= 5 and result.tokens == expected  # it may end with "Paris."
    assert "Paris" in result.text
    assert wait_nothing_left(sshd) == []
