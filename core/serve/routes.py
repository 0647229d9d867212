"""The routes: OpenAI's (``app.API``), Anthropic's ``/v1/messages`` and Ollama's
``/api/chat`` and ``/api/tags`` (``dialects``) over the same queue and answers; and the
Starlette application with its error handlers (each refusal in its route's dialect), the
refusal of ambiguous body framing, and the one-line-per-request log."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from core.serve import dialects as d
from core.serve.answers import Answer, AnswerEvent, failure
from core.serve.app import (
    EventStream,
    Logged,
    OneBodyLength,
    Served,
    api_error,
    client_left,
    http_error,
    read_json,
    unexpected,
)
from core.serve.errors import APIError
from core.serve.metrics import PATH as METRICS_PATH
from core.serve.structured import parsed
from core.serve.tool_routes import ToolAPI, reads_calls
from core.worker import protocol as p


class Routes(ToolAPI):
    """Every route the server has (with tools: ``core.serve.tool_routes``)."""

    async def messages(self, request: Request) -> Response:
        client = self.client(request)
        body = await read_json(request)
        ask = await parsed(d.anthropic_request, body, self.s.model, self.s.context)
        if reads_calls(ask):
            return await self.anthropic_tools(request, ask, client)
        got = await self.begin(request, ask, client)
        if isinstance(got, Response):
            return got
        answer, first = got
        if ask.stream:
            return EventStream(self._anthropic_stream(answer, first))
        done = await self.whole(request, answer, first)
        if isinstance(done, Response):
            return done
        return JSONResponse(d.anthropic_message(answer.id, self.s.model, done))

    async def _anthropic_stream(self, answer: Answer, first: AnswerEvent) -> AsyncIterator[bytes]:
        yield d.anthropic_start(answer.id, self.s.model)
        events = self.events(answer, first)
        try:
            async for event in events:
                if event["event"] == p.TOKEN and event["text"]:
                    yield d.anthropic_delta(event["text"])
                elif event["event"] == p.ERROR:
                    yield d.anthropic_sse(
                        "error", {"error": d.anthropic_error(failure(event, True))["error"]}
                    )
                elif event["event"] == p.DONE:
                    yield d.anthropic_end(event)
        finally:
            await events.aclose()

    async def ollama_tags(self, request: Request) -> Response:
        self.client(request)
        return JSONResponse(d.ollama_tags(self.s.model, 0))

    async def ollama_chat(self, request: Request) -> Response:
        client = self.client(request)
        body = await read_json(request)
        ask = await parsed(d.ollama_request, body, self.s.model, self.s.context)
        if reads_calls(ask):
            return await self.ollama_tools(request, ask, client)
        started = time.monotonic()
        got = await self.begin(request, ask, client)
        if isinstance(got, Response):
            return got
        answer, first = got
        if ask.stream:
            return EventStream(self._ollama_stream(answer, first, started), "application/x-ndjson")
        done = await self.whole(request, answer, first)
        if isinstance(done, Response):
            return done
        elapsed = time.monotonic() - started
        return JSONResponse(d.ollama_done(self.s.model, done, elapsed, done["text"]))

    async def _ollama_stream(
        self, answer: Answer, first: AnswerEvent, started: float
    ) -> AsyncIterator[bytes]:
        events = self.events(answer, first)
        try:
            async for event in events:
                if event["event"] == p.TOKEN and event["text"]:
                    yield d.ollama_piece(self.s.model, event["text"])
                elif event["event"] == p.ERROR:
                    yield (json.dumps(d.ollama_error(failure(event))) + "\n").encode()
                elif event["event"] == p.DONE:
                    last = d.ollama_done(self.s.model, event, time.monotonic() - started)
                    yield (json.dumps(last) + "\n").encode()
        finally:
            await events.aclose()


def create_app(served: Served) -> Starlette:
    routes = Routes(served)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await served.answers.start()
        try:
            yield
        finally:
            await served.answers.close()

    app = Starlette(
        routes=[
            Route("/v1/models", routes.models, methods=["GET"]),
            Route("/v1/chat/completions", routes.chat, methods=["POST"]),
            Route("/v1/completions", routes.completions, methods=["POST"]),
            Route("/v1/messages", routes.messages, methods=["POST"]),
            Route("/api/chat", routes.ollama_chat, methods=["POST"]),
            Route("/api/tags", routes.ollama_tags, methods=["GET"]),
            Route(METRICS_PATH, routes.metrics, methods=["GET"]),
        ],
        exception_handlers={
            APIError: api_error,
            HTTPException: http_error,
            ClientDisconnect: client_left,
            Exception: unexpected,
        },
        lifespan=lifespan,
    )
    return Logged(OneBodyLength(app), served)  # type: ignore[return-value]
