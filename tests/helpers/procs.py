"""Asking a process that may end while it is asked: a child listed a moment ago
(mkdir, cat, a shell between fork and exec) can be gone by the next question."""

from __future__ import annotations

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
