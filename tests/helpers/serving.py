"""``macmesh serve --demo`` in a subprocess, on a free loopback port, for tests and
benchmarks: started, waited for ("Serving ... at"), its ranks known, stopped with
SIGTERM (every rank must end)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.helpers.ctrlc import _ranks, gone
from tests.helpers.wait import wait_until

MODEL = "SmolLM2-135M-Instruct-mlx-q4"
QUESTION = "What is the capital of France?"


def free_port() -> int:
    """A port free on 127.0.0.1 now (the server binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    proc: subprocess.Popen
    port: int
    key_file: Path
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    ranks: list[psutil.Process] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def key(self) -> str:
        return self.key_file.read_text().strip()

    def ranks_alive(self) -> bool:
        return bool(self.ranks) and not any(gone([rank]) for rank in self.ranks)

    def request_lines(self) -> list[str]:
        return [line for line in self.out if line.startswith("127.0.0.1 ")]

    def wait_for_request_lines(self, count: int, within: float = 30) -> list[str]:
        """The request lines once there are ``count``: a line is printed after its
        answer is sent, so the client can hold the answer before the line exists."""
        wait_until(lambda: len(self.request_lines()) >= count, within, f"{count} request lines")
        return self.request_lines()

    def stop(self, within: float = 60) -> int:
        """SIGTERM; the exit code once every rank has ended."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(within)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        wait_until(lambda: gone(self.ranks), 15, "every rank to end")
        return code


def _collect(stream, lines: list[str]) -> None:
    lines.extend(line.rstrip("\n") for line in iter(stream.readline, ""))


def start_serving(demo_model: Path, home: Path, *args: str, within: float = 300) -> Served:
    """``macmesh serve --demo`` with its folders in ``home``, once ready."""
    env = dict(
        os.environ,
        MACMESH_CACHE_DIR=str(demo_model.parents[1]),
        MACMESH_DATA_DIR=str(home / "data"),
        MACMESH_LOG_DIR=str(home / "logs"),
        MACMESH_CONFIG_DIR=str(home / "config"),
        HF_HUB_OFFLINE="1",
    )
    return serve_command(["--demo", *args], home, env, within)


def serve_command(args: list[str], home: Path, env: dict[str, str], within: float = 300) -> Served:
    """``macmesh serve ARGS`` on a free loopback port with a key file in ``home``."""
    port, key_file = free_port(), home / "api-key"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gui.cli",
            "serve",
            *args,
            "--port",
            str(port),
            "--api-key-file",
            str(key_file),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    served = Served(proc, port, key_file)
    for stream, lines in ((proc.stdout, served.out), (proc.stderr, served.err)):
        threading.Thread(target=_collect, args=(stream, lines), daemon=True).start()
    try:
        wait_until(
            lambda: any("Serving" in line for line in served.out) or proc.poll() is not None,
            within,
            "macmesh serve to be ready",
        )
        assert proc.poll() is None, "\n".join(served.err)
        served.ranks = _ranks(proc.pid)
    except BaseException:
        served.stop()
        raise
    return served


def ranks_of(served: Served, folder: str) -> list[psutil.Process]:
    """The live worker processes under the server whose command line names ``folder``."""
    found = []
    for child in psutil.Process(served.proc.pid).children(recursive=True):
        try:
            line = " ".join(child.cmdline())
            if "core.worker" in line and folder in line and child.status() != "zombie":
                found.append(child)
        except psutil.Error:
            continue
    return found
