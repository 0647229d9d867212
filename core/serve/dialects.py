"""Anthropic's Messages API and Ollama's chat, over the same path as OpenAI's: their
request bodies → an ``Ask``, and the worker's events → their responses and streams.
Pure; each refusal is an ``APIError`` rendered in the dialect's own error shape."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from core.serve.errors import APIError, bad_request, not_found
from core.serve.fields import (
    ANTHROPIC,
    OLLAMA,
    OLLAMA_OPTIONS,
    refuse_message_extras,
    refuse_unsupported,
)
from core.serve.requests import Ask, stops, text_content
from core.serve.structured import anthropic_output, ollama_format
from core.serve.tool_messages import anthropic_messages, ollama_messages
from core.serve.tools import anthropic_tools, ollama_tools
from core.worker import protocol as p


def error_body(path: str, error: APIError) -> dict[str, Any]:
    """``error`` in the shape of the dialect whose route ``path`` is: Anthropic's under
    ``/v1/messages``, Ollama's under ``/api/``, OpenAI's everywhere else."""
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return anthropic_error(error)
    if path.startswith("/api/"):
        return ollama_error(error)
    return error.body()


# -- Anthropic ----------------------------------------------------------------------------

ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", p.CANCELLED: "end_turn"}


def anthropic_error(error: APIError) -> dict[str, Any]:
    kind = ANTHROPIC_ERRORS.get(error.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}


def anthropic_request(body: dict[str, Any], model: str, context: int | None) -> Ask:
    """``POST /v1/messages``: max_tokens is required there; system is its own field."""
    _check_model(body.get("model"), model)
    refuse_unsupported(body, ANTHROPIC)
    chat = anthropic_messages(body.get("messages"))
    tools = anthropic_tools(body)
    system = body.get("system")
    if system is not None:
        chat.insert(0, {"role": "system", "content": text_content(system, "system")})
    wanted = body.get("max_tokens")
    if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 1:
        raise bad_request("'max_tokens' is required: a whole number of at least 1.", "max_tokens")
    limit = context or 4096
    if wanted > limit:
        raise bad_request(f"max_tokens is too large: {wanted}; the context is {limit} tokens.")
    sampling: dict[str, Any] = {}
    for key, high in (("temperature", 1.0), ("top_p", 1.0)):
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= high:
            raise bad_request(f"'{key}' must be a number from 0 to {high:g}.", key)
        sampling[key] = float(value)
    found = stops(body.get("stop_sequences"), "stop_sequences")
    if found:
        sampling["stop"] = found
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad_request("'stream' must be true or false.", "stream")
    sampling.update(tools.sampling() if tools else {})
    return Ask(
        model=model,
        max_tokens=wanted,
        messages=chat,
        sampling=sampling,
        stream=stream,
        tools=tools,
        constraint=anthropic_output(body.get("output_config"), body.get("output_format")),
    )


def anthropic_message(answer_id: str, model: str, done: p.Done) -> dict[str, Any]:
    return {
        "id": answer_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": done["text"]}],
        "stop_reason": STOP_REASONS.get(str(done["finish_reason"]), "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": done["prompt_tokens"],
            "output_tokens": done["generation_tokens"],
        },
    }


def anthropic_sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def anthropic_start(answer_id: str, model: str) -> bytes:
    message: dict[str, Any] = {
        "id": answer_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    return anthropic_sse("message_start", {"message": message}) + anthropic_sse(
        "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
    )


def anthropic_delta(text: str) -> bytes:
    return anthropic_sse(
        "content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}}
    )


def anthropic_end(done: p.Done) -> bytes:
    reason = STOP_REASONS.get(str(done["finish_reason"]), "end_turn")
    usage = {
        "input_tokens": done["prompt_tokens"],
        "output_tokens": done["generation_tokens"],
    }
    return (
        anthropic_sse("content_block_stop", {"index": 0})
        + anthropic_sse(
            "message_delta",
            {"delta": {"stop_reason": reason, "stop_sequence": None}, "usage": usage},
        )
        + anthropic_sse("message_stop", {})
    )


# -- Ollama -------------------------------------------------------------------------------

OLLAMA_REASONS = {"stop": "stop", "length": "length", p.CANCELLED: "stop"}


def ollama_error(error: APIError) -> dict[str, Any]:
    return {"error": error.message}


def ollama_names(model: str) -> tuple[str, str]:
    return model, f"{model}:latest"


def ollama_request(body: dict[str, Any], model: str, context: int | None) -> Ask:
    """``POST /api/chat``: streams unless ``stream`` is false; sampling under options."""
    name = body.get("model")
    if not isinstance(name, str) or name not in ollama_names(model):
        _check_model(name, model)
    refuse_unsupported(body, OLLAMA)
    refuse_message_extras(body.get("messages"), ("images",))
    chat = ollama_messages(body.get("messages"))
    tools = ollama_tools(body)
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise bad_request("'options' must be an object.", "options")
    refuse_unsupported(options, OLLAMA_OPTIONS, "options.")
    limit = context or 4096
    wanted = options.get("num_predict")
    if wanted is None or wanted == -1:
        wanted = limit
    if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 1:
        raise bad_request("'options.num_predict' must be a whole number of at least 1.")
    if wanted > limit:
        raise bad_request(f"num_predict is too large: {wanted}; the context is {limit} tokens.")
    sampling: dict[str, Any] = {}
    for key, high in (("temperature", 2.0), ("top_p", 1.0)):
        value = options.get(key)
        if value is None:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= high:
            raise bad_request(f"'options.{key}' must be a number from 0 to {high:g}.")
        sampling[key] = float(value)
    seed = options.get("seed")
    if seed is not None:
        if not isinstance(seed, int) or isinstance(seed, bool) or abs(seed) >= 1 << 63:
            raise bad_request("'options.seed' must be a whole number.")
        sampling["seed"] = seed
    found = stops(options.get("stop"), "options.stop")
    if found:
        sampling["stop"] = found
    stream = body.get("stream", True)
    if not isinstance(stream, bool):
        raise bad_request("'stream' must be true or false.", "stream")
    return Ask(
        model=model,
        max_tokens=wanted,
        messages=chat,
        sampling=sampling,
        stream=stream,
        tools=tools,
        constraint=ollama_format(body.get("format")),
    )


def ollama_tags(model: str, size: int) -> dict[str, Any]:
    return {
        "models": [
            {
                "name": model,
                "model": model,
                "modified_at": _iso(time.time()),
                "size": size,
                "digest": "",
                "details": {"format": "mlx", "family": "", "parameter_size": ""},
            }
        ]
    }


def ollama_piece(model: str, text: str) -> bytes:
    line = {
        "model": model,
        "created_at": _iso(time.time()),
        "message": {"role": "assistant", "content": text},
        "done": False,
    }
    return (json.dumps(line, ensure_ascii=False) + "\n").encode()


def ollama_done(model: str, done: p.Done, elapsed_s: float, text: str = "") -> dict[str, Any]:
    return {
        "model": model,
        "created_at": _iso(time.time()),
        "message": {"role": "assistant", "content": text},
        "done": True,
        "done_reason": OLLAMA_REASONS.get(str(done["finish_reason"]), "stop"),
        "total_duration": int(elapsed_s * 1e9),
        "prompt_eval_count": done["prompt_tokens"],
        "eval_count": done["generation_tokens"],
    }


def _check_model(name: Any, model: str) -> None:
    if not isinstance(name, str):
        raise bad_request(f"'model' is required: this server runs '{model}'.", "model")
    if name != model:
        raise not_found(
            f"The model '{name[:200]}' does not exist here: this cluster serves '{model}'.",
            code="model_not_found",
            param="model",
        )


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")
