"""huggingface_hub's HTTP client, over the standard library's ``http.client``.

huggingface_hub sends every request through one httpx2 client (``get_session``). Its
default transport (httpcore and h11) parses a response body in pure Python 64 kB at a
time: about three times urllib's CPU per byte, so a download on a fast link is bound by
this Mac's CPU rather than the link (``tests/benchmarks/bench_library.py``).
``set_client_factory`` is the library's documented way to configure that client. Here
the client is built as ``default_client_factory`` builds it (huggingface_hub's request
hook, redirects followed, no timeout unless a call sets one) with one change: its
transport sends each request with ``http.client``, which reads up to 1 MB per call in
C. Everything above the transport is huggingface_hub and httpx2 as they are: requests,
headers, redirects, retries, resumes, errors, decoding.

The transport keeps a few idle connections per host (HTTP/1.1 keep-alive), drops one
the server has closed, and raises httpx2's own exceptions (connect errors, timeouts, a
body cut short) so huggingface_hub retries and resumes as it does with its default.
With a proxy set in the environment, which httpx2 honours and this transport does not,
huggingface_hub's default client stays.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
import urllib.request
from collections.abc import Iterator

import httpx2

READ_BYTES = 1 << 20  # the most one read hands on: a cancel still acts within 1 MB
IDLE_PER_HOST = 8
_IDEMPOTENT = {"GET", "HEAD", "OPTIONS"}

_installed = False
_install_lock = threading.Lock()


def use_stdlib_transport() -> bool:
    """Make huggingface_hub's client use ``StdlibTransport``, once per process (before the
    first request: ``set_client_factory`` closes the current client). False when a proxy
    is set in the environment (the library's default client then stays)."""
    global _installed
    with _install_lock:
        if _installed:
            return True
        if any(urllib.request.getproxies_environment().values()):
            return False
        from huggingface_hub import set_client_factory

        set_client_factory(client_factory)
        _installed = True
        return True


def client_factory() -> httpx2.Client:
    """huggingface_hub's ``default_client_factory`` over ``StdlibTransport``."""
    from huggingface_hub.utils._http import hf_request_event_hook

    return httpx2.Client(
        transport=StdlibTransport(),
        event_hooks={"request": [hf_request_event_hook]},
        follow_redirects=True,
        timeout=None,
    )


Key = tuple[str, str, int]


class StdlibTransport(httpx2.BaseTransport):
    """An httpx2 transport sending HTTP/1.1 with ``http.client``; thread-safe (each
    connection serves one request at a time)."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl = ssl_context or httpx2.create_ssl_context()
        self._idle: dict[Key, list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise httpx2.UnsupportedProtocol(
                f"Request URL has an unsupported protocol '{scheme}://'."
            )
        key = (scheme, url.host, url.port or (443 if scheme == "https" else 80))
        timeouts = request.extensions.get("timeout") or {}
        body = request.read() or None
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        if body is not None and any(k.lower() == "transfer-encoding" for k, _ in headers):
            headers = [(k, v) for k, v in headers if k.lower() != "transfer-encoding"]
            headers.append(("Content-Length", str(len(body))))
        target = url.raw_path.decode("ascii")
        while True:
            conn, reused = self._checkout(key, timeouts.get("connect"))
            if conn.sock is None:
                _connect(conn)
            try:
                conn.sock.settimeout(timeouts.get("write"))
                conn.putrequest(request.method, target, skip_host=True, skip_accept_encoding=True)
                for name, value in headers:
                    conn.putheader(name, value)
                conn.endheaders(body)
            except TimeoutError as error:
                conn.close()
                raise httpx2.WriteTimeout(str(error) or "timed out") from error
            except (OSError, http.client.HTTPException) as error:
                conn.close()
                if reused and request.method in _IDEMPOTENT:
                    continue  # a kept-alive connection the server had closed: a fresh one
                raise httpx2.WriteError(str(error) or type(error).__name__) from error
            try:
                conn.sock.settimeout(timeouts.get("read"))
                response = conn.getresponse()
            except http.client.RemoteDisconnected as error:
                conn.close()
                if reused and request.method in _IDEMPOTENT:
                    continue
                raise httpx2.RemoteProtocolError(
                    "Server disconnected without sending a response."
                ) from error
            except TimeoutError as error:
                conn.close()
                raise httpx2.ReadTimeout(str(error) or "timed out") from error
            except http.client.HTTPException as error:
                conn.close()
                raise httpx2.RemoteProtocolError(str(error) or type(error).__name__) from error
            except OSError as error:
                conn.close()
                raise httpx2.ReadError(str(error) or type(error).__name__) from error
            break
        return httpx2.Response(
            response.status,
            headers=response.getheaders(),
            stream=_Body(self, key, conn, response),
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": response.reason.encode("latin-1", "replace"),
            },
        )

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()

    def _checkout(
        self, key: Key, connect_timeout: float | None
    ) -> tuple[http.client.HTTPConnection, bool]:
        while True:
            with self._lock:
                conns = self._idle.get(key)
                conn = conns.pop() if conns else None
            if conn is None:
                break
            if _still_open(conn):
                return conn, True
            conn.close()
        scheme, host, port = key
        if scheme == "https":
            return http.client.HTTPSConnection(
                host, port, timeout=connect_timeout, context=self._ssl
            ), False
        return http.client.HTTPConnection(host, port, timeout=connect_timeout), False

    def _checkin(self, key: Key, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            conns = self._idle.setdefault(key, [])
            if len(conns) < IDLE_PER_HOST:
                conns.append(conn)
                return
        conn.close()


def _connect(conn: http.client.HTTPConnection) -> None:
    """Open ``conn`` (TLS included) within its timeout, with httpx2's exceptions."""
    try:
        conn.connect()
    except TimeoutError as error:
        conn.close()
        raise httpx2.ConnectTimeout(str(error) or "timed out") from error
    except OSError as error:
        conn.close()
        raise httpx2.ConnectError(str(error) or type(error).__name__) from error


def _still_open(conn: http.client.HTTPConnection) -> bool:
    """An idle connection with nothing to read: a readable one was closed by the server
    (or holds bytes it should not)."""
    sock = conn.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


class _Body(httpx2.SyncByteStream):
    """A response body as it arrives, up to ``READ_BYTES`` a read; the connection goes
    back to the pool once the body is read to its end."""

    def __init__(
        self,
        transport: StdlibTransport,
        key: Key,
        conn: http.client.HTTPConnection,
        response: http.client.HTTPResponse,
    ) -> None:
        self._transport = transport
        self._key = key
        self._conn: http.client.HTTPConnection | None = conn
        self._response = response

    def __iter__(self) -> Iterator[bytes]:
        response = self._response
        try:
            while chunk := response.read1(READ_BYTES):
                yield chunk
        except TimeoutError as error:
            self.close()
            raise httpx2.ReadTimeout(str(error) or "timed out") from error
        except http.client.HTTPException as error:  # a chunked body cut short
            self.close()
            raise httpx2.RemoteProtocolError(_cut(error)) from error
        except OSError as error:
            self.close()
            raise httpx2.ReadError(_cut(error)) from error
        if response.length:  # the server closed before the length it announced
            self.close()
            raise httpx2.RemoteProtocolError(
                "peer closed connection without sending complete message body "
                f"({response.length} bytes missing)"
            )
        response.close()  # its file object only (the socket is the connection's): idle
        conn, self._conn = self._conn, None
        if conn is not None:
            if response.will_close:
                conn.close()
            else:
                self._transport._checkin(self._key, conn)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()  # a body not read to its end: the connection cannot serve another


def _cut(error: BaseException) -> str:
    return f"the connection broke mid-body: {str(error) or type(error).__name__}"
