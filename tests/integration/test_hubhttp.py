"""huggingface_hub's client over ``http.client`` (core/library/hubhttp.py), on 127.0.0.1:
the fake Hub's bodies arrive whole over kept-alive connections, a connection the server
closed is replaced, failures are httpx2's own exceptions (which huggingface_hub retries),
and a proxy in the environment leaves the library's default client alone."""

from __future__ import annotations

import http.client
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx2
import pytest

import core.library.hubhttp as hubhttp
from core.library.hubhttp import StdlibTransport, client_factory, use_stdlib_transport
from tests.helpers.fake_hub import FakeFile, FakeHub
from tests.helpers.hub_env import hub

__all__ = ["hub"]  # the fixture

WEIGHTS = "model.safetensors"


@pytest.fixture
def served(hub: FakeHub) -> FakeFile:
    file = FakeFile(b"header", 5_000_000, lfs=True)
    hub.add_files("org/m", {"config.json": FakeFile.of("config.json", b"{}"), WEIGHTS: file})
    return file


def test_bodies_arrive_whole_over_one_kept_alive_connection(
    hub: FakeHub, served: FakeFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    connected: list[tuple[str, int]] = []
    connect = http.client.HTTPConnection.connect

    def counted(conn: http.client.HTTPConnection) -> None:
        connected.append((conn.host, conn.port or 0))
        connect(conn)

    monkeypatch.setattr(http.client.HTTPConnection, "connect", counted)
    transport = StdlibTransport()
    with httpx2.Client(transport=transport, follow_redirects=True) as client:
        url = f"{hub.url}/org/m/resolve/main/{WEIGHTS}"  # a 302 to the CDN, then the body
        with client.stream("GET", url) as response:
            assert response.status_code == 200
            body = b"".join(response.iter_bytes())
        assert body == b"header" + bytes(served.size - 6)
        head = client.head(url, follow_redirects=False)
        assert head.status_code == 302 and head.headers["x-linked-size"] == str(served.size)
        ranged = client.get(f"{hub.cdn_url}/cdn/{served.sha256}", headers={"Range": "bytes=2-5"})
        assert ranged.status_code == 206 and ranged.content == b"ader"
        assert client.get(url, follow_redirects=False).status_code == 302
    hub_side = [s for s in hub.served() if s.server == "hub"]
    assert [s.method for s in hub_side] == ["GET", "HEAD", "GET"]
    # 3 requests to the Hub, 2 to the CDN: one connection to each, kept between them.
    hub_port, cdn_port = (int(u.rsplit(":", 1)[1]) for u in (hub.url, hub.cdn_url))
    assert sorted(connected) == sorted([("127.0.0.1", hub_port), ("127.0.0.1", cdn_port)])
    assert transport._idle == {}  # closed with the client


def test_a_body_cut_short_is_a_protocol_error_and_refused_is_a_connect_error(
    hub: FakeHub, served: FakeFile
) -> None:
    hub.cut_once[WEIGHTS] = 0.5
    with httpx2.Client(transport=StdlibTransport()) as client:
        cdn = f"{hub.cdn_url}/cdn/{served.sha256}"
        with (
            client.stream("GET", cdn) as response,
            pytest.raises(httpx2.RemoteProtocolError, match="complete message body"),
        ):
            for _ in response.iter_bytes():
                pass
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        closed.close()  # nothing listens there now
        with pytest.raises(httpx2.ConnectError):
            client.get(f"http://127.0.0.1:{port}/")


class _ClosesAfterEach(BaseHTTPRequestHandler):
    """Answers as if keeping the connection, then closes it: as a server whose idle
    timeout passed."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
        self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def closing_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ClosesAfterEach)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_connection_the_server_closed_is_replaced(closing_server: str) -> None:
    with httpx2.Client(transport=StdlibTransport()) as client:
        assert [client.get(closing_server).text for _ in range(3)] == ["ok", "ok", "ok"]


def test_huggingface_hub_uses_it_unless_a_proxy_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import huggingface_hub
    from huggingface_hub.utils import _http

    for name in [n for n in os.environ if n.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(hubhttp, "_installed", False)
    monkeypatch.setattr(_http, "_GLOBAL_CLIENT_FACTORY", _http.default_client_factory)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    assert use_stdlib_transport() is False
    assert _http._GLOBAL_CLIENT_FACTORY is _http.default_client_factory
    monkeypatch.delenv("HTTPS_PROXY")
    assert use_stdlib_transport() is True
    session = huggingface_hub.get_session()
    assert isinstance(session._transport, StdlibTransport)  # httpx2 keeps it there
    assert session.follow_redirects
    assert session.event_hooks["request"] == [_http.hf_request_event_hook]
    assert client_factory is _http._GLOBAL_CLIENT_FACTORY
    huggingface_hub.close_session()
