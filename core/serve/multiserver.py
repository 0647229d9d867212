"""The API in front of several models (issue 37): requests route by their ``model`` field
to that model's own routes (``core.serve.routes``, one app and line of answers per
model, ``core.serve.models``); a model not loaded is loaded first.

Its own routes: ``GET /v1/models`` and ``GET /models`` (every model, with its state:
loaded, loading, unloaded, and where it runs), ``POST /models/load`` and
``POST /models/unload`` (llama.cpp's router: ``{"model": NAME}``), Ollama's
``GET /api/tags`` (every model) and ``GET /api/ps`` (the loaded ones), and Ollama's
load/unload: ``POST /api/chat`` with no messages loads the model, with
``"keep_alive": 0`` too unloads it; a request's ``keep_alive`` sets its model's.
``GET /metrics``: every loaded model's series, labelled by model
(``core.serve.model_metrics``; with a key unless ``--metrics-without-key``); behind the
window's server (a ``fallback``), its job's own.

A streamed request for a model still loading gets its response started at once, with
an SSE comment (``: loading NAME``) at once and every ``KEEP_ALIVE_S`` until the model is ready, so
neither the client nor a proxy gives up; the load's progress is in the server log.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import Message, Receive, Scope, Send

from core.serve.app import (
    OneBodyLength,
    api_error,
    bearer,
    client_left,
    read_body,
    refusal,
    unexpected,
    until_disconnect,
)
from core.serve.errors import APIError, bad_request, unauthorized
from core.serve.keep_alive import FOREVER, parse_keep_alive
from core.serve.metrics import CONTENT_TYPE
from core.serve.metrics import PATH as METRICS_PATH
from core.serve.model_list import describe
from core.serve.model_metrics import exposition
from core.serve.models import ModelEntry, ModelRegistry, ModelState
from core.serve.requests import parse_json
from core.serve.routes import create_app

KEEP_ALIVE_S = 2.0  # an SSE comment this often while a streamed request's model loads
FORWARDED = ("/v1/chat/completions", "/v1/completions", "/v1/messages", "/api/chat")
SSE_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/messages")

ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Front:
    """The routes in front of the models (see the module doc)."""

    def __init__(self, registry: ModelRegistry) -> None:
        self.registry = registry
        self._apps: dict[int, ASGIApp] = {}  # a loaded model's routes, by its Served's id

    # -- the models ----------------------------------------------------------------------

    async def models(self, request: Request) -> Response:
        self.client(request)
        created = int(time.time())
        data = []
        for entry in self.registry.entries.values():
            described = describe(entry)
            data.append(
                {
                    "id": entry.name,
                    "object": "model",
                    "created": created,
                    "owned_by": "macmesh",
                    "status": {"value": described["state"]},  # llama.cpp's router
                    "macmesh": described,
                }
            )
        return JSONResponse({"object": "list", "data": data})

    async def tags(self, request: Request) -> Response:
        self.client(request)
        return JSONResponse({"models": [_ollama_model(e, self.registry) for e in self._all()]})

    async def ps(self, request: Request) -> Response:
        self.client(request)
        loaded = [_ollama_model(e, self.registry) for e in self.registry.loaded()]
        return JSONResponse({"models": loaded})

    async def load(self, request: Request) -> Response:
        self.client(request)
        body = parse_json(await read_body(request))
        entry = self._named(body)
        keep = _keep_alive(body)
        if keep == 0:
            unloaded = await self.registry.unload(entry.name)
            return JSONResponse({"success": True, "model": entry.name, "unloaded": unloaded})
        got = await until_disconnect(request.receive, self.registry.ensure(entry.name))
        if got is None:
            return Response(status_code=499)
        if keep is not None:
            self.registry.keep_alive(entry, keep)
        return JSONResponse({"success": True, "model": entry.name, "state": entry.state.value})

    async def metrics(self, request: Request) -> Response:
        if not self.registry.settings.metrics_without_key:
            self.client(request)
        loaded = [
            (e.name, e.served.metrics)
            for e in self.registry.loaded()
            if e.served is not None and e.served.metrics is not None
        ]
        return Response(exposition(loaded), media_type=CONTENT_TYPE)

    async def unload(self, request: Request) -> Response:
        self.client(request)
        entry = self._named(parse_json(await read_body(request)))
        unloaded = await self.registry.unload(entry.name)
        return JSONResponse({"success": True, "model": entry.name, "unloaded": unloaded})

    # -- the answers: to the model's own routes --------------------------------------------

    async def forward(self, request: Request) -> Response:
        self.client(request)
        raw = await read_body(request)
        body = parse_json(raw)
        entry = self._named(body)
        path = request.url.path
        keep = _keep_alive(body) if path == "/api/chat" else None
        if path == "/api/chat" and not body.get("messages"):
            return await self._ollama_load(request, entry, keep)
        if entry.state is ModelState.LOADED:
            return Forwarded(self, entry, raw, keep)
        if path in SSE_ROUTES and body.get("stream") is True:
            return Forwarded(self, entry, raw, keep, keep_alive_stream=True)
        got = await until_disconnect(request.receive, self.registry.ensure(entry.name))
        if got is None:
            return Response(status_code=499)
        return Forwarded(self, entry, raw, keep)

    async def _ollama_load(
        self, request: Request, entry: ModelEntry, keep: float | None
    ) -> Response:
        """Ollama's way: a chat with no messages loads the model; with keep_alive 0,
        unloads it."""
        if keep == 0:
            await self.registry.unload(entry.name, "keep_alive 0")
            reason = "unload"
        else:
            got = await until_disconnect(request.receive, self.registry.ensure(entry.name))
            if got is None:
                return Response(status_code=499)
            if keep is not None:
                self.registry.keep_alive(entry, keep)
            reason = "load"
        return JSONResponse(
            {
                "model": entry.name,
                "created_at": _iso(time.time()),
                "message": {"role": "assistant", "content": ""},
                "done_reason": reason,
                "done": True,
            }
        )

    def app_of(self, entry: ModelEntry) -> ASGIApp:
        served = entry.served
        assert served is not None
        app = self._apps.get(id(served))
        if app is None:
            self._apps = {k: v for k, v in self._apps.items() if k in self._live()}
            app = self._apps[id(served)] = _without_lifespan(create_app(served))
        return app

    def _live(self) -> set[int]:
        return {id(e.served) for e in self.registry.entries.values() if e.served is not None}

    # -- shared ----------------------------------------------------------------------------

    def client(self, request: Request) -> str:
        key = bearer(request.headers.get("authorization")) or request.headers.get("x-api-key")
        who = self.registry.settings.gate.identify(key)
        if who is None:
            raise unauthorized(
                "Incorrect API key provided. Send it as 'Authorization: Bearer <key>'."
                if key
                else "No API key: send 'Authorization: Bearer <key>'."
            )
        return who[0]

    def _named(self, body: dict[str, Any]) -> ModelEntry:
        name = body.get("model")
        if not isinstance(name, str) or not name:
            raise bad_request(
                f"'model' is required: this server serves {', '.join(self.registry.names())}.",
                "model",
            )
        entry = self.registry.find(name)
        if entry is None:
            raise APIError(
                404,
                f"The model '{name[:200]}' does not exist here: this server serves "
                f"{', '.join(self.registry.names())} (GET /v1/models).",
                code="model_not_found",
                param="model",
            )
        return entry

    def _all(self) -> list[ModelEntry]:
        return list(self.registry.entries.values())


class Forwarded(Response):
    """The request handed to its model's own routes (its body given again); with
    ``keep_alive_stream``, an SSE response started at once, kept alive while the model
    loads, then the model's stream (its own error as an SSE event)."""

    def __init__(
        self,
        front: Front,
        entry: ModelEntry,
        raw: bytes,
        keep: float | None,
        *,
        keep_alive_stream: bool = False,
    ) -> None:
        self.front, self.entry, self.raw, self.keep = front, entry, raw, keep
        self.keep_alive_stream = keep_alive_stream
        self.status_code, self.background = 200, None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        registry, entry = self.front.registry, self.entry
        sent_start = False
        if self.keep_alive_stream and entry.state is not ModelState.LOADED:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream; charset=utf-8"),
                        (b"cache-control", b"no-cache"),
                        (b"x-accel-buffering", b"no"),
                    ],
                }
            )
            sent_start = True
            load = asyncio.ensure_future(registry.ensure(entry.name))
            while not load.done():  # a comment at once, then every KEEP_ALIVE_S
                await send(_body(f": loading {entry.name}\n\n".encode()))
                await asyncio.wait({load}, timeout=KEEP_ALIVE_S)
            try:
                load.result()
            except APIError as error:
                await send(_body(b"data: " + json.dumps(error.body()).encode() + b"\n\n"))
                await send(_body(b"data: [DONE]\n\n", more=False))
                return
        elif entry.state is not ModelState.LOADED:
            await registry.ensure(entry.name)
        with registry.using(entry, self.keep):
            await self.front.app_of(entry)(
                scope, _replay(self.raw, receive), _after(send, sent_start)
            )
        if self.keep == 0 and not entry.spec.pinned:
            await registry.unload(entry.name, "keep_alive 0")


