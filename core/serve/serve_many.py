"""``macmesh serve`` with several models (issue 37): the front (``core.serve.multiserver``)
on uvicorn, on its own thread and loop, the models' registry (``core.serve.models``) on
that loop. ``ManyServer.start`` binds, serves, then loads the models that load at start
(one line per one that fails; the others serve); ``stop`` ends every model's answers and
ranks, then the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

import uvicorn

from core.serve.connections import (
    ConnectionGuard,
    ConnectionLimits,
    guarded_protocol,
    quiet_accept_errors,
    quiet_client_warnings,
)
from core.serve.models import ModelRegistry
from core.serve.multiserver import create_front
from core.serve.server import FLUSH_WITHIN_S, LISTEN_QUEUE, bind, serve_on_thread

T = TypeVar("T")
STOP_WITHIN_S = 30.0  # every model's ranks stopped, then the server


class ManyServer:
    """The front and its registry at ``host:port`` (0: any free port)."""

    def __init__(
        self,
        registry: ModelRegistry,
        host: str = "127.0.0.1",
        port: int = 8080,
        fallback: Any = None,
    ) -> None:
        """``fallback``: an ASGI app for every path the front has not (the window's)."""
        self.registry, self.host, self.port = registry, host, port
        self.fallback = fallback
        self.guard = ConnectionGuard(ConnectionLimits().within_files())
        self._server: _FrontServer | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def address(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> list[str]:
        """Serve, then load the models that load at start; the lines of those that
        could not (the others serve)."""
        self._socket = bind(self.host, self.port)
        self.port = int(self._socket.getsockname()[1])
        config = uvicorn.Config(
            create_front(self.registry, self.fallback),
            http=guarded_protocol(self.guard),
            ws="none",
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
            server_header=False,
            limit_concurrency=None,
            backlog=max(8, self.guard.limits.total // 4),
        )
        quiet_client_warnings()
        server = _FrontServer(config, self.registry)
        self._server = server
        self._thread = serve_on_thread(server, self._socket, self.stop)
        return self.call(self.registry.load_initial())

    def call(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``work`` on the server's loop and wait for its result (any thread)."""
        assert self._server is not None and self._server.loop is not None
        future: Future[T] = asyncio.run_coroutine_threadsafe(work, self._server.loop)
        return future.result(timeout)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(STOP_WITHIN_S)
            if self._thread.is_alive() and self._server is not None:
                self._server.force_exit = True
                self._thread.join(5)
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.close()
        # Whatever the loop could not stop (it died early): stopped here.
        for entry in self.registry.entries.values():
            if entry.session is not None and not entry.spec.pinned:
                entry.session.stop()
        self._thread = self._server = self._socket = None


class _FrontServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, registry: ModelRegistry) -> None:
        super().__init__(config)
        self.registry = registry
        self.loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self.loop.set_exception_handler(quiet_accept_errors(self.registry.settings.log))
        await self.registry.start()
        await super().startup(sockets)
        for sock in sockets or []:
            sock.listen(LISTEN_QUEUE)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for listening in getattr(self, "servers", []):
            listening.close()
        await self.registry.close()
        connections = self.server_state.connections
        for connection in list(connections):
            connection.shutdown()
        deadline = time.monotonic() + FLUSH_WITHIN_S
        while connections and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for connection in list(connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()
        await super().shutdown(sockets)
