"""The API server under slow and hostile clients (issue 26, items 4, 5, 6, 10, 11, 14),
over a fake job (a real Session and server, no MLX), with raw sockets on 127.0.0.1:
slow heads do not starve keyed requests, a half-sent request is closed after a bound,
both body lengths are refused, the log cannot be forged, every error is in its route's
dialect, a truncated body is no 500, and a stop ends every open stream with its final
event. No traceback reaches stderr for any of it."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.session import Session, simulated_hosts
from core.serve.connections import ConnectionLimits
from core.serve.keys import Gate
from core.serve.server import APIServer, ServerOptions
from tests.gui.fakes import FakeBehaviour, fake_factory
from tests.helpers.wait import wait_until

KEY = "mm-" + "k" * 40
MODEL = "demo"
HI = [{"role": "user", "content": "Hi"}]
LIMITS = ConnectionLimits(head_s=1.5, body_s=1.5, per_client=8, total=16)


class Printed(logging.Handler):
    """What uvicorn and asyncio log (tracebacks included), as it would be printed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@dataclass
class Serving:
    server: APIServer
    session: Session
    capfd: pytest.CaptureFixture[str]
    log: list[str] = field(default_factory=list)
    printed: Printed = field(default_factory=Printed)

    def stderr(self) -> str:
        """Everything the server printed, or logged to be printed, since last asked."""
        said, self.printed.lines = self.printed.lines, []
        return "\n".join([*said, self.capfd.readouterr().err])

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _serve(
    demo_model: Path,
    behaviour: FakeBehaviour,
    capfd: pytest.CaptureFixture[str],
    max_running: int = ServerOptions.max_running,
) -> Iterator[Serving]:
    session = Session(
        read_model_info(demo_model),
        simulated_hosts(demo_facts(2)),
        job_factory=fake_factory(behaviour),
    )
    session.start()
    session.wait_ready(30)
    log: list[str] = []
    server = APIServer(
        session,
        MODEL,
        8192,
        Gate(key=KEY),
        ServerOptions("127.0.0.1", 0, limits=LIMITS, max_running=max_running),
        log=log.append,
    )
    server.start()
    serving = Serving(server, session, capfd, log)
    watched = [logging.getLogger(name) for name in ("uvicorn", "asyncio")]
    for logger in watched:  # after start: uvicorn's Config resets its loggers' handlers
        logger.addHandler(serving.printed)
    try:
        yield serving
    finally:
        server.stop()
        session.stop()
        for logger in watched:
            logger.removeHandler(serving.printed)


@pytest.fixture
def serving(demo_model: Path, capfd: pytest.CaptureFixture[str]) -> Iterator[Serving]:
    yield from _serve(demo_model, FakeBehaviour(token_s=0.01), capfd)


@pytest.fixture
def slow_serving(demo_model: Path, capfd: pytest.CaptureFixture[str]) -> Iterator[Serving]:
    """Answers of six tokens, 0.4 s apart: a stream stays open for seconds; one answer
    with the ranks at a time, so a second one waits in line."""
    yield from _serve(demo_model, FakeBehaviour(token_s=0.4), capfd, max_running=1)


def _keyed() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}"}


def _connect(port: int, data: bytes = b"", source: str | None = None) -> socket.socket:
    """A connection to the server, from ``source`` (another loopback address) if given."""
    sock = socket.create_connection(
        ("127.0.0.1", port), timeout=10, source_address=(source, 0) if source else None
    )
    if data:
        sock.sendall(data)
    return sock


def _read_until_closed(sock: socket.socket, within: float) -> tuple[bytes, bool]:
    """What the server sent, and whether it closed the connection within ``within`` s."""
    got, deadline = b"", time.monotonic() + within
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return got, True
        if not chunk:
            return got, True
        got += chunk
    return got, False


def _no_traceback(text: str) -> None:
    for word in ("Traceback", "CancelledError", "ClientDisconnect", "Exception in ASGI"):
        assert word not in text, text


def _ask(serving: Serving, path: str = "/v1/chat/completions", **extra: object) -> httpx.Response:
    body = {"model": MODEL, "messages": HI, "max_tokens": 16, **extra}
    if path == "/api/chat":
        body = {"model": MODEL, "messages": HI, "stream": False, **extra}
    return httpx.post(f"{serving.url}{path}", json=body, headers=_keyed(), timeout=20)


# -- item 4: slowloris ---------------------------------------------------------------------


