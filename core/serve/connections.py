"""Slow and hostile clients at the connection level, on uvicorn's own h11 protocol:
deadlines for a request's head and body, and a bound on open connections per client
address and in total. Nothing here parses HTTP: h11 does, and its state says which
part of a request a connection is in.

uvicorn alone waits forever for a head that never ends and keeps every connection it
accepts, so thousands of slow senders (slowloris) hold the server's files, keyed
requests time out, and accept() fails with EMFILE in a flood of asyncio tracebacks.
Here:

- a request's head must arrive within ``head_s`` of its connection (or of the answer
  before it, on a kept-alive connection), and its body within ``body_s`` of its head;
  a connection that misses either is closed (the route sees the client leave);
- a client address holds at most ``per_client`` connections and the server ``total``;
  a new connection over either bound takes the place of the oldest one still sending
  its head: over ``per_client`` the client's own, over ``total`` one of the client that
  holds the most connections, so a flood of slow heads from some addresses cannot
  starve another that sends its request at once (even one whose head is accepted but
  not read yet, while the loop accepts the flood). A newcomer is refused only when
  there is nobody to replace;
- ``total`` stays below the process's open-file limit, and an accept() that still runs
  out of files is one line, at most once a minute, not a traceback per attempt; so are
  uvicorn's warnings about a client's malformed request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

WANTED_FILES = 8192  # the open-file limit asked for (macOS shells start at 256)
ACCEPT_SAID_EVERY_S = 60.0
# uvicorn's warnings about what a client sent: one line each per ACCEPT_SAID_EVERY_S
CLIENT_WARNINGS = ("Invalid HTTP request received.", "Unsupported upgrade request.")
# its advice to install a WebSocket library: the API has no WebSocket route (ws="none")
NEVER_SAID = ("No supported WebSocket library",)


@dataclass(frozen=True)
class ConnectionLimits:
    head_s: float = 10.0  # request line and headers, from the connection (or last answer)
    body_s: float = 30.0  # the whole body, from the head (8 MB at 270 KB/s)
    per_client: int = 100  # open connections of one client address
    total: int = 1000  # open connections in all (lowered to half the open-file limit)

    def within_files(self) -> ConnectionLimits:
        """These limits with ``total`` below half the process's open-file limit (raised
        first, when the hard limit allows), so accept() never runs out of files."""
        files = raise_open_file_limit()
        total = max(8, min(self.total, files // 2))
        return ConnectionLimits(self.head_s, self.body_s, min(self.per_client, total), total)


def raise_open_file_limit(wanted: int = WANTED_FILES) -> int:
    """The soft open-file limit, raised toward ``wanted`` when the hard limit allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return wanted if soft == resource.RLIM_INFINITY else int(soft)


