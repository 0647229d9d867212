"""A local rank ends with its controller, whatever its own threads are doing.

The stdin reader (``serve.read_commands``) notices a closed pipe only once it gets the
GIL, which native code may hold for as long as it runs: a rank whose controller was
killed could live on, holding its memory. So a local rank ties itself to its controller
at its first line, by two means that need no thread of the rank:

- Linux: ``PR_SET_PDEATHSIG`` with SIGKILL: the kernel kills the rank when the thread
  that started it ends (the launcher starts local ranks from one thread that lives as
  long as its process: ``core.run.job.ranks``).
- Everywhere, and the only means on macOS: a watchdog, a process forked before anything
  else is imported, that waits for the controller's exit (a pidfd on Linux, kqueue's
  ``NOTE_EXIT`` on macOS; a poll where neither exists) and then kills the rank's process
  group, itself with it. It waits for the rank too, and leaves when the rank does.

The launcher passes its pid in ``ENV_CONTROLLER``. Once both means are armed, the rank
checks that its parent is still that pid: a controller that died before is seen by the
check, one that dies after by either means. Remote ranks get no such variable: they end
with their SSH session.

Standard library only, and cheap: it runs before the worker imports anything else.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import signal
import sys
import time
from typing import Any

from core.worker.protocol import ENV_CONTROLLER

_PR_SET_PDEATHSIG = 1
POLL_S = 0.2  # the fallback's pace, where neither a pidfd nor kqueue is available
CONTROLLER_GONE_EXIT = 3  # as when the stdin reader sees the controller close the pipe


def tie_to_controller() -> None:
    """Arm both means for the controller named in the environment, then make sure it
    is still this process's parent; exit at once when it is not. No variable, no tie."""
    value = os.environ.pop(ENV_CONTROLLER, "")  # not for what this rank starts
    if not value.isdigit():
        return
    controller = int(value)
    die_with_parent()
    start_watchdog(controller)
    if os.getppid() != controller:
        with contextlib.suppress(OSError, ValueError):  # its pipe may be gone with it
            sys.stderr.write("macmesh worker: the controller that started this rank is gone\n")
            sys.stderr.flush()
        os._exit(CONTROLLER_GONE_EXIT)


def die_with_parent() -> bool:
    """Linux: SIGKILL to this process when the thread that started it ends. False
    elsewhere, or when the call is refused."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    return bool(prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) == 0)


def start_watchdog(controller: int) -> int:
    """Fork the watchdog of this process (see the module doc); returns its pid once it
    watches both processes, so a controller that dies from then on is seen."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the watchdog: never returns into the rank's code
        try:
            os.close(ready_r)
            _watch(controller, os.getppid(), ready_w)
        finally:
            os._exit(0)
    os.close(ready_w)
    try:
        os.read(ready_r, 1)  # armed (or, should it die first, end of file)
    finally:
        os.close(ready_r)
    return pid


def _watch(controller: int, rank: int, ready: int) -> None:
    """The watchdog's whole life: wait for the first of the two to exit; kill the rank's
    process group when it was the controller."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # Hold none of the rank's pipes: its controller must see them close with the rank.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    waiter = _ExitWaiter([controller, rank])
    os.write(ready, b"1")
    os.close(ready)
    if waiter.first_exit() == controller:
        # The rank leads its own process group (the launcher starts it in a new session):
        # the group is the rank and whatever it started, this watchdog included.
        if os.getpgid(0) == rank:
            os.killpg(rank, signal.SIGKILL)
        else:
            os.kill(rank, signal.SIGKILL)


class _ExitWaiter:
    """Waits for the first of some processes to exit, with what this system offers:
    kqueue (macOS), a pidfd per process (Linux 5.3+), else a poll. Watching starts in
    ``__init__``: a process already gone is seen as exited at once."""

    def __init__(self, pids: list[int], *, poll_only: bool = False) -> None:
        self._pids = pids
        self._parent = os.getppid()  # polled by its pid changing: it may linger as a zombie
        self._gone = [pid for pid in pids if not self._alive(pid)]
        self._fds: dict[int, int] = {}
        self._kqueue: Any = None
        if self._gone or poll_only:
            return
        if sys.platform == "darwin":
            self._watch_kqueue()
        elif hasattr(os, "pidfd_open"):
            self._watch_pidfds()

    if sys.platform == "darwin":

        def _watch_kqueue(self) -> None:
            queue = select.kqueue()
            for pid in self._pids:
                exit_of = select.kevent(
                    pid,
                    filter=select.KQ_FILTER_PROC,
                    flags=select.KQ_EV_ADD,
                    fflags=select.KQ_NOTE_EXIT,
                )
                try:
                    queue.control([exit_of], 0, 0)
                except ProcessLookupError:
                    self._gone.append(pid)
                    return
            self._kqueue = queue

    def _watch_pidfds(self) -> None:
        for pid in self._pids:
            try:
                self._fds[pid] = os.pidfd_open(pid)
            except ProcessLookupError:
                self._gone.append(pid)
                return
            except OSError:  # pidfds refused (an old kernel, a sandbox): poll instead
                self._fds.clear()
                return

    def first_exit(self) -> int:
        """The pid of the first process seen to exit (blocks until one does)."""
        if self._gone:
            return self._gone[0]
        if self._kqueue is not None:
            while True:
                for event in self._kqueue.control(None, 1):
                    if event.ident in self._pids:
                        return int(event.ident)
        if self._fds:
            poller = select.poll()
            for fd in self._fds.values():
                poller.register(fd, select.POLLIN)
            by_fd = {fd: pid for pid, fd in self._fds.items()}
            return by_fd[poller.poll()[0][0]]
        while True:
            for pid in self._pids:
                if not self._alive(pid):
                    return pid
            time.sleep(POLL_S)

    def _alive(self, pid: int) -> bool:
        if pid == self._parent:
            return os.getppid() == pid
        return _exists(pid)


def _exists(pid: int) -> bool:
    """Whether ``pid`` names a process (a zombie still does: the poll's only flaw, and the
    reason pidfds and kqueue come first)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True