def test_slow_heads_with_no_key_do_not_make_keyed_requests_wait(serving: Serving) -> None:
    """Hundreds of connections that send half a head and wait, from two other addresses:
    each attacker's own slow heads are replaced (per client), nobody holds more than the
    total, and a keyed request made meanwhile is answered at once (over the total, the
    addresses that hold the most pay; a flood from the client's own address can only
    push out its own heads, so the attackers are on 127.0.0.2 and 127.0.0.3)."""
    stop, opened, slow = threading.Event(), [0], []

    def slowloris(source: str) -> None:
        while not stop.is_set() and opened[0] < 400:
            with contextlib.suppress(OSError):  # a replaced one may be reset mid-send
                slow.append(
                    _connect(serving.port, b"POST /v1/chat/completions HTTP/1.1\r\nHo", source)
                )
            opened[0] += 1

    attackers = [
        threading.Thread(target=slowloris, args=(source,)) for source in ("127.0.0.2", "127.0.0.3")
    ]
    for attacker in attackers:
        attacker.start()
    try:
        wait_until(lambda: opened[0] >= 100, 30, "100 slow connections")
        for _ in range(5):
            started = time.monotonic()
            answer = _ask(serving)
            assert answer.status_code == 200 and "Paris" in answer.text, answer.text
            assert time.monotonic() - started < 5
        assert serving.server.guard.open <= LIMITS.total
        assert serving.server.guard.replaced > 0
    finally:
        stop.set()
        for attacker in attackers:
            attacker.join(30)
        for sock in slow:
            sock.close()
    _no_traceback(serving.stderr())


def test_a_half_sent_head_or_body_is_closed_after_its_deadline(serving: Serving) -> None:
    head = _connect(serving.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthor")
    body = _connect(
        serving.port,
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
        b"Authorization: Bearer " + KEY.encode() + b'\r\n\r\n{"model":',
    )
    try:
        for sock in (head, body):
            started = time.monotonic()
            got, closed = _read_until_closed(sock, LIMITS.body_s + 10)
            assert closed and got == b"", got
            assert time.monotonic() - started < LIMITS.body_s + 10
        assert serving.server.guard.timed_out >= 2
    finally:
        head.close()
        body.close()
    assert _ask(serving).status_code == 200


def test_a_head_sent_a_byte_at_a_time_is_closed_at_its_deadline_not_kept_alive(
    serving: Serving,
) -> None:
    """The head's deadline runs from its start: trickling bytes does not extend it."""
    head = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    sock = _connect(serving.port)
    started, closed = time.monotonic(), False
    try:
        for byte in head:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.1)
        if not closed:
            _got, closed = _read_until_closed(sock, 1)
    finally:
        sock.close()
    assert closed and time.monotonic() - started < LIMITS.head_s + 5


def test_malformed_requests_by_the_hundred_are_a_line_each_kind_not_a_flood(
    serving: Serving,
) -> None:
    for n in range(60):
        bad = (
            b"NOT HTTP AT ALL\r\n\r\n"
            if n % 2
            else (
                b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                b"Upgrade: websocket\r\n\r\n"
            )
        )
        sock = _connect(serving.port, bad)
        try:
            assert sock.recv(65536).startswith((b"HTTP/1.1 400", b"HTTP/1.1 401"))
        finally:
            sock.close()
    err = serving.stderr()
    _no_traceback(err)
    assert err.count("Invalid HTTP request") <= 1 and err.count("upgrade request") <= 1, err
    assert "WebSocket" not in err and len(err.splitlines()) <= 3, err


# -- item 5: log forging -------------------------------------------------------------------


def test_a_forged_request_line_stays_one_escaped_field_of_one_log_line(serving: Serving) -> None:
    forged = (
        "/x%0a127.0.0.1%20key%20file%20POST%20/v1/chat/completions%20200%20999%20tokens%1b[31mX"
    )
    sock = _connect(serving.port, f"GET {forged} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    try:
        got, _closed = _read_until_closed(sock, 3)
    finally:
        sock.close()
    assert got.startswith(b"HTTP/1.1 404")
    wait_until(lambda: any("/x" in line for line in serving.log), 10, "the log line")
    [line] = [line for line in serving.log if "/x" in line]
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert line.startswith("127.0.0.1 - GET /x%0A127.0.0.1%20key%20file%20POST") and " 404 " in line
    assert "%1B%5B31mX" in line


# -- item 6: smuggling ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "shape"),
    [("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic"), ("/api/chat", "ollama")],
)
def test_content_length_with_transfer_encoding_is_refused_and_nothing_is_smuggled(
    serving: Serving, path: str, shape: str
) -> None:
    hidden = f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\r\n"
    chunked = "0\r\n\r\n" + hidden
    request = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(chunked)}\r\n"
        f"Transfer-Encoding: chunked\r\n\r\n{chunked}"
    )
    sock = _connect(serving.port, request.encode())
    try:
        got, closed = _read_until_closed(sock, 10)
    finally:
        sock.close()
    assert closed, got
    assert got.startswith(b"HTTP/1.1 400") and got.count(b"HTTP/1.1") == 1, got
    error = json.loads(got.split(b"\r\n\r\n", 1)[1])
    _assert_shape(error, shape, "Content-Length and Transfer-Encoding")
    assert MODEL not in got.decode()  # the hidden /v1/models was never answered


