"""Answers as OpenAI's objects: whole (``chat.completion``, ``text_completion``) and as
the SSE chunks of a stream. Pure functions of the request and the worker's events."""

from __future__ import annotations

import json
import time
from typing import Any

from core.serve.structured import chat_logprobs_object, completion_logprobs_object
from core.worker import protocol as p

# The worker's finish reasons as OpenAI's: a cancelled answer's client has gone.
FINISH = {"stop": "stop", "length": "length", p.CANCELLED: "stop"}


def usage(done: p.Done) -> dict[str, Any]:
    """OpenAI's usage, with ``prompt_tokens_details.cached_tokens``: the prompt's tokens
    the ranks' prompt cache held (``core.worker.promptcache``)."""
    prompt = done["prompt_tokens"]
    completion = done["generation_tokens"]
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": int(done.get("cached_tokens") or 0)},
    }


def finish_reason(done: p.Done) -> str:
    return FINISH.get(str(done["finish_reason"]), "stop")


def chat_completion(answer_id: str, model: str, created: int, done: p.Done) -> dict[str, Any]:
    return {
        "id": answer_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": done["text"]},
                "logprobs": _whole(done, chat_logprobs_object),
                "finish_reason": finish_reason(done),
            }
        ],
        "usage": usage(done),
    }


def text_completion(answer_id: str, model: str, created: int, done: p.Done) -> dict[str, Any]:
    return {
        "id": answer_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": done["text"],
                "logprobs": _whole(done, completion_logprobs_object),
                "finish_reason": finish_reason(done),
            }
        ],
        "usage": usage(done),
    }


def _whole(done: p.Done, shape: Any) -> dict[str, Any] | None:
    """An answer's ``logprobs`` (the worker's entries, in the API's shape), if asked."""
    entries = done.get("logprobs")
    return shape(entries) if entries is not None else None


def chat_chunk(
    answer_id: str,
    model: str,
    created: int,
    delta: dict[str, Any] | None,
    finish: str | None = None,
    use: dict[str, int] | None = None,
    include_usage: bool = False,
    logprobs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``: a delta, the finish, or (delta None) the usage."""
    chunk: dict[str, Any] = {
        "id": answer_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": []
        if delta is None
        else [
            {
                "index": 0,
                "delta": delta,
                "logprobs": None if logprobs is None else chat_logprobs_object(logprobs),
                "finish_reason": finish,
            }
        ],
    }
    if include_usage:
        chunk["usage"] = use  # null on every chunk but the last, as OpenAI
    return chunk


def text_chunk(
    answer_id: str,
    model: str,
    created: int,
    text: str | None,
    finish: str | None = None,
    use: dict[str, int] | None = None,
    include_usage: bool = False,
    logprobs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": answer_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": []
        if text is None
        else [
            {
                "index": 0,
                "text": text,
                "logprobs": None if logprobs is None else completion_logprobs_object(logprobs),
                "finish_reason": finish,
            }
        ],
    }
    if include_usage:
        chunk["usage"] = use
    return chunk


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n".encode()


DONE_SSE = b"data: [DONE]\n\n"


def models_list(model: str, created: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"id": model, "object": "model", "created": created, "owned_by": "macmesh"}],
    }


def now() -> int:
    return int(time.time())
