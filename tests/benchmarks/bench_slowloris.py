"""Slowloris against the API server (issue 26, item 4): a server allowed 1,024 open files
(a stand-in session: ``GET /v1/models`` needs no job), N connections from 127.0.0.1 that
send half a head and wait. Measures the keyed requests' latency while they hold, how long
a half-sent request stays open, and the bytes the server wrote to stderr.

    .venv/bin/python -m tests.benchmarks.bench_slowloris [N]   (one JSON document; N=2100)

Before issue 26's fix: every keyed request a ReadTimeout after 20 s, the half-sent request
open after 40 s, 198 MB of accept() tracebacks on stderr.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

KEY = "mm-" + "k" * 40
FILES = 1024
SERVER = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, ({FILES}, {FILES}))
from psygnal import Signal
from core.serve.keys import Gate
from core.serve.server import APIServer, ServerOptions

class NoSession:
    event = Signal(dict)
    state_changed = Signal(str, str)

server = APIServer(NoSession(), "demo", 8192, Gate(key={KEY!r}), ServerOptions("127.0.0.1", 0))
server.start()
print(server.port, flush=True)
sys.stdin.readline()
server.stop()
"""


def bench_slowloris(slow: int = 2100) -> dict[str, Any]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.stdout is not None and proc.stdin is not None and proc.stderr is not None
    stderr_bytes = [0]

    def count(stream: Any) -> None:
        for line in stream:
            stderr_bytes[0] += len(line)

    counter = threading.Thread(target=count, args=(proc.stderr,), daemon=True)
    counter.start()
    held: list[socket.socket] = []
    result: dict[str, Any] = {"slow_connections": slow, "files": FILES}
    try:
        port = int(proc.stdout.readline())
        started, failed = time.monotonic(), 0
        for _ in range(slow):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=3)
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHo")
                held.append(sock)
            except OSError:
                failed += 1
        result["open_s"], result["connect_failed"] = time.monotonic() - started, failed
        latencies: list[float | str] = []
        for _ in range(5):
            started = time.monotonic()
            try:
                answer = httpx.get(
                    f"http://127.0.0.1:{port}/v1/models",
                    headers={"Authorization": f"Bearer {KEY}"},
                    timeout=20,
                )
                latencies.append(
                    round(time.monotonic() - started, 3)
                    if answer.status_code == 200
                    else str(answer.status_code)
                )
            except httpx.HTTPError as error:
                latencies.append(type(error).__name__)
        result["keyed_request_s"] = latencies
        half = socket.create_connection(("127.0.0.1", port), timeout=60)
        half.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
        half.settimeout(40)
        started = time.monotonic()
        try:
            half.recv(10)
            result["half_sent_closed_after_s"] = round(time.monotonic() - started, 1)
        except OSError:
            result["half_sent_closed_after_s"] = f"open after {time.monotonic() - started:.0f} s"
        half.close()
    finally:
        for sock in held:
            sock.close()
        if proc.poll() is None:
            proc.stdin.write("\n")
            proc.stdin.flush()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    counter.join(5)
    result["server_stderr_bytes"] = stderr_bytes[0]
    return result


if __name__ == "__main__":
    print(json.dumps(bench_slowloris(int(sys.argv[1]) if len(sys.argv) > 1 else 2100)))