# -- item 14: every error in its route's dialect -------------------------------------------


def _assert_shape(body: dict, shape: str, words: str) -> None:
    if shape == "openai":
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
        message = body["error"]["message"]
    elif shape == "anthropic":
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
        message = body["error"]["message"]
    else:
        assert set(body) == {"error"} and isinstance(body["error"], str), body
        message = body["error"]
    assert words in message, body


DEEP = b'{"model": ' + b"[" * 1000 + b"]" * 1000 + b"}"
SURROGATE = (
    b'{"model": "\\ud800", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}'
)
ROUTES = [
    ("/v1/chat/completions", "openai"),
    ("/v1/messages", "anthropic"),
    ("/api/chat", "ollama"),
]


@pytest.mark.parametrize(("path", "shape"), ROUTES)
@pytest.mark.parametrize(
    ("raw", "words"), [(DEEP, "nested too deeply"), (SURROGATE, "lone surrogate")]
)
def test_deep_nesting_and_lone_surrogates_are_400_in_the_routes_dialect(
    serving: Serving,
    path: str,
    shape: str,
    raw: bytes,
    words: str,
) -> None:
    answer = httpx.post(f"{serving.url}{path}", content=raw, headers=_keyed(), timeout=20)
    assert answer.status_code == 400, answer.text
    _assert_shape(answer.json(), shape, words)
    _no_traceback(serving.stderr())


def test_a_tool_calls_arguments_text_nested_deeper_than_json_goes_is_a_400(
    serving: Serving,
) -> None:
    """OpenAI's call arguments are JSON text inside the body: 100,000 levels of it (json's
    RecursionError, past the body's own parse) are a 400 naming the field, not a 500."""
    call = {"id": "c1", "type": "function", "function": {"name": "f"}}
    call["function"]["arguments"] = "[" * 100_000 + "]" * 100_000
    turns = [*HI, {"role": "assistant", "tool_calls": [call]}]
    turns.append({"role": "tool", "tool_call_id": "c1", "content": "ok"})
    answer = _ask(serving, messages=turns)
    assert answer.status_code == 400, answer.text
    _assert_shape(answer.json(), "openai", "function.arguments")
    assert answer.json()["error"]["param"] == "messages[1].tool_calls[0].function.arguments"
    _no_traceback(serving.stderr())


@pytest.mark.parametrize(
    ("method", "path", "status", "shape"),
    [
        ("GET", "/v1/messages", 405, "anthropic"),
        ("GET", "/api/chat", 405, "ollama"),
        ("GET", "/api/nothing", 404, "ollama"),
        ("POST", "/v1/nothing", 404, "openai"),
    ],
)
def test_a_wrong_route_or_method_is_answered_in_the_dialect_of_its_path(
    serving: Serving, method: str, path: str, status: int, shape: str
) -> None:
    answer = httpx.request(method, f"{serving.url}{path}", headers=_keyed(), timeout=20)
    assert answer.status_code == status
    _assert_shape(answer.json(), shape, "No route")


@pytest.mark.parametrize(("path", "shape"), ROUTES)
def test_too_large_and_unauthorized_are_in_the_routes_dialect(
    serving: Serving, path: str, shape: str
) -> None:
    bare = httpx.post(f"{serving.url}{path}", json={"model": MODEL}, timeout=20)
    assert bare.status_code == 401
    _assert_shape(bare.json(), shape, "API key")
    sock = _connect(
        serving.port,
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Length: {100 << 20}\r\n\r\n".encode(),
    )
    try:
        got, _closed = _read_until_closed(sock, 5)
    finally:
        sock.close()
    assert got.startswith(b"HTTP/1.1 413"), got
    _assert_shape(json.loads(got.split(b"\r\n\r\n", 1)[1]), shape, "larger than")


# -- item 11: a truncated body -------------------------------------------------------------


@pytest.mark.parametrize("path", [path for path, _shape in ROUTES])
def test_a_truncated_body_is_no_500_and_no_traceback(serving: Serving, path: str) -> None:
    sock = _connect(
        serving.port,
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n".encode()
        + b'{"model":',
    )
    sock.close()
    wait_until(lambda: any(path in line for line in serving.log), 10, "the request's log line")
    [line] = [line for line in serving.log if path in line]
    assert " 499 " in line and " 500 " not in line, line
    _no_traceback(serving.stderr())
    assert _ask(serving).status_code == 200


# -- item 10: a stream open at stop --------------------------------------------------------


