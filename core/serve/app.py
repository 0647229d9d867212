"""The HTTP routes (Starlette): OpenAI's ``/v1/models``, ``/v1/chat/completions`` and
``/v1/completions``, with their streaming; every refusal in the error shape of its
route's dialect (``dialects.error_body``), a 500 included.

Nothing here parses HTTP (uvicorn does); a client that leaves is noticed by listening for
the ASGI ``http.disconnect`` while it waits or streams, and cancels its answer; one that
leaves while its body is read (a truncated body) is logged as gone, never a 500.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from core.serve import shaping
from core.serve.answers import Answer, Answerer, AnswerEvent, failure
from core.serve.dialects import error_body
from core.serve.errors import APIError, unauthorized
from core.serve.keys import Gate
from core.serve.metrics import CONTENT_TYPE, ServeMetrics
from core.serve.prompts import PromptMaker
from core.serve.requests import Ask, chat_request, completion_request, parse_json
from core.serve.structured import parsed
from core.worker import protocol as p

MAX_BODY = 8 << 20  # a request body larger than this is refused (413)
PARSE_ON_LOOP = 256 << 10  # a larger body is parsed on a thread, off the event loop
LEFT = 499  # the status logged for a client that left before its answer


@dataclass
class Served:
    """What the server is serving, for its routes."""

    model: str
    context: int | None
    gate: Gate
    answers: Answerer
    log: Callable[[str], None] = lambda line: None
    metrics: ServeMetrics | None = None
    metrics_without_key: bool = False  # GET /metrics open to anyone who reaches the port
    # The prompt made here (template, size, token ids); None: the ranks make it from text.
    prompts: PromptMaker | None = None
    # One prompt cache for every key (--shared-prompt-cache), instead of one per key.
    shared_prompt_cache: bool = False
    # The tool calls an answer made (its worker request id; each {name, arguments}).
    on_calls: Callable[[str, list[dict[str, Any]]], None] | None = None


class API:
    def __init__(self, served: Served) -> None:
        self.s = served

    async def models(self, request: Request) -> Response:
        self.client(request)
        return JSONResponse(shaping.models_list(self.s.model, shaping.now()))

    async def metrics(self, request: Request) -> Response:
        """The figures in Prometheus's text format (``core.serve.metrics``)."""
        if not self.s.metrics_without_key:
            self.client(request)
        if self.s.metrics is None:
            raise APIError(404, "This server keeps no metrics.")
        return Response(self.s.metrics.exposition(), media_type=CONTENT_TYPE)

    async def chat(self, request: Request) -> Response:
        client = self.client(request)
        body = await read_json(request)
        ask = await parsed(
            chat_request, body, self.s.model, self.s.context
        )  # a schema: off the loop
        return await self.answer(request, ask, client)

    async def completions(self, request: Request) -> Response:
        client = self.client(request)
        body = await read_json(request)
        ask = await parsed(completion_request, body, self.s.model, self.s.context)
        return await self.answer(request, ask, client)

    # -- shared --------------------------------------------------------------------------

    def client(self, request: Request) -> str:
        """Who asks, by the key sent (``Authorization: Bearer`` or ``x-api-key``); 401."""
        key = bearer(request.headers.get("authorization")) or request.headers.get("x-api-key")
        who = self.s.gate.identify(key)
        if who is None:
            raise unauthorized(
                "Incorrect API key provided. Send it as 'Authorization: Bearer <key>'."
                if key
                else "No API key: send 'Authorization: Bearer <key>' (MacMesh shows the key "
                "when it starts serving)."
            )
        label, owner = who
        request.state.client, request.state.owner = label, owner
        return label

    async def answer(self, request: Request, ask: Ask, client: str) -> Response:
        got = await self.begin(request, ask, client)
        if isinstance(got, Response):
            return got
        answer, first = got
        if ask.stream:
            return EventStream(self.stream(answer, first))
        done = await self.whole(request, answer, first)
        if isinstance(done, Response):
            return done
        shape = shaping.chat_completion if ask.chat else shaping.text_completion
        return JSONResponse(shape(answer.id, self.s.model, answer.created, done))

    async def begin(
        self, request: Request, ask: Ask, client: str
    ) -> tuple[Answer, AnswerEvent] | Response:
        """Queue the answer and wait for its first event (a token, or its end): a refusal
        (an APIError) before any byte of the answer is sent. A client gone: LEFT.

        The prompt is made here first, off the event loop (``core.serve.prompts``): its
        size against the context, the chat template (a 400 quoting it), its token ids;
        its key (``owner``) is its fair share's and, unless the cache is shared, its
        prompt cache tenant's."""
        owner = str(getattr(request.state, "owner", client))
        tokens = None
        if self.s.prompts is not None and not self.s.prompts.wait(0):
            await asyncio.to_thread(self.s.prompts.wait)  # loading: a second, once
        if self.s.prompts is not None and self.s.prompts.ready:
            self.s.prompts.check_size(ask)  # before any tokenizing: a huge prompt at once
            tokens = await asyncio.to_thread(self.s.prompts.tokens, ask)
        tenant = None if self.s.shared_prompt_cache else owner
        answer = self.s.answers.submit(ask, client, owner, tenant, tokens)
        request.state.answer = answer
        first = await until_disconnect(request.receive, answer.events.get())
        if first is None:
            self.s.answers.cancel(answer)
            return Response(status_code=LEFT)
        if first["event"] == p.ERROR:
            raise failure(first, ask.chat)
        return answer, first

    async def whole(
        self, request: Request, answer: Answer, first: AnswerEvent
    ) -> p.Done | Response:
        """The answer's ``done`` event (an APIError if it failed; LEFT if the client went)."""
        event = first
        while event["event"] != p.DONE:
            if event["event"] == p.ERROR:
                raise failure(event, answer.ask.chat)
            got = await until_disconnect(request.receive, answer.events.get())
            if got is None:
                self.s.answers.cancel(answer)
                return Response(status_code=LEFT)
            event = got
        return event

    async def events(self, answer: Answer, first: AnswerEvent) -> AsyncGenerator[AnswerEvent, None]:
        """The answer's events from ``first`` to its ``done`` or ``error``; a stream that
        is closed early (its client left) cancels the answer."""
        try:
            event = first
            while True:
                yield event
                if event["event"] in (p.DONE, p.ERROR):
                    return
                event = await answer.events.get()
        finally:
            if not answer.ended.is_set():
                self.s.answers.cancel(answer)  # the client left mid-answer

    async def stream(self, answer: Answer, first: AnswerEvent) -> AsyncIterator[bytes]:
        ask, model, created = answer.ask, self.s.model, answer.created
        usage = ask.include_usage
        if ask.chat:
            role = {"role": "assistant", "content": ""}
            yield shaping.sse(
                shaping.chat_chunk(answer.id, model, created, role, None, None, usage)
            )
        events = self.events(answer, first)
        pending: list[dict[str, Any]] = []  # logprobs of tokens not sent yet
        try:
            async for event in events:
                if event["event"] == p.TOKEN:
                    if "logprobs" in event:  # a piece without text gives its to the next
                        pending.append(event["logprobs"])
                    if event["text"]:
                        yield shaping.sse(self._piece(answer, event["text"], pending))
                        pending = []
                elif event["event"] == p.ERROR:
                    yield shaping.sse(failure(event, ask.chat).body())
                elif event["event"] == p.DONE:
                    finish = shaping.finish_reason(event)
                    if ask.chat:
                        chunk = shaping.chat_chunk(
                            answer.id, model, created, {}, finish, None, usage
                        )
                    else:
                        chunk = shaping.text_chunk(
                            answer.id, model, created, "", finish, None, usage
                        )
                    yield shaping.sse(chunk)
                    if usage:
                        use = shaping.usage(event)
                        last = (
                            shaping.chat_chunk(answer.id, model, created, None, None, use, True)
                            if ask.chat
                            else shaping.text_chunk(
                                answer.id, model, created, None, None, use, True
                            )
                        )
                        yield shaping.sse(last)
                    yield shaping.DONE_SSE
        finally:
            await events.aclose()

    def _piece(self, answer: Answer, text: str, logprobs: list[dict[str, Any]]) -> dict[str, Any]:
        ask, model = answer.ask, self.s.model
        asked = logprobs if ask.logprobs is not None else None
        if ask.chat:
            return shaping.chat_chunk(
                answer.id,
                model,
                answer.created,
                {"content": text},
                None,
                None,
                ask.include_usage,
                asked,
            )
        return shaping.text_chunk(
            answer.id, model, answer.created, text, None, None, ask.include_usage, asked
        )


def bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


async def read_body(request: Request) -> bytes:
    """The body, refused (413) past MAX_BODY before it is all read."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY:
        raise APIError(413, f"The request body is larger than {MAX_BODY >> 20} MB.")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise APIError(413, f"The request body is larger than {MAX_BODY >> 20} MB.")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request) -> dict[str, Any]:
    """The body as a JSON object (``parse_json``); a large one is parsed on a thread, so
    the event loop keeps sending the other clients' tokens meanwhile."""
    raw = await read_body(request)
    if len(raw) > PARSE_ON_LOOP:
        return await asyncio.to_thread(parse_json, raw)
    return parse_json(raw)


async def until_disconnect(receive: Receive, waited: Awaitable[Any]) -> Any:
    """``waited``'s result, or None when the client disconnects first."""
    task = asyncio.ensure_future(waited)
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if task.done():
        return task.result()
    task.cancel()
    return None


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class EventStream(Response):
    """Server-sent events from an async iterator; ends (and closes the iterator, which
    cancels the answer) when the client disconnects."""

    def __init__(self, chunks: AsyncIterator[bytes], media_type: str = "text/event-stream") -> None:
        # As StreamingResponse: no body attribute, so no Content-Length header.
        self.status_code, self.background, self.chunks = 200, None, chunks
        self.media_type = media_type
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            async for chunk in self.chunks:
                if gone.done():
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if not gone.done():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away mid-write
        finally:
            gone.cancel()
            aclose = getattr(self.chunks, "aclose", None)
            if aclose is not None:
                await aclose()


