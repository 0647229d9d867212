"""One rank's process, as the launcher sees it: lines in, lines out, and a way to end it.

``LocalRank`` runs on this machine (the demo cluster); ``core.run.job.remote_ranks.RemoteRank``
runs on another Mac over SSH. Each local rank gets its own
process group so that ending it ends anything it started, and its stdin is a
pipe that the worker watches: if this controller dies, the pipe closes and
the rank exits by itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Protocol


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
        self._proc = subprocess.Popen(
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


def _lines(stream: IO[str] | None) -> Iterator[str]:
    if stream is None:
        return
    try:
        yield from iter(stream.readline, "")
    except (ValueError, OSError):
        return