def _stream(serving: Serving, path: str, lines: list[str], first: threading.Event) -> None:
    """Stream an answer from ``path`` into ``lines`` (the status first); ``first`` is set
    once the status line or the first event is in."""
    body: dict = {"model": MODEL, "messages": HI, "max_tokens": 16, "stream": True}
    if path == "/api/chat":
        body = {"model": MODEL, "messages": HI, "stream": True}
    try:
        with httpx.stream(
            "POST", f"{serving.url}{path}", json=body, headers=_keyed(), timeout=30
        ) as response:
            lines.append(str(response.status_code))
            for line in response.iter_lines():
                if line:
                    lines.append(line)
                    first.set()
    except httpx.HTTPError as error:
        lines.append(f"CUT: {error!r}")
    finally:
        first.set()


def _assert_final_event(lines: list[str], shape: str) -> None:
    """The stream's last event is its dialect's error event: "The server is stopping"."""
    assert lines[0] == "200" and len(lines) > 2 and not lines[-1].startswith("CUT"), lines
    if shape == "openai":
        error = json.loads(lines[-1].removeprefix("data: "))["error"]
        assert error["message"] == "The server is stopping." and error["type"] == "server_error"
    elif shape == "anthropic":
        assert lines[-2] == "event: error", lines
        error = json.loads(lines[-1].removeprefix("data: "))
        assert error["type"] == "error" and error["error"]["type"] == "overloaded_error"
        assert error["error"]["message"] == "The server is stopping."
    else:
        assert json.loads(lines[-1]) == {"error": "The server is stopping."}


@pytest.mark.parametrize(("path", "shape"), ROUTES)
def test_at_stop_an_open_stream_gets_its_final_event_and_no_traceback(
    slow_serving: Serving, path: str, shape: str
) -> None:
    """A stream with the ranks and one waiting in line when the server stops: the open
    stream ends with its dialect's error event (not cut), the waiting one is a 503 in its
    own dialect, stop() is prompt, and nothing is printed."""
    (waiting_path, waiting_shape) = next(route for route in ROUTES if route[0] != path)
    open_lines: list[str] = []
    waiting_lines: list[str] = []
    opened, queued = threading.Event(), threading.Event()
    readers = [
        threading.Thread(target=_stream, args=(slow_serving, path, open_lines, opened)),
        threading.Thread(target=_stream, args=(slow_serving, waiting_path, waiting_lines, queued)),
    ]
    readers[0].start()
    assert opened.wait(20) and open_lines[0] == "200"
    readers[1].start()
    wait_until(lambda: slow_serving.server.answers.depth == 1, 10, "a stream waiting")
    started = time.monotonic()
    slow_serving.server.stop()
    assert time.monotonic() - started < 5
    for reader in readers:
        reader.join(10)
    _assert_final_event(open_lines, shape)
    assert waiting_lines[0] == "503", waiting_lines
    _assert_shape(json.loads(waiting_lines[1]), waiting_shape, "The server is stopping.")
    _no_traceback(slow_serving.stderr())


# -- item 4: no accept() traceback flood when files run short ------------------------------

FEW_FILES = 128
SERVE_WITH_FEW_FILES = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, ({FEW_FILES}, {FEW_FILES}))
from psygnal import Signal
from core.serve.keys import Gate
from core.serve.server import APIServer, ServerOptions

class NoSession:  # GET /v1/models needs no cluster
    event = Signal(dict)
    state_changed = Signal(str, str)

server = APIServer(NoSession(), "demo", 8192, Gate(key={KEY!r}), ServerOptions("127.0.0.1", 0))
server.start()
print(server.port, flush=True)
sys.stdin.readline()
server.stop()
print("stopped", flush=True)
"""


def test_more_connections_than_files_leave_keyed_requests_served_and_stderr_quiet() -> None:
    """A server allowed 128 open files, 400 connections that send nothing: it keeps its
    connections under its files, so accept() never fails and a keyed request is served
    at once; stderr holds no traceback (it had hundreds of MB of them)."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE_WITH_FEW_FILES],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    held: list[socket.socket] = []
    try:
        assert proc.stdout is not None and proc.stdin is not None
        port = int(proc.stdout.readline())
        for _ in range(400):
            with contextlib.suppress(OSError):
                held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        for _ in range(3):
            started = time.monotonic()
            answer = httpx.get(f"http://127.0.0.1:{port}/v1/models", headers=_keyed(), timeout=10)
            assert answer.status_code == 200 and answer.json()["data"][0]["id"] == MODEL
            assert time.monotonic() - started < 5
        for sock in held:
            sock.close()
        proc.stdin.write("\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=30)
    finally:
        for sock in held:
            sock.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and "stopped" in out, err
    _no_traceback(err)
    assert len(err) < 2000, err
