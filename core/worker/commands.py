"""The controller's commands to rank 0's stdin (``core.worker.protocol`` describes the
wire): one JSON object a line, ``op`` naming it; ``encode_command`` writes one and
``parse_command`` reads one, checking its fields (a ValueError with a readable reason)."""

from __future__ import annotations

import json
from typing import Any

from core.worker.events import _number
from core.worker.settings import (
    MAX_GRAMMAR_CHARS,
    MAX_LINK_BYTES,
    MAX_LINK_SIZES,
    MAX_PROMPT_IDS,
    MAX_TOP_LOGPROBS,
)

# Command ops.
OP_GENERATE = "generate"
OP_LINK_TEST = "link_test"
OP_STOP = "stop"
OP_JOIN = "join"
OP_CANCEL = "cancel"
OPS = frozenset({OP_GENERATE, OP_LINK_TEST, OP_STOP, OP_JOIN, OP_CANCEL})


def encode_command(op: str, **fields: Any) -> str:
    if op not in OPS:
        raise ValueError(f"unknown worker command {op!r}")
    return json.dumps({"op": op, **fields}, separators=(",", ":"), ensure_ascii=False) + "\n"


def parse_command(line: str) -> dict[str, Any]:
    """A stdin line -> a command dict. Raises ValueError with a readable reason."""
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(record, dict) or record.get("op") not in OPS:
        raise ValueError(f"not a command (expected 'op' in {sorted(OPS)})")
    if record["op"] == OP_GENERATE:
        _check_generate(record)
    elif record["op"] == OP_CANCEL:
        if not isinstance(record.get("id"), str):
            raise ValueError("'id' must name the request to cancel")
    elif record["op"] == OP_LINK_TEST:
        _check_link_test(record)
    return record


def _check_link_test(record: dict[str, Any]) -> None:
    sizes = record.get("sizes")
    if sizes is not None and (
        not isinstance(sizes, list)
        or not 0 < len(sizes) <= MAX_LINK_SIZES
        or not all(_positive_int(n) and n <= MAX_LINK_BYTES for n in sizes)
    ):
        raise ValueError(
            f"'sizes' must list 1 to {MAX_LINK_SIZES} message sizes of 1 byte to 1 GiB"
        )
    pairs = record.get("pairs")
    if pairs is not None and (
        not isinstance(pairs, list)
        or not all(
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in pair)
            and pair[0] != pair[1]
            for pair in pairs
        )
    ):
        raise ValueError("'pairs' must list pairs of two different ranks, e.g. [[0, 1]]")
    scale = record.get("scale", 1)
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not 0 < scale <= 10:
        raise ValueError("'scale' must be a number above 0, at most 10")


def _check_generate(record: dict[str, Any]) -> None:
    """A request that would fail mid-generation on every rank is refused up front."""
    tokens = record.get("tokens")
    if tokens is not None and (
        not isinstance(tokens, list)
        or len(tokens) > MAX_PROMPT_IDS
        or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens)
    ):
        raise ValueError(f"'tokens' must be a list of up to {MAX_PROMPT_IDS} token ids")
    tenant = record.get("tenant")
    if tenant is not None and (not isinstance(tenant, str) or not 0 < len(tenant) <= 64):
        raise ValueError("'tenant' must be a text of 1 to 64 characters")
    if "max_tokens" in record and not _positive_int(record["max_tokens"]):
        raise ValueError("'max_tokens' must be a positive whole number")
    messages = record.get("messages")
    if messages is not None:
        if not isinstance(messages, list) or not all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
            for m in messages
        ):
            raise ValueError("'messages' must be a list of {role, content} texts")
    elif not isinstance(record.get("prompt", ""), str):
        raise ValueError("'prompt' must be text")
    for key in ("temperature", "top_p"):
        if key in record and not _number(record[key]):
            raise ValueError(f"{key!r} must be a number")
    if "seed" in record and not (
        isinstance(record["seed"], int) and not isinstance(record["seed"], bool)
    ):
        raise ValueError("'seed' must be a whole number")
    stop = record.get("stop", [])
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise ValueError("'stop' must be a list of non-empty texts")
    if "grammar" in record and not (
        isinstance(record["grammar"], str) and 0 < len(record["grammar"]) <= MAX_GRAMMAR_CHARS
    ):
        raise ValueError(f"'grammar' must be a text of 1 to {MAX_GRAMMAR_CHARS} characters")
    if "logprobs" in record and not (
        isinstance(record["logprobs"], int)
        and not isinstance(record["logprobs"], bool)
        and 0 <= record["logprobs"] <= MAX_TOP_LOGPROBS
    ):
        raise ValueError(f"'logprobs' must be a whole number from 0 to {MAX_TOP_LOGPROBS}")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
