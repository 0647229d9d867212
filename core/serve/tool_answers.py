"""Answers with tool calls in each dialect's shape, whole and streamed. Pure.

- OpenAI: ``message.tool_calls`` (``{"id", "type": "function", "function": {"name",
  "arguments": <JSON text>}}``) and ``finish_reason: "tool_calls"``; streamed as
  ``delta.tool_calls``, each call's id and name first, then its arguments in fragments.
- Anthropic: ``tool_use`` content blocks (``{"id", "name", "input"}``) and
  ``stop_reason: "tool_use"``; streamed as a ``tool_use`` block's start, its
  ``input_json_delta`` fragments and its stop, each block at its own index.
- Ollama: ``message.tool_calls`` (``{"function": {"name", "arguments": {...}}}``), in
  the line of the stream where the call is complete.
"""

from __future__ import annotations

import json
from typing import Any

from core.serve import shaping
from core.serve.dialects import STOP_REASONS, anthropic_sse, ollama_done, ollama_piece
from core.serve.tool_calls import Call, Piece
from core.worker import protocol as p


def text_of(pieces: list[Piece]) -> str:
    return "".join(piece for piece in pieces if isinstance(piece, str))


def calls_of(pieces: list[Piece]) -> list[Call]:
    return [piece for piece in pieces if isinstance(piece, Call)]


# -- OpenAI -------------------------------------------------------------------------------


def openai_call(call: Call) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments_json},
    }


def openai_finish(done: p.Done, calls: list[Call]) -> str:
    return "tool_calls" if calls else shaping.finish_reason(done)


def openai_message(
    answer_id: str, model: str, created: int, done: p.Done, pieces: list[Piece]
) -> dict[str, Any]:
    """A ``chat.completion`` whose message may hold tool calls."""
    whole = shaping.chat_completion(answer_id, model, created, done)
    calls, text = calls_of(pieces), text_of(pieces)
    choice = whole["choices"][0]
    choice["message"] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        choice["message"]["tool_calls"] = [openai_call(call) for call in calls]
    choice["finish_reason"] = openai_finish(done, calls)
    return whole


def openai_call_deltas(call: Call, index: int) -> list[dict[str, Any]]:
    """A call's stream deltas: its id and name, then its arguments' fragments."""
    first = {
        "index": index,
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": ""},
    }
    deltas = [{"tool_calls": [first]}]
    for fragment in call.fragments():
        deltas.append({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
    return deltas


# -- Anthropic ----------------------------------------------------------------------------


def anthropic_id(call: Call) -> str:
    return f"toolu_{call.key}"


def anthropic_stop(done: p.Done, calls: list[Call]) -> str:
    return "tool_use" if calls else STOP_REASONS.get(str(done["finish_reason"]), "end_turn")


def anthropic_content(pieces: list[Piece]) -> list[dict[str, Any]]:
    """The message's content blocks: its text (when any), then its calls."""
    text, calls = text_of(pieces), calls_of(pieces)
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text or not calls else []
    for call in calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": anthropic_id(call),
                "name": call.name,
                "input": call.arguments,
            }
        )
    return blocks


def anthropic_message(
    answer_id: str, model: str, done: p.Done, pieces: list[Piece]
) -> dict[str, Any]:
    calls = calls_of(pieces)
    return {
        "id": answer_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": anthropic_content(pieces),
        "stop_reason": anthropic_stop(done, calls),
        "stop_sequence": None,
        "usage": {
            "input_tokens": done["prompt_tokens"],
            "output_tokens": done["generation_tokens"],
        },
    }


class AnthropicBlocks:
    """The content blocks of one streamed message: a text block is open from the start
    (``anthropic_start`` opens index 0); a call closes it and takes the next index; text
    after a call opens a new text block."""

    def __init__(self) -> None:
        self.index = 0
        self.text_open = True  # index 0, opened by anthropic_start
        self.calls: list[Call] = []

    def pieces(self, pieces: list[Piece]) -> bytes:
        out = b""
        for piece in pieces:
            out += self.call(piece) if isinstance(piece, Call) else self.text(piece)
        return out

    def text(self, text: str) -> bytes:
        if not text:
            return b""
        out = b""
        if not self.text_open:
            self.index += 1
            self.text_open = True
            out += anthropic_sse(
                "content_block_start",
                {"index": self.index, "content_block": {"type": "text", "text": ""}},
            )
        delta = {"type": "text_delta", "text": text}
        return out + anthropic_sse("content_block_delta", {"index": self.index, "delta": delta})

    def call(self, call: Call) -> bytes:
        self.calls.append(call)
        out = self._close()
        self.index += 1
        block = {"type": "tool_use", "id": anthropic_id(call), "name": call.name, "input": {}}
        out += anthropic_sse("content_block_start", {"index": self.index, "content_block": block})
        for fragment in call.fragments():
            delta = {"type": "input_json_delta", "partial_json": fragment}
            out += anthropic_sse("content_block_delta", {"index": self.index, "delta": delta})
        return out + anthropic_sse("content_block_stop", {"index": self.index})

    def end(self, done: p.Done) -> bytes:
        usage = {"input_tokens": done["prompt_tokens"], "output_tokens": done["generation_tokens"]}
        delta = {"stop_reason": anthropic_stop(done, self.calls), "stop_sequence": None}
        return (
            self._close()
            + anthropic_sse("message_delta", {"delta": delta, "usage": usage})
            + anthropic_sse("message_stop", {})
        )

    def _close(self) -> bytes:
        if not self.text_open:
            return b""
        self.text_open = False
        return anthropic_sse("content_block_stop", {"index": self.index})


# -- Ollama -------------------------------------------------------------------------------


def ollama_calls(calls: list[Call]) -> list[dict[str, Any]]:
    return [{"function": {"name": call.name, "arguments": call.arguments}} for call in calls]


def ollama_message(
    model: str, done: p.Done, elapsed_s: float, pieces: list[Piece]
) -> dict[str, Any]:
    whole = ollama_done(model, done, elapsed_s, text_of(pieces))
    calls = calls_of(pieces)
    if calls:
        whole["message"]["tool_calls"] = ollama_calls(calls)
    return whole


def ollama_line(model: str, pieces: list[Piece]) -> bytes:
    """One line of a stream: the pieces' text and calls (b"" when there is nothing)."""
    text, calls = text_of(pieces), calls_of(pieces)
    if not text and not calls:
        return b""
    if not calls:
        return ollama_piece(model, text)
    line = json.loads(ollama_piece(model, text))
    line["message"]["tool_calls"] = ollama_calls(calls)
    return (json.dumps(line, ensure_ascii=False) + "\n").encode()
