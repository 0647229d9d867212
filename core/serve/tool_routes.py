"""The answers of requests with tools, on the three routes: the answer's text read by a
``CallReader`` (the model's call format, mlx-lm's parser) as it streams, its calls shaped
in the route's dialect (``core.serve.tool_answers``). Requests without tools (or with
``tool_choice: none``) take the plain path (``core.serve.app``).

A request with tools needs its prompt made here (the template's ``tools=``): when this
Mac has no tokenizer for the model, it is a 400 saying so. A forced answer that is not a
call of the given tools is a 500 naming what the model wrote (it cannot happen once
constrained decoding enforces the call's schema).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from core.serve import shaping
from core.serve import tool_answers as t
from core.serve.answers import Answer, AnswerEvent, failure
from core.serve.app import API, EventStream, read_json
from core.serve.dialects import anthropic_error, anthropic_sse, anthropic_start, ollama_error
from core.serve.errors import APIError, bad_request
from core.serve.requests import Ask, chat_request
from core.serve.structured import parsed
from core.serve.tool_calls import CallReader, NotACall, Piece
from core.serve.tool_messages import openai_messages
from core.serve.tools import openai_tools
from core.worker import protocol as p

NO_TOKENIZER = (
    "Tool calls need the model's chat template rendered on this Mac, and its tokenizer did "
    "not load here: leave 'tools' out."
)


def openai_chat_request(body: dict[str, Any], model: str, context: int | None) -> Ask:
    """``POST /v1/chat/completions`` with its tools, tool calls and tool results."""
    ask = chat_request(body, model, context)
    tools = openai_tools(body)
    chat = openai_messages(body.get("messages"))
    sampling = {**ask.sampling, **(tools.sampling() if tools else {})}
    return dataclasses.replace(ask, messages=chat, tools=tools, sampling=sampling)


def reads_calls(ask: Ask) -> bool:
    """Its answer is read for calls (tools given, and the model may call them)."""
    return ask.tools is not None and ask.tools.choice != "none"


def not_a_call(error: NotACall) -> APIError:
    return APIError(500, str(error), kind="server_error", code="tool_call_invalid")


class ToolAPI(API):
    """OpenAI's routes, with tools; the dialects' tool answers for ``Routes``."""

    async def chat(self, request: Request) -> Response:
        client = self.client(request)
        body = await read_json(request)
        # a schema (response_format, or the call a forced tool choice must be) is compiled
        # on a thread: the other clients' streams go on meanwhile
        ask = await parsed(openai_chat_request, body, self.s.model, self.s.context)
        return await self.answer(request, ask, client)

    async def begin(
        self, request: Request, ask: Ask, client: str
    ) -> tuple[Answer, AnswerEvent] | Response:
        if ask.tools is not None:
            prompts = self.s.prompts
            if prompts is not None and not prompts.wait(0):
                await asyncio.to_thread(prompts.wait)
            if prompts is None or not prompts.ready:
                raise bad_request(NO_TOKENIZER, "tools")
        return await super().begin(request, ask, client)

    def reader(self, ask: Ask) -> CallReader:
        assert ask.tools is not None and self.s.prompts is not None
        return CallReader(ask.tools, self.s.prompts.tool_format)

    def _said(self, answer: Answer, reader: CallReader) -> None:
        """The calls made, for the window's chat (``Served.on_calls``)."""
        on_calls = self.s.on_calls
        if on_calls is not None and reader.calls and answer.request is not None:
            calls = [{"name": c.name, "arguments": c.arguments} for c in reader.calls]
            with contextlib.suppress(Exception):
                on_calls(answer.request, calls)

    async def _read_whole(
        self, request: Request, answer: Answer, first: AnswerEvent
    ) -> tuple[p.Done, list[Piece]] | Response:
        done = await self.whole(request, answer, first)
        if isinstance(done, Response):
            return done
        reader = self.reader(answer.ask)
        try:
            pieces = [*reader.feed(done["text"]), *reader.end()]
        except NotACall as error:
            raise not_a_call(error) from None
        self._said(answer, reader)
        return done, pieces

    # -- OpenAI --------------------------------------------------------------------------

    async def answer(self, request: Request, ask: Ask, client: str) -> Response:
        if not reads_calls(ask):
            return await super().answer(request, ask, client)
        got = await self.begin(request, ask, client)
        if isinstance(got, Response):
            return got
        answer, first = got
        if ask.stream:
            return EventStream(self._openai_stream(answer, first))
        read = await self._read_whole(request, answer, first)
        if isinstance(read, Response):
            return read
        done, pieces = read
        return JSONResponse(t.openai_message(answer.id, self.s.model, answer.created, done, pieces))

    async def _openai_stream(self, answer: Answer, first: AnswerEvent) -> AsyncIterator[bytes]:
        ask, model, created = answer.ask, self.s.model, answer.created
        usage = ask.include_usage
        reader, index = self.reader(ask), 0

        def chunk(delta: dict[str, Any] | None, finish: str | None = None) -> bytes:
            return shaping.sse(
                shaping.chat_chunk(answer.id, model, created, delta, finish, None, usage)
            )

        def pieces_out(pieces: list[Piece]) -> bytes:
            nonlocal index
            out = b""
            for piece in pieces:
                if isinstance(piece, str):
                    out += chunk({"content": piece}) if piece else b""
                    continue
                for delta in t.openai_call_deltas(piece, index):
                    out += chunk(delta)
                index += 1
            return out

        yield chunk({"role": "assistant", "content": ""})
        events = self.events(answer, first)
        try:
            async for event in events:
                if event["event"] == p.TOKEN and event["text"]:
                    out = pieces_out(reader.feed(event["text"]))
                    if out:
                        yield out
                elif event["event"] == p.ERROR:
                    yield shaping.sse(failure(event, True).body())
                elif event["event"] == p.DONE:
                    try:
                        out = pieces_out(reader.end())
                    except NotACall as error:
                        yield shaping.sse(not_a_call(error).body())
                        yield shaping.DONE_SSE
                        return
                    self._said(answer, reader)
                    yield out + chunk({}, t.openai_finish(event, reader.calls))
                    if usage:
                        use = shaping.usage(event)
                        yield shaping.sse(
                            shaping.chat_chunk(answer.id, model, created, None, None, use, True)
                        )
                    yield shaping.DONE_SSE
        finally:
            await events.aclose()

    # -- Anthropic -----------------------------------------------------------------------

    async def anthropic_tools(self, request: Request, ask: Ask, client: str) -> Response:
        got = await self.begin(request, ask, client)
        if isinstance(got, Response):
            return got
        answer, first = got
        if ask.stream:
            return EventStream(self._anthropic_stream_tools(answer, first))
        read = await self._read_whole(request, answer, first)
        if isinstance(read, Response):
            return read
        done, pieces = read
        return JSONResponse(t.anthropic_message(answer.id, self.s.model, done, pieces))

    async def _anthropic_stream_tools(
        self, answer: Answer, first: AnswerEvent
    ) -> AsyncIterator[bytes]:
        reader, blocks = self.reader(answer.ask), t.AnthropicBlocks()
        yield anthropic_start(answer.id, self.s.model)
        events = self.events(answer, first)
        try:
            async for event in events:
                if event["event"] == p.TOKEN and event["text"]:
                    out = blocks.pieces(reader.feed(event["text"]))
                    if out:
                        yield out
                elif event["event"] == p.ERROR:
                    said = anthropic_error(failure(event, True))["error"]
                    yield anthropic_sse("error", {"error": said})
                elif event["event"] == p.DONE:
                    try:
                        out = blocks.pieces(reader.end())
                    except NotACall as error:
                        said = anthropic_error(not_a_call(error))["error"]
                        yield anthropic_sse("error", {"error": said})
                        return
                    self._said(answer, reader)
                    yield out + blocks.end(event)
        finally:
            await events.aclose()

    # -- Ollama --------------------------------------------------------------------------

    async def ollama_tools(self, request: Request, ask: Ask, client: str) -> Response:
        started = time.monotonic()
        got = await self.begin(request, ask, client)
        if isinstance(got, Response):
            return got
        answer, first = got
        if ask.stream:
            return EventStream(
                self._ollama_stream_tools(answer, first, started), "application/x-ndjson"
            )
        read = await self._read_whole(request, answer, first)
        if isinstance(read, Response):
            return read
        done, pieces = read
        elapsed = time.monotonic() - started
        return JSONResponse(t.ollama_message(self.s.model, done, elapsed, pieces))

    async def _ollama_stream_tools(
        self, answer: Answer, first: AnswerEvent, started: float
    ) -> AsyncIterator[bytes]:
        model, reader = self.s.model, self.reader(answer.ask)
        events = self.events(answer, first)
        try:
            async for event in events:
                if event["event"] == p.TOKEN and event["text"]:
                    line = t.ollama_line(model, reader.feed(event["text"]))
                    if line:
                        yield line
                elif event["event"] == p.ERROR:
                    yield (json.dumps(ollama_error(failure(event))) + "\n").encode()
                elif event["event"] == p.DONE:
                    try:
                        line = t.ollama_line(model, reader.end())
                    except NotACall as error:
                        yield (json.dumps(ollama_error(not_a_call(error))) + "\n").encode()
                        return
                    self._said(answer, reader)
                    last = t.ollama_message(model, event, time.monotonic() - started, [])
                    yield line + (json.dumps(last) + "\n").encode()
        finally:
            await events.aclose()