def _replay(raw: bytes, receive: Receive) -> Receive:
    """The body once more (the front read it), then the client's own messages (its
    disconnect)."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive()

    return replayed


def _after(send: Send, started: bool) -> Send:
    """``send``, past a response the front started already: the model's own start
    dropped, a refusal's JSON body sent as an SSE event."""
    if not started:
        return send
    refused = [False]

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            refused[0] = int(message["status"]) != 200
            return
        if refused[0] and message.get("body"):
            await send(_body(b"data: " + message["body"] + b"\n\n"))
            await send(_body(b"data: [DONE]\n\n"))
            return
        await send(message)

    return sending


def _body(data: bytes, more: bool = True) -> Message:
    return {"type": "http.response.body", "body": data, "more_body": more}


def _without_lifespan(app: ASGIApp) -> ASGIApp:
    return app  # each model's answers are started and closed by the registry


def _keep_alive(body: dict[str, Any]) -> float | None:
    try:
        return parse_keep_alive(body.get("keep_alive"))
    except ValueError as error:
        raise bad_request(str(error), "keep_alive") from None


def _ollama_model(entry: ModelEntry, registry: ModelRegistry) -> dict[str, Any]:
    described = describe(entry)
    left = described["unloads_in_s"]
    expires = (
        _iso(time.time() + left) if left is not None and entry.keep_alive_s != FOREVER else None
    )
    return {
        "name": entry.name,
        "model": entry.name,
        "modified_at": _iso(time.time()),
        "size": described["memory_bytes"],
        "size_vram": described["memory_bytes"],
        "digest": "",
        "expires_at": expires,
        "details": {"format": "mlx", "family": "", "parameter_size": ""},
        "macmesh": described,
    }


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    message = (
        f"No route {request.method} {request.url.path[:200]}: the API is under /v1 and "
        "/api; models at GET /v1/models, POST /models/load and POST /models/unload."
        if error.status_code in (404, 405)
        else str(error.detail)
    )
    refused = APIError(error.status_code, message, code="not_found")
    return refusal(request.url.path, refused)


def create_front(registry: ModelRegistry, fallback: ASGIApp | None = None) -> ASGIApp:
    """``fallback``: where every other path goes (the window's job's own routes:
    ``/metrics``...)."""
    front = Front(registry)
    routes: list[BaseRoute] = [
        Route("/v1/models", front.models, methods=["GET"]),
        Route("/models", front.models, methods=["GET"]),
        Route("/models/load", front.load, methods=["POST"]),
        Route("/models/unload", front.unload, methods=["POST"]),
        Route("/api/tags", front.tags, methods=["GET"]),
        Route("/api/ps", front.ps, methods=["GET"]),
        *(Route(path, front.forward, methods=["POST"]) for path in FORWARDED),
    ]
    if fallback is not None:
        routes.append(Mount("/", app=fallback))
    else:
        routes.append(Route(METRICS_PATH, front.metrics, methods=["GET"]))
    app = Starlette(
        routes=routes,
        exception_handlers={
            APIError: api_error,
            HTTPException: _http_error,
            ClientDisconnect: client_left,
            Exception: unexpected,
        },
    )
    return OneBodyLength(app)
