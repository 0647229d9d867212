"""Ctrl-C at a chosen stage of the real ``macmesh`` command, in a subprocess.

A stage is reached deterministically by holding it: the command runs under a small
driver (``DRIVER``) that lets the real step run, then holds there, saying so on stderr
(``test: holding <stage>``), until the SIGINT the test sends. A copy is held inside a
copying thread, after its first chunk and until the session is cancelled: so the test
proves that a Ctrl-C on the main thread cancels the copy threads (they stop between
chunks), not just that the main thread returns.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field

import psutil

from tests.helpers.wait import wait_until

DRIVER = r"""
import sys, time
from core.model import demo_model
from core.remote import modelcopy
from core.run import session as session_module
from gui.cli import main

hold, argv = sys.argv[1], sys.argv[2:]


def holding(stage):
    sys.stderr.write(f"test: holding {stage}\n")
    sys.stderr.flush()


def hold_here(stage):
    holding(stage)
    while True:  # until Ctrl-C
        time.sleep(0.02)


def after(owner, name):
    real = getattr(owner, name)

    def held(*args, **kwargs):
        result = real(*args, **kwargs)
        hold_here(hold)
        return result

    setattr(owner, name, held)


real_init = session_module.Session.__init__


def init(self, *args, **kwargs):
    real_init(self, *args, **kwargs)
    held = []

    def on_progress(progress):  # on a copying thread, after a chunk went out
        if held or progress.phase != "copying":
            return
        if not 0 < progress.bytes_done < progress.bytes_total:
            return
        held.append(progress)
        holding("copy")
        deadline = time.monotonic() + 120
        while not self.cancelled and time.monotonic() < deadline:
            time.sleep(0.02)

    if hold == "copy":
        self.copy_progress.connect(on_progress)


session_module.Session.__init__ = init
modelcopy.PROGRESS_EVERY_S = 0.0  # a progress report after every chunk
steps = {
    "probe": (session_module.Session, "probe"),
    "plan": (session_module.Session, "make_plan"),
    "preflight": (session_module.Session, "preflight"),
    "conversion": (demo_model, "_write_weights"),
    "loading": (session_module.Session, "launch"),
    "generation": (session_module.Session, "ask"),
}
if hold in steps:
    after(*steps[hold])
sys.exit(main(argv))
"""


@dataclass
class Interrupted:
    """What the command said and did once interrupted."""

    returncode: int
    stdout: str
    stderr: str
    ranks: list[psutil.Process] = field(default_factory=list)  # its local ranks at Ctrl-C

    @property
    def macmesh_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("macmesh:")]


def interrupt_at(
    hold: str, argv: list[str], env: dict[str, str], within: float = 240
) -> Interrupted:
    """Run ``macmesh argv`` holding stage ``hold``; once held, SIGINT it and wait for it
    to end (``within`` seconds for each)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, hold, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    out: list[str] = []
    err: list[str] = []
    readers = [
        threading.Thread(target=lambda: out.extend(iter(proc.stdout.readline, "")), daemon=True),
        threading.Thread(target=lambda: err.extend(iter(proc.stderr.readline, "")), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        marker = f"test: holding {hold}\n"
        wait_until(lambda: marker in err or proc.poll() is not None, within, f"the {hold} stage")
        assert marker in err, f"the command ended before {hold}:\n{''.join(err)}"
        ranks = _ranks(proc.pid)
        os.kill(proc.pid, signal.SIGINT)
        returncode = proc.wait(within)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for reader in readers:
        reader.join(10)
    return Interrupted(returncode, "".join(out), "".join(err), ranks)


def _ranks(pid: int) -> list[psutil.Process]:
    """The worker processes ``pid`` started on this machine (not what a worker itself
    forks: a child caught between fork and exec still shows the worker's command line)."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "core.worker" in child.cmdline():
                found.append(child)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    pids = {process.pid for process in found}
    return [process for process in found if _parent(process) not in pids]


def _parent(process: psutil.Process) -> int | None:
    try:
        return process.ppid()
    except psutil.NoSuchProcess:
        return None


def gone(processes: list[psutil.Process]) -> bool:
    """Whether every one of ``processes`` has ended (a zombie has)."""
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True
