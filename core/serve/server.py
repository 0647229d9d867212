"""The API server: uvicorn on a socket MacMesh binds itself (a taken port is one clear
line, not uvicorn's exit), on its own thread with its own event loop, stopped cleanly:
every open answer ends with its dialect's final event before the connections close, so
no stream is cut and no task is cancelled mid-answer (a CancelledError traceback).

Slow and hostile clients are bounded by ``connections`` (deadlines, connection limits).

Exposure: on loopback a key is required unless the person turned that off; on any other
address (sharing on the network) a key is always required.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from core.run.job.launcher import JobSpec
from core.run.measure.telemetry import Telemetry
from core.run.session import Session
from core.serve.answers import DEFAULT_WAITING, Answerer
from core.serve.app import Served
from core.serve.connections import (
    ConnectionGuard,
    ConnectionLimits,
    guarded_protocol,
    quiet_accept_errors,
    quiet_client_warnings,
)
from core.serve.keys import Gate
from core.serve.metrics import ServeMetrics
from core.serve.prompts import PromptMaker
from core.serve.records import ApiRecords
from core.serve.routes import create_app
from core.worker import protocol as p

START_WITHIN_S = 20.0
STOP_WITHIN_S = 5.0
LISTEN_QUEUE = 1024  # connections the kernel holds until they are accepted
FLUSH_WITHIN_S = 1.0  # for open streams to send their final event, at stop


class ServeError(Exception):
    """The server cannot start; the message says why and what to do."""


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@dataclass
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 8080  # 0: any free port
    max_waiting: int = DEFAULT_WAITING
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    # Requests with the ranks at once: the job's batch (``for_job`` takes JobSpec.batch).
    max_running: int = p.DEFAULT_BATCH
    # GET /metrics without a key (a scraper in a server room); the API itself keeps its key.
    metrics_without_key: bool = False
    # One prompt cache for every key (a single-user setup) instead of one per key.
    shared_prompt_cache: bool = False

    @classmethod
    def for_job(
        cls,
        spec: JobSpec,
        host: str = "127.0.0.1",
        port: int = 8080,
        *,
        max_waiting: int = DEFAULT_WAITING,
        metrics_without_key: bool = False,
        shared_prompt_cache: bool = False,
    ) -> ServerOptions:
        """The options to serve the job ``spec`` runs: as many requests with the ranks at
        once as they batch (``spec.batch``, the one setting): never more, or the rest
        would wait inside the ranks out of the queue's sight, and never fewer, or a batch
        slot would idle while requests wait."""
        return cls(
            host,
            port,
            max_waiting,
            max_running=spec.batch,
            metrics_without_key=metrics_without_key,
            shared_prompt_cache=shared_prompt_cache,
        )


class APIServer:
    """Serves ``session`` (a job started, or starting) at ``options``' address."""

    def __init__(
        self,
        session: Session,
        model: str,
        context: int | None,
        gate: Gate,
        options: ServerOptions | None = None,
        log: Callable[[str], None] = lambda line: None,
        on_sent: Callable[[str, float, str, str], None] | None = None,
        telemetry: Telemetry | None = None,
        on_calls: Callable[[str, list[dict[str, Any]]], None] | None = None,
    ) -> None:
        """``telemetry``: the window's, already fed from ``session`` (one set of numbers
        for its card, its chat and what the API keeps); headless, the server's own.
        ``on_calls``: an answer's tool calls (its request id), for the window's chat."""
        self.options = options or ServerOptions()
        self._telemetry = telemetry
        if gate.open and not is_loopback(self.options.host):
            raise ServeError(
                f"Sharing on the network ({self.options.host}) always needs an API key; "
                "keys can only be turned off on 127.0.0.1."
            )
        self.records: ApiRecords | None = None  # every answer kept, while serving
        self._on_sent = on_sent
        self.answers = Answerer(
            session, self.options.max_waiting, self._sent, self.options.max_running
        )
        self.metrics = ServeMetrics(
            self.answers, lambda: self.records.telemetry if self.records else None
        )
        self.served = Served(
            model,
            context,
            gate,
            self.answers,
            log,
            self.metrics,
            metrics_without_key=self.options.metrics_without_key,
            prompts=PromptMaker(_model_folder(session), context),
            shared_prompt_cache=self.options.shared_prompt_cache,
            on_calls=on_calls,
        )
        self.guard = ConnectionGuard(self.options.limits.within_files())
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.port = self.options.port

    @property
    def address(self) -> str:
        host = self.options.host
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _sent(self, request: str, started: float, client: str, question: str) -> None:
        """On a pool thread: a request went to the ranks (kept once answered)."""
        if self.records is not None:
            self.records.sent(request, started, client)
        if self._on_sent is not None:
            self._on_sent(request, started, client, question)

    def start(self) -> None:
        """Bind, then serve on a thread; returns once connections are accepted."""
        self._socket = bind(self.options.host, self.options.port)
        if self.served.prompts is not None:
            self.served.prompts.start()
        self.records = ApiRecords(self.answers.session, self.metrics.answered, self._telemetry)
        self.port = int(self._socket.getsockname()[1])
        config = uvicorn.Config(
            create_app(self.served),
            http=guarded_protocol(self.guard),
            ws="none",  # the API has no WebSocket route
            log_config=None,  # uvicorn's records go where MacMesh's go; logging untouched
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=2,
            server_header=False,
            limit_concurrency=None,  # the guard bounds connections; slow heads cannot starve
            backlog=max(8, self.guard.limits.total // 4),  # accepts at once (files too)
        )
        quiet_client_warnings()
        server = _Server(config, self.served)
        self._server = server
        self._thread = serve_on_thread(server, self._socket, self.stop)

    def stop(self) -> None:
        """Stop accepting, end every open answer with its final event, close, join."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(STOP_WITHIN_S + 3)
            if self._thread.is_alive() and self._server is not None:
                self._server.force_exit = True
                self._thread.join(STOP_WITHIN_S)
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.close()
        if self.records is not None:
            self.records.close()
            self.records = None
        self._thread = self._server = self._socket = None


class _Server(uvicorn.Server):
    """uvicorn's server, stopping in the API's order: no new connection; every open answer
    ended ("The server is stopping", a 503 in each dialect) so streams send their final
    event; then whoever is left (a client not reading, a half-sent body) is closed, so
    uvicorn's graceful wait never has to cancel a task mid-answer."""

    def __init__(self, config: uvicorn.Config, served: Served) -> None:
        super().__init__(config)
        self.served = served

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(quiet_accept_errors(self.served.log))
        await super().startup(sockets)
        for sock in sockets or []:
            # uvicorn's backlog is both the kernel's queue and how many asyncio accepts in
            # one go (kept small: each takes a file); the kernel's queue can be long.
            sock.listen(LISTEN_QUEUE)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for listening in getattr(self, "servers", []):
            listening.close()
        await self.served.answers.close()
        connections = self.server_state.connections
        for connection in list(connections):
            connection.shutdown()  # idle ones close; busy ones close once answered
        deadline = time.monotonic() + FLUSH_WITHIN_S
        while connections and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for connection in list(connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()
        await super().shutdown(sockets)


def serve_on_thread(
    server: uvicorn.Server, sock: socket.socket, stop: Callable[[], None]
) -> threading.Thread:
    """``server`` on its own thread over ``sock``, once it has started; if it does not
    within START_WITHIN_S, ``stop()`` and ServeError."""
    sockets = [sock]
    thread = threading.Thread(
        target=lambda: server.run(sockets=sockets), name="macmesh-api", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + START_WITHIN_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            stop()
            raise ServeError("The API server did not start (see the log above).")
        time.sleep(0.02)
    return thread


def _model_folder(session: Session) -> Path | None:
    """The model's folder on this Mac, where its tokenizer is (None: not known here)."""
    info = getattr(session, "info", None)
    folder = getattr(info, "path", None)
    return folder if isinstance(folder, Path) and folder.is_dir() else None


def bind(host: str, port: int) -> socket.socket:
    """A listening socket at ``host:port``; ServeError in one line when it cannot be."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise ServeError(
            f"Cannot serve on {host}: {error.strerror}. Name an address of this Mac."
        ) from None
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as error:
        sock.close()
        why = error.strerror or str(error)
        fix = "choose another port (--port)" if port else "name an address of this Mac"
        raise ServeError(f"Cannot serve on {host}:{port}: {why}; {fix}.") from None
    sock.setblocking(False)
    return sock
