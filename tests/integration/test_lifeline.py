"""A local rank ends with its controller whatever holds its GIL (core.worker.lifeline).

Each means is tried alone on a real process tree: a "controller" starts a "rank" in a
session of its own, the rank arms one means, starts a child in its group, then holds
the GIL in native code (libc's ``sleep`` called through ``ctypes.PyDLL``, which keeps
the GIL, as native code holding it would): no thread of the rank can run. The watchdog
alone is what a Mac has, so it is tested here too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from core.run.job.ranks import LocalRank
from core.worker import lifeline
from core.worker.protocol import ENV_CONTROLLER
from tests.helpers.jobs import _alive
from tests.helpers.wait import wait_until

ARM = {
    "watchdog": "lifeline.start_watchdog(int(os.environ[ENV_CONTROLLER]))",
    "pdeathsig": "assert lifeline.die_with_parent()",
    "both": "lifeline.tie_to_controller()",
}

RANK = """
import ctypes, os, subprocess, sys
from core.worker import lifeline
from core.worker.protocol import ENV_CONTROLLER
{arm}
child = subprocess.Popen(["sleep", "600"], stdout=subprocess.DEVNULL)
print("rank", os.getpid(), child.pid, flush=True)
ctypes.PyDLL(None).sleep(600)  # native code holding the GIL
"""

CONTROLLER = """
import os, subprocess, sys, threading, time
from core.worker.protocol import ENV_CONTROLLER
env = {{**os.environ, ENV_CONTROLLER: str(os.getpid())}}
# Started from the main thread, which lives as long as this process (PDEATHSIG follows
# the thread that started the rank).
subprocess.Popen([sys.executable, "-c", {rank!r}], env=env, start_new_session=True)
time.sleep(600)
"""


def _controller(arm: str) -> tuple[subprocess.Popen[str], list[int]]:
    rank = RANK.format(arm=ARM[arm])
    controller = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER.format(rank=rank)], stdout=subprocess.PIPE, text=True
    )
    assert controller.stdout is not None
    words = controller.stdout.readline().split()
    assert words and words[0] == "rank", "the rank never started"
    return controller, [int(pid) for pid in words[1:]]


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if _alive(pid)]


def _cleanup(controller: subprocess.Popen[str], pids: list[int]) -> None:
    controller.kill()
    controller.wait()
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("arm", ["watchdog", "both"])
def test_the_rank_and_its_group_end_with_the_controller(arm: str) -> None:
    """The watchdog (macOS's only means) kills the rank's whole group, GIL held or not."""
    controller, pids = _controller(arm)
    try:
        time.sleep(0.3)  # the rank is in its native call
        assert all(_alive(pid) for pid in pids)
        controller.kill()
        controller.wait()
        assert not _gone_within(pids, 5.0), "the rank or its child outlived the controller"
    finally:
        _cleanup(controller, pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_parent_death_signal_alone_ends_the_rank() -> None:
    controller, pids = _controller("pdeathsig")
    rank = pids[0]
    try:
        time.sleep(0.3)
        assert _alive(rank)
        controller.kill()
        controller.wait()
        assert not _gone_within([rank], 5.0), "the rank outlived the controller"
    finally:
        _cleanup(controller, pids)


def test_a_rank_whose_controller_is_already_gone_exits_at_once() -> None:
    """The variable names a pid that is not (or no longer) this rank's parent."""
    stranger = subprocess.Popen(["sleep", "600"])
    try:
        code = (
            "from core.worker.lifeline import tie_to_controller; tie_to_controller(); print('tied')"
        )
        run = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, ENV_CONTROLLER: str(stranger.pid)},
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        stranger.kill()
        stranger.wait()
    assert run.returncode == lifeline.CONTROLLER_GONE_EXIT
    assert "tied" not in run.stdout
    assert run.stderr.strip() == "macmesh worker: the controller that started this rank is gone"


