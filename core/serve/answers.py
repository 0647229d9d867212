"""The API's requests, answered over the running session: up to the ranks' batch at once.

Runs on the server's event loop. The session's events arrive on the job's reader threads
and cross to the loop with ``call_soon_threadsafe``; each answer has its own asyncio
queue of its rank-0 ``token`` / ``done`` / ``error`` events. Up to ``max_running``
requests are with the ranks at once (they generate them together, joining and leaving
their batch at token boundaries: ``core.worker.batching``); the rest wait in line, in
order, and the next is sent as soon as one of those running ends. Requests are sent one
after another (each send returns its id before the next is sent), so an early event is
always the one being sent's. A client that leaves cancels its answer: taken out of the
line while it waits, or ended by the ranks at its next token (``Session.cancel_answer``)
while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal, NotRequired, TypeAlias, TypedDict

from core.run.errors import ClusterError
from core.run.job.launcher import JobError
from core.run.session import Session
from core.run.states import RunState
from core.serve.errors import APIError, queue_full, unavailable
from core.serve.queue import QueueFull, WaitingLine
from core.serve.requests import Ask
from core.serve.structured import worker_fields
from core.worker import protocol as p

DEFAULT_WAITING = 16
EARLY_KEPT = 64  # events of a request not registered yet (its ask() still returning)
_ENDED = (RunState.STOPPING, RunState.STOPPED, RunState.FAILED)


class Unavailable(TypedDict):
    """Not a rank's event: the server's own end of an answer the cluster cannot give
    (HTTP ``status``), shaped like an ``error`` event so an answer's readers take both."""

    event: Literal["error"]
    message: str
    status: int
    fatal: bool
    retry_after_s: NotRequired[int]  # a 429's


# What an answer's queue carries: its rank-0 events, or the server's refusal.
AnswerEvent: TypeAlias = p.Token | p.Done | p.Error | Unavailable


class Answer:
    """One request's way through: its events (``events``), who asked, and its end."""

    _numbers = itertools.count(1)

    def __init__(
        self,
        ask: Ask,
        client: str,
        owner: str = "",
        tenant: str | None = None,
        tokens: list[int] | None = None,
    ) -> None:
        self.ask, self.client = ask, client
        self.owner = owner  # whose key: fair shares of the line and the slots
        self.tenant = tenant  # whose prompt cache entries (None: the common ones)
        self.tokens = tokens  # the prompt's ids, made on the controller (None: the ranks')
        self.id = f"{'chatcmpl' if ask.chat else 'cmpl'}-{secrets.token_hex(12)}"
        self.number = next(self._numbers)
        self.created = int(time.time())
        self.events: asyncio.Queue[AnswerEvent] = asyncio.Queue()
        self.request: str | None = None  # the worker's request id, once sent
        self.cancelled = False
        self.ended = asyncio.Event()
        self.started_at: float | None = None
        self.done: p.Done | None = None

    def put(self, event: AnswerEvent) -> None:
        if self.ended.is_set():
            return
        self.events.put_nowait(event)
        if event["event"] in (p.DONE, p.ERROR):
            if event["event"] == p.DONE:
                self.done = event
            self.ended.set()


def failure(event: p.Error | Unavailable, chat: bool = True) -> APIError:
    """An ``error`` event for one answer as the API's refusal (``chat``: the request had
    ``messages``; else a ``prompt``, which a too-long refusal names)."""
    message = event["message"]
    if event.get("code") == p.CONTEXT_LENGTH_EXCEEDED:
        param = "messages" if chat else "prompt"
        return APIError(400, message, param=param, code=p.CONTEXT_LENGTH_EXCEEDED)
    if event.get("status") == 503:
        return unavailable(message)
    if event.get("status") == 429:
        retry = event.get("retry_after_s")
        return APIError(
            429,
            message,
            kind="rate_limit_error",
            code="queue_full",
            headers={"Retry-After": str(retry if isinstance(retry, int) else 1)},
        )
    return APIError(400, message)


