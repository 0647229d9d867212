"""One rank's process, as the launcher sees it: lines in, lines out, and a way to end it.

``LocalRank`` runs on this machine (the demo cluster); ``core.run.job.remote_ranks.RemoteRank``
runs on another Mac over SSH. Each local rank gets its own
process group so that ending it ends anything it started, and this process's pid
(``ENV_CONTROLLER``): the rank ends with this controller whatever holds its GIL
(``core.worker.lifeline``: a watchdog process, and on Linux the kernel's parent-death
signal). Its stdin is a pipe the worker watches too: when it closes, the rank exits.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

from core.worker.protocol import ENV_CONTROLLER

T = TypeVar("T")


class RankProcess(Protocol):
    rank: int
    pid: int
    exit_reason: str | None  # how it ended when the exit status cannot say (a lost session)

    def send(self, line: str) -> None: ...
    def stdout_lines(self) -> Iterator[str]: ...
    def stderr_lines(self) -> Iterator[str]: ...
    def poll(self) -> int | None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...
    def close(self) -> None: ...


class LocalRank:
    exit_reason: str | None = None  # a local exit status always says

    def __init__(self, rank: int, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.rank = rank
        self._log = open(log_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        env = {**env, ENV_CONTROLLER: str(os.getpid())}
        self._proc = _SPAWNER.run(
            lambda: subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                encoding="utf-8",
                errors="replace",
                bufsize=1,
                start_new_session=True,
            )
        )
        self.pid = self._proc.pid
        self._send_lock = threading.Lock()

    def send(self, line: str) -> None:
        with self._send_lock:
            try:
                assert self._proc.stdin is not None  # Popen(stdin=PIPE)
                self._proc.stdin.write(line)
                self._proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the rank is gone: the monitor reports it

    def stdout_lines(self) -> Iterator[str]:
        yield from _lines(self._proc.stdout)

    def stderr_lines(self) -> Iterator[str]:
        for line in _lines(self._proc.stderr):
            with contextlib.suppress(ValueError):
                self._log.write(line if line.endswith("\n") else line + "\n")
            yield line

    def poll(self) -> int | None:
        return self._proc.poll()

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)
        self._signal(signal.SIGCONT)  # a stopped (hung) rank must run to see SIGTERM

    def kill(self) -> None:
        self._signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)

    def close(self) -> None:
        for stream in (self._proc.stdin,):
            with contextlib.suppress(OSError, ValueError):
                if stream is not None:
                    stream.close()
        with contextlib.suppress(ValueError):
            self._log.close()

    def _signal(self, sig: int) -> None:
        # The whole process group: the rank and anything it started.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)


class _Spawner:
    """Starts local ranks from one thread that lives as long as this process.

    Linux sends a child its parent-death signal when the *thread* that started it ends,
    not its process: a rank started from a short-lived thread (a window's background task,
    a test's helper) would be killed as that thread returned. A daemon thread ends only
    with the process, which is exactly when the ranks must end."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._work: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def run(self, start: Callable[[], T]) -> T:
        """``start()`` on the spawner thread; its result, or its exception raised here."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="macmesh-rank-spawner", daemon=True
                )
                self._thread.start()
        done: Future[T] = Future()
        self._work.put((start, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            start, done = self._work.get()
            try:
                done.set_result(start())
            except BaseException as exc:  # handed to the caller, who raises it
                done.set_exception(exc)

    def forget_thread(self) -> None:
        """In a forked child, the parent's thread does not exist: start a new one."""
        self._lock = threading.Lock()
        self._work = queue.SimpleQueue()
        self._thread = None


_SPAWNER = _Spawner()
os.register_at_fork(after_in_child=_SPAWNER.forget_thread)


def _lines(stream: IO[str] | None) -> Iterator[str]:
    if stream is None:
        return
    try:
        yield from iter(stream.readline, "")
    except (ValueError, OSError):
        return