def test_the_watchdog_leaves_with_its_rank_and_holds_none_of_its_pipes() -> None:
    code = textwrap.dedent(
        """
        import sys
        from core.worker.lifeline import tie_to_controller
        tie_to_controller()
        print("tied", flush=True)
        sys.stdin.read()
        """
    )
    rank = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, ENV_CONTROLLER: str(os.getpid())},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert rank.stdout is not None
        assert rank.stdout.readline() == "tied\n"
        watchdogs = psutil.Process(rank.pid).children()
        assert len(watchdogs) == 1
        if sys.platform.startswith("linux"):  # its standard streams are /dev/null
            fds = Path(f"/proc/{watchdogs[0].pid}/fd")
            assert {os.readlink(fds / str(fd)) for fd in (0, 1, 2)} == {os.devnull}
        _out, err = rank.communicate("", timeout=10)
        assert rank.returncode == 0, err
        wait_until(lambda: not _alive(watchdogs[0].pid), 5.0, "the watchdog to leave")
    finally:
        if rank.poll() is None:
            rank.kill()
            rank.wait()


def test_a_rank_started_without_the_variable_is_not_tied() -> None:
    """Remote ranks: they end with their SSH session, as before."""
    code = (
        "import os, psutil; from core.worker.lifeline import tie_to_controller; "
        "tie_to_controller(); print(len(psutil.Process().children()))"
    )
    env = {k: v for k, v in os.environ.items() if k != ENV_CONTROLLER}
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "0"


@pytest.mark.parametrize("poll_only", [False, True])
def test_the_waiter_sees_the_first_exit(poll_only: bool) -> None:
    """The pidfd (or kqueue) path and the poll kept for systems with neither."""
    short = subprocess.Popen(["sleep", "0.3"])
    long = subprocess.Popen(["sleep", "600"])
    reaper = threading.Thread(target=short.wait, daemon=True)  # a zombie still exists
    reaper.start()
    try:
        waiter = lifeline._ExitWaiter([long.pid, short.pid], poll_only=poll_only)
        started = time.monotonic()
        assert waiter.first_exit() == short.pid
        assert time.monotonic() - started < 5.0
        # A process already gone is seen at once.
        reaper.join(5)
        assert lifeline._ExitWaiter([long.pid, short.pid], poll_only=poll_only).first_exit() == (
            short.pid
        )
    finally:
        long.kill()
        long.wait()


def test_the_stdin_reader_exits_though_the_dead_controller_took_its_log() -> None:
    """The other means, kept: stdin closed. Its farewell line goes to a pipe whose reader
    died with the controller; the BrokenPipeError must not stop the exit (it did: ranks
    in a long MLX loop outlived their controller)."""
    code = textwrap.dedent(
        """
        import time
        from core.worker import protocol as p
        from core.worker.serve import read_commands
        print("reading", flush=True)
        read_commands(p.EventWriter(1), 1)
        time.sleep(120)
        """
    )
    rank = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert rank.stdout is not None and rank.stderr is not None and rank.stdin is not None
        assert rank.stdout.readline() == "reading\n"
        rank.stderr.close()  # the controller's end of the log, gone
        rank.stdin.close()
        assert rank.wait(10) == 3
    finally:
        if rank.poll() is None:
            rank.kill()
            rank.wait()


def test_a_local_rank_outlives_the_thread_that_started_it(tmp_path: Path) -> None:
    """Linux's parent-death signal follows the thread that started a process: a rank
    started from a short-lived thread (a window's background task) must not die with
    it. LocalRank starts every rank from one thread that lives as long as the process."""
    code = (
        "import time; from core.worker.lifeline import tie_to_controller as t; t(); "
        "print('tied', flush=True); time.sleep(120)"
    )
    started: list[LocalRank] = []

    def start_and_leave() -> None:
        rank = LocalRank(0, [sys.executable, "-c", code], dict(os.environ), tmp_path / "r.log")
        started.append(rank)
        next(rank.stdout_lines())  # tied to this process, under PDEATHSIG: now leave

    starter = threading.Thread(target=start_and_leave)
    starter.start()
    starter.join(60)
    (rank,) = started
    try:
        time.sleep(0.5)
        assert rank.poll() is None, "the rank died with the thread that started it"
    finally:
        rank.kill()
        rank.close()