class Answerer:
    """The line of answers over ``session`` (start it on the server's loop)."""

    def __init__(
        self,
        session: Session,
        max_waiting: int = DEFAULT_WAITING,
        on_sent: Callable[[str, float, str, str], None] | None = None,
        max_running: int = p.DEFAULT_BATCH,
    ) -> None:
        if max_running < 1:
            raise ValueError("at least one request runs at a time")
        self.session = session
        self.line: WaitingLine[Answer] = WaitingLine(
            max_waiting, owner=lambda answer: answer.owner, on_bumped=self._bumped
        )
        self.max_running = max_running
        self.running: set[Answer] = set()  # with the ranks now
        self._followers: set[asyncio.Task[None]] = set()
        self.served = 0  # answers that reached their end
        self._on_sent = on_sent  # (request, when, client, question), on a pool thread
        self._by_request: dict[str, Answer] = {}
        self._early: dict[str, list[p.Token | p.Done | p.Error]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ended: str | None = None  # why the session can no longer answer
        self._asking = False  # a request is being sent: its first events may come first

    @property
    def depth(self) -> int:
        return self.line.depth

    @property
    def serving(self) -> int:
        """Answers with the ranks now (the running batch, as the controller sees it)."""
        return len(self.running)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.session.event.connect(self._from_thread)
        self.session.state_changed.connect(self._state_from_thread)
        self._task = asyncio.create_task(self._serve_in_order(), name="macmesh-answers")

    async def close(self) -> None:
        self.session.event.disconnect(self._from_thread)
        self.session.state_changed.disconnect(self._state_from_thread)
        self._end_all("The server is stopping.")
        for task in [self._task, *self._followers]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def submit(
        self,
        ask: Ask,
        client: str,
        owner: str = "",
        tenant: str | None = None,
        tokens: list[int] | None = None,
    ) -> Answer:
        """Queue an answer; APIError 429 (with Retry-After) when the line is full or its
        key (``owner``) holds its share of it, 503 when the cluster has stopped."""
        if self._ended is not None:
            raise unavailable(self._ended)
        answer = Answer(ask, client, owner, tenant, tokens)
        try:
            self.line.push(answer)
        except QueueFull as full:
            raise queue_full(full.retry_after_s, full.depth) from None
        self._wake.set()
        return answer

    def cancel(self, answer: Answer) -> None:
        """Its client left: out of the line, or ended by the ranks at the next token.
        Never blocks (it may be called from a cancelled task's clean-up)."""
        if answer.ended.is_set() or answer.cancelled:
            return
        answer.cancelled = True
        if self.line.remove(answer):
            answer.ended.set()
            return
        if answer.request is not None and self._loop is not None:
            self._loop.run_in_executor(None, self._cancel_in_session, answer.request)

    # -- the loop ------------------------------------------------------------------------

    async def _serve_in_order(self) -> None:
        """Send the head of the line whenever fewer than ``max_running`` are running."""
        while True:
            answer = (
                self.line.pop(Counter(a.owner for a in self.running), self.max_running)
                if len(self.running) < self.max_running
                else None
            )
            if answer is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            self.running.add(answer)
            try:
                request = await self._send(answer)
            except BaseException:
                self.running.discard(answer)
                raise
            if request is None:
                self.running.discard(answer)
                continue
            follower = asyncio.create_task(self._follow(answer, request))
            self._followers.add(follower)
            follower.add_done_callback(self._followers.discard)

    async def _send(self, answer: Answer) -> str | None:
        """Hand ``answer`` to the ranks; its request id, or None when it could not go."""
        ask = answer.ask
        started = time.monotonic()
        self._asking = True
        try:
            request = await asyncio.to_thread(
                self.session.ask,
                ask.prompt,
                messages=ask.messages,
                max_tokens=ask.max_tokens,
                chat=ask.chat,
                sampling={**ask.sampling, **worker_fields(ask.constraint, ask.logprobs)},
                **_prompt_fields(answer),
            )
        except (JobError, ClusterError) as error:
            answer.put(_error(f"The cluster cannot answer now: {error}", 503))
            return None
        finally:
            self._asking = False
        answer.request, answer.started_at = request, started
        self._by_request[request] = answer
        early, self._early = self._early.pop(request, []), {}
        for event in early:
            answer.put(event)
        if self._ended is not None:
            answer.put(_error(self._ended, 503))
        if self._on_sent is not None:
            with contextlib.suppress(Exception):
                self._on_sent(request, started, answer.client, ask.question)
        return request

    async def _follow(self, answer: Answer, request: str) -> None:
        """Wait for the answer's end (cancelling it when its client left while it was
        being sent), then free its place for the next in line."""
        try:
            if answer.cancelled and not answer.ended.is_set():
                await asyncio.to_thread(self._cancel_in_session, request)
            await answer.ended.wait()
        finally:
            self._by_request.pop(request, None)
            self.running.discard(answer)
            self._wake.set()
        self.served += 1
        started = answer.started_at or time.monotonic()
        # One place frees every answer time / places: Retry-After follows that.
        self.line.answered_in((time.monotonic() - started) / self.max_running)

    def _bumped(self, answer: Answer) -> None:
        """Its key held more than its share of a full line, and another key came."""
        retry = self.line.retry_after()
        answer.put(
            Unavailable(
                event=p.ERROR,
                message="The cluster's queue is full and this key holds more than half of "
                f"it while others wait; retry in {retry} s.",
                status=429,
                fatal=False,
                retry_after_s=retry,
            )
        )

    def _cancel_in_session(self, request: str) -> None:
        with contextlib.suppress(JobError, ClusterError):
            self.session.cancel_answer(request)

    # -- the session's news (reader threads) → the loop ----------------------------------

    def _from_thread(self, event: p.Event) -> None:
        if event["rank"] != 0:
            return
        if event["event"] == p.ERROR and not event.get("request"):
            return  # a rank's fatal error: the state change says it for every answer
        if event["event"] in (p.TOKEN, p.DONE, p.ERROR):
            self._call(self._route, event)

    def _state_from_thread(self, state: str, detail: str) -> None:
        if RunState(state) in _ENDED:
            self._call(
                self._end_all,
                f"The cluster {'failed' if detail else 'stopped'}"
                + (f": {detail.splitlines()[0]}" if detail else "."),
            )

    def _call(self, function: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
            loop.call_soon_threadsafe(function, *args)

    def _route(self, event: p.Token | p.Done | p.Error) -> None:
        request = event.get("request", "")
        answer = self._by_request.get(request)
        if answer is not None:
            answer.put(event)
            return
        if self._asking and len(self._early) < EARLY_KEPT:  # its ask() is returning
            self._early.setdefault(request, []).append(event)

    def _end_all(self, why: str) -> None:
        self._ended = self._ended or why
        for answer in [*self.line.drain(), *self._by_request.values()]:
            answer.put(_error(why, 503))


def _error(message: str, status: int) -> Unavailable:
    return Unavailable(event=p.ERROR, message=message, status=status, fatal=False)


def _prompt_fields(answer: Answer) -> dict[str, Any]:
    """``Session.ask``'s ``tokens`` and ``tenant``, when the answer has them."""
    fields: dict[str, Any] = {}
    if answer.tokens is not None:
        fields["tokens"] = answer.tokens
    if answer.tenant is not None:
        fields["tenant"] = answer.tenant
    return fields