class ConnectionGuard:
    """Who is connected: per client address and in all, and which connections are still
    sending a head (oldest first), the ones a newcomer may replace. One per server, used
    on its event loop only."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.refused = 0  # connections closed on arrival: no room and nobody to replace
        self.replaced = 0  # slow heads closed to make room for a newcomer
        self.timed_out = 0  # heads or bodies that missed their deadline
        self._open: dict[GuardedH11Protocol, str] = {}
        self._per_client: dict[str, int] = {}
        self._heads: dict[GuardedH11Protocol, None] = {}  # insertion order: oldest first
        self._heads_of: dict[str, dict[GuardedH11Protocol, None]] = {}

    @property
    def open(self) -> int:
        return len(self._open)

    def admit(self, connection: GuardedH11Protocol) -> bool:
        """Room for ``connection`` (replacing a slow head if needed); False: refuse it."""
        host, limits = connection.host, self.limits
        if self._per_client.get(host, 0) >= limits.per_client and not self._replace(
            self._heads_of.get(host, {})
        ):
            self.refused += 1
            return False
        if len(self._open) >= limits.total and not self._replace(self._heads_of_the_most()):
            self.refused += 1
            return False
        self._open[connection] = host
        self._per_client[host] = self._per_client.get(host, 0) + 1
        return True

    def release(self, connection: GuardedH11Protocol) -> None:
        """``connection`` is closed (or closing): its room is free. Idempotent."""
        host = self._open.pop(connection, None)
        if host is None:
            return
        self.answering(connection)
        left = self._per_client[host] - 1
        if left:
            self._per_client[host] = left
        else:
            del self._per_client[host]

    def reading_head(self, connection: GuardedH11Protocol) -> None:
        """``connection`` waits for a head: a newcomer may replace it (newest last)."""
        if connection not in self._open:
            return
        self.answering(connection)
        self._heads[connection] = None
        self._heads_of.setdefault(connection.host, {})[connection] = None

    def answering(self, connection: GuardedH11Protocol) -> None:
        """``connection`` has sent its head: it is no longer replaceable."""
        self._heads.pop(connection, None)
        mine = self._heads_of.get(connection.host)
        if mine is not None:
            mine.pop(connection, None)
            if not mine:
                del self._heads_of[connection.host]

    def _heads_of_the_most(self) -> dict[GuardedH11Protocol, None]:
        """The heads of the client addresses that hold the most connections (of those
        with a head to replace), oldest first: who pays for room over the total."""
        if not self._heads_of:
            return {}
        most = max(self._per_client[host] for host in self._heads_of)
        return {c: None for c in self._heads if self._per_client[c.host] == most}

    def _replace(self, heads: dict[GuardedH11Protocol, None]) -> bool:
        """Close the oldest head that has sent part of itself (a slow sender's), else the
        oldest still silent: a request whose head is in flight, not read yet while the
        loop accepts a storm of connections, is never the first to go."""
        victim = next((c for c in heads if c.heard), None) or next(iter(heads), None)
        if victim is None:
            return False
        self.replaced += 1
        victim.drop()
        return True


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the guard's admission and the head and body deadlines.
    ``guard`` is set on a subclass made per server (``guarded_protocol``)."""

    guard: ClassVar[ConnectionGuard]

    host: str
    heard: bool  # part of the head being read has arrived
    _phase: str
    _deadline: asyncio.TimerHandle | None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self.host = self.client[0] if self.client else "?"
        self.heard, self._phase, self._deadline = False, "", None
        if not self.guard.admit(self):
            self.transport.abort()
            return
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._clear_deadline()
        self.guard.release(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.heard = True
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def drop(self) -> None:
        """Close now (replaced by a newcomer, or a deadline passed); its room is free at
        once, before the transport reports the loss."""
        self._clear_deadline()
        self.guard.release(self)
        self.transport.abort()

    @property
    def reading_body(self) -> bool:
        return self._phase == "body"

    # -- the deadline of the part of the request being read -------------------------------

    def _follow(self) -> None:
        """Arm the deadline of what h11 says the client is sending now."""
        if self.transport.is_closing():
            self._clear_deadline()
            return
        state = self.conn.their_state
        phase = "head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else "answer"
        if phase == self._phase:
            return  # the deadline runs from the part's start, not from its last byte
        self._phase = phase
        self._clear_deadline()
        if phase == "head":
            self.heard = False  # a kept-alive connection's next head: nothing of it yet
            self.guard.reading_head(self)
            self._deadline = self.loop.call_later(self.guard.limits.head_s, self._too_slow)
        else:
            self.guard.answering(self)
            if phase == "body":
                self._deadline = self.loop.call_later(self.guard.limits.body_s, self._too_slow)

    def _too_slow(self) -> None:
        self._deadline = None
        self.guard.timed_out += 1
        self.drop()

    def _clear_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None


def guarded_protocol(guard: ConnectionGuard) -> type[GuardedH11Protocol]:
    """The protocol class for one server (uvicorn makes one instance per connection)."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"guard": guard})


def quiet_accept_errors(
    say: Callable[[str], None], every_s: float = ACCEPT_SAID_EVERY_S
) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """A loop exception handler: accept() out of files or memory (asyncio logs each
    attempt with a traceback) is one line at most every ``every_s``; the rest as usual."""
    said = [-every_s]

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if str(context.get("message", "")).startswith("socket.accept() out of system resource"):
            now = time.monotonic()
            if now - said[0] >= every_s:
                said[0] = now
                error = context.get("exception")
                why = getattr(error, "strerror", None) or str(error)
                say(f"The API server cannot accept more connections now ({why}); it retries.")
            return
        loop.default_exception_handler(context)

    return handle


class ClientWarningsFilter(logging.Filter):
    """uvicorn warns once per malformed request; a hostile client sends millions. Each
    such warning passes at most once every ``every_s``; every other record passes."""

    def __init__(self, every_s: float = ACCEPT_SAID_EVERY_S) -> None:
        super().__init__()
        self.every_s = every_s
        self._said: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith(NEVER_SAID):
            return False
        kind = next((start for start in CLIENT_WARNINGS if message.startswith(start)), None)
        if kind is None:
            return True
        now = time.monotonic()
        if now - self._said.get(kind, -self.every_s) < self.every_s:
            return False
        self._said[kind] = now
        return True


def quiet_client_warnings(logger: logging.Logger | None = None) -> None:
    """Put one ``ClientWarningsFilter`` on uvicorn's error logger (idempotent)."""
    logger = logger or logging.getLogger("uvicorn.error")
    if not any(isinstance(known, ClientWarningsFilter) for known in logger.filters):
        logger.addFilter(ClientWarningsFilter())
