"""The controller's commands to rank 0's stdin (``core.worker.protocol`` describes the
wire): one JSON object a line, ``op`` naming it; each op a ``TypedDict`` (``Command`` is
their union), as the events are. ``encode_command`` writes one; ``parse_command`` reads one
through the events' machinery (``core.worker.typedjson``: each field of its declared type)
and then the bounds a type cannot say, refusing with a readable reason (a ValueError)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final, Literal, NotRequired, TypeAlias, TypedDict, cast

from core.worker.settings import (
    MAX_GRAMMAR_CHARS,
    MAX_LINK_BYTES,
    MAX_LINK_SIZES,
    MAX_PROMPT_IDS,
    MAX_TOP_LOGPROBS,
)
from core.worker.typedjson import mismatch

# Command ops (``Final``: a comparison with one narrows a ``Command`` to that op).
OP_GENERATE: Final = "generate"
OP_LINK_TEST: Final = "link_test"
OP_STOP: Final = "stop"
OP_JOIN: Final = "join"
OP_CANCEL: Final = "cancel"
OPS = frozenset({OP_GENERATE, OP_LINK_TEST, OP_STOP, OP_JOIN, OP_CANCEL})


class ChatMessage(TypedDict):
    role: str
    content: str


class GenerateCommand(TypedDict):
    """One answer to generate: a prompt (``prompt``, ``messages`` or ready ``tokens``)
    and how to sample it."""

    op: Literal["generate"]
    id: str
    prompt: NotRequired[str]
    messages: NotRequired[list[ChatMessage] | None]
    tokens: NotRequired[list[int] | None]  # the prompt rendered and tokenized already
    chat: NotRequired[bool]  # through the chat template (default) or as it is
    max_tokens: NotRequired[int]
    temperature: NotRequired[float]
    top_p: NotRequired[float]
    seed: NotRequired[int]
    stop: NotRequired[list[str]]
    tenant: NotRequired[str | None]  # whose prompt cache entries it may use
    grammar: NotRequired[str]
    json_object: NotRequired[bool]  # the grammar is any JSON object: closed by max_tokens
    logprobs: NotRequired[int]  # the top alternatives per token to report


class CancelCommand(TypedDict):
    op: Literal["cancel"]
    id: str  # the request to end at its next token


class LinkTestCommand(TypedDict):
    op: Literal["link_test"]
    id: str
    sizes: NotRequired[list[int] | None]  # message sizes, bytes
    pairs: NotRequired[list[list[int]] | None]  # [[0, 1], …]: pairs of ranks
    scale: NotRequired[float]  # the bytes moved at each size, scaled


class StopCommand(TypedDict):
    op: Literal["stop"]


class JoinCommand(TypedDict):
    op: Literal["join"]


Command: TypeAlias = GenerateCommand | CancelCommand | LinkTestCommand | StopCommand | JoinCommand

_KINDS: dict[str, type] = {
    OP_GENERATE: GenerateCommand,
    OP_CANCEL: CancelCommand,
    OP_LINK_TEST: LinkTestCommand,
    OP_STOP: StopCommand,
    OP_JOIN: JoinCommand,
}


def encode_command(op: str, **fields: Any) -> str:
    if op not in OPS:
        raise ValueError(f"unknown worker command {op!r}")
    return json.dumps({"op": op, **fields}, separators=(",", ":"), ensure_ascii=False) + "\n"


def parse_command(line: str) -> Command:
    """A stdin line -> its typed command. Raises ValueError with a readable reason."""
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    except RecursionError:
        raise ValueError("not JSON: nested too deeply") from None
    if not isinstance(record, dict) or record.get("op") not in OPS:
        raise ValueError(f"not a command (expected 'op' in {sorted(OPS)})")
    reason = mismatch(record, _KINDS[record["op"]])
    if reason is None:
        reason = _BOUNDS.get(record["op"], _no_bounds)(record)
    if reason is not None:
        raise ValueError(reason)
    return cast(Command, record)  # checked against its op's TypedDict just above


# -- what a type cannot say: bounds, lengths, non-empty ------------------------------------


def _generate_bounds(record: dict[str, Any]) -> str | None:
    """A request that would fail mid-generation on every rank is refused up front."""
    tokens = record.get("tokens")
    if tokens is not None and (len(tokens) > MAX_PROMPT_IDS or any(t < 0 for t in tokens)):
        return f"'tokens' must be a list of up to {MAX_PROMPT_IDS} token ids"
    tenant = record.get("tenant")
    if tenant is not None and not 0 < len(tenant) <= 64:
        return "'tenant' must be a text of 1 to 64 characters"
    if record.get("max_tokens", 1) <= 0:
        return "'max_tokens' must be a positive whole number"
    if not all(record.get("stop", [])):
        return "'stop' must be a list of non-empty texts"
    if "grammar" in record and not 0 < len(record["grammar"]) <= MAX_GRAMMAR_CHARS:
        return f"'grammar' must be a text of 1 to {MAX_GRAMMAR_CHARS} characters"
    if record.get("json_object") and "grammar" not in record:
        return "'json_object' needs the 'grammar' it closes"
    if not 0 <= record.get("logprobs", 0) <= MAX_TOP_LOGPROBS:
        return f"'logprobs' must be a whole number from 0 to {MAX_TOP_LOGPROBS}"
    return None


def _link_test_bounds(record: dict[str, Any]) -> str | None:
    sizes = record.get("sizes")
    if sizes is not None and (
        not 0 < len(sizes) <= MAX_LINK_SIZES or not all(0 < n <= MAX_LINK_BYTES for n in sizes)
    ):
        return f"'sizes' must list 1 to {MAX_LINK_SIZES} message sizes of 1 byte to 1 GiB"
    pairs = record.get("pairs")
    if pairs is not None and not all(
        len(pair) == 2 and min(pair) >= 0 and pair[0] != pair[1] for pair in pairs
    ):
        return "'pairs' must list pairs of two different ranks, e.g. [[0, 1]]"
    if not 0 < record.get("scale", 1) <= 10:
        return "'scale' must be a number above 0, at most 10"
    return None


def _no_bounds(record: dict[str, Any]) -> str | None:
    return None


_BOUNDS: dict[str, Callable[[dict[str, Any]], str | None]] = {
    OP_GENERATE: _generate_bounds,
    OP_LINK_TEST: _link_test_bounds,
}
