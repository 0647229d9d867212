"""Asking a process that may end while it is asked: a child listed a moment ago
(mkdir, cat, a shell between fork and exec) can be gone by the next question. And
tying a helper process (sshd, Xvfb) to the test process's life."""

from __future__ import annotations

import ctypes
import signal
import sys

import psutil


def name_of(process: psutil.Process) -> str:
    """The process's name, or "" when it ended meanwhile."""
    try:
        return process.name()
    except psutil.Error:
        return ""


def command_line(process: psutil.Process) -> str:
    """The process's command line joined by spaces, or "" when it ended meanwhile."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def _prctl() -> object | None:
    """Resolved before any fork: loading a library in a forked child can deadlock."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A ``preexec_fn``, Linux: the child gets SIGTERM when the process that started it
    dies without tearing it down (a killed test run, a timeout)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)  # type: ignore[operator]