def refusal(path: str, error: APIError) -> Response:
    """``error`` as the response of the route at ``path``, in its dialect."""
    return JSONResponse(error_body(path, error), status_code=error.status, headers=error.headers)


async def api_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, APIError)
    return refusal(request.url.path, error)


async def http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    code = "not_found" if error.status_code == 404 else None
    message = (
        f"No route {request.method} {quote(request.url.path)}: the API is under /v1 "
        "(GET /v1/models, POST /v1/chat/completions, POST /v1/completions, "
        "POST /v1/messages) and /api (POST /api/chat, GET /api/tags); metrics at "
        "GET /metrics."
        if error.status_code in (404, 405)
        else str(error.detail)
    )
    headers = dict(error.headers or {})
    refused = APIError(error.status_code, message, code=code, headers=headers)
    return refusal(request.url.path, refused)


async def client_left(request: Request, error: Exception) -> Response:
    """The client closed before its body was all sent: nobody to answer (logged LEFT)."""
    return Response(status_code=LEFT)


async def unexpected(request: Request, error: Exception) -> Response:
    failed = APIError(500, f"{type(error).__name__}: {error}", kind="server_error")
    return refusal(request.url.path, failed)


class OneBodyLength:
    """A request with both ``Content-Length`` and ``Transfer-Encoding`` is refused (400)
    and its connection closed: the two frame the body differently, which is how a second
    request is smuggled inside the first's body (h11 trusts the chunking and would read
    the rest as the connection's next request)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            names = {name for name, _value in scope["headers"]}
            if b"content-length" in names and b"transfer-encoding" in names:
                error = APIError(
                    400,
                    "The request has both Content-Length and Transfer-Encoding: send one.",
                    headers={"Connection": "close"},
                )
                await refusal(scope["path"], error)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def loggable(text: str) -> str:
    """Client text made safe for one log line: control characters, line breaks and other
    invisible characters as ``\\xNN`` / ``\\uNNNN`` (a backslash doubled), so no request
    can forge a line or send the terminal an escape sequence."""
    return "".join(
        c if c.isprintable() and c != "\\" else c.encode("unicode_escape").decode("ascii")
        for c in text
    )


def loggable_path(path: str) -> str:
    """A request's (percent-decoded) path percent-encoded again for the log: newlines,
    spaces, escapes and non-ASCII as %XX, so it is one field of one line."""
    return quote(path, safe="/:@!$&'()*+,;=-._~", errors="backslashreplace")


class Logged:
    """One log line per request, once its response has ended: who, what, status, time."""

    def __init__(
        self, app: Callable[[Scope, Receive, Send], Awaitable[None]], served: Served
    ) -> None:
        self.app, self.served = app, served

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.monotonic(), [0]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            state = scope.get("state", {})
            answer = state.get("answer")
            peer = scope.get("client") or ("?", 0)
            parts = [
                loggable(str(peer[0])),
                loggable(str(state.get("client", "-"))),
                f"{loggable(scope['method'])} {loggable_path(scope['path'])}",
                str(status[0] or LEFT),
                f"{time.monotonic() - started:.2f} s",
            ]
            if isinstance(answer, Answer):
                done = answer.done
                parts.insert(4, f"{done['generation_tokens'] if done else 0} tokens")
                if answer.cancelled:
                    parts.insert(5, "cancelled")
                answers = self.served.answers
                parts.append(f"({answers.serving} at once, {answers.depth} waiting)")
            self.served.log(" ".join(parts))
            if self.served.metrics is not None:
                self.served.metrics.request_ended(scope["path"], status[0] or LEFT)
