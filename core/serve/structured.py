"""Structured output and logprobs as the API asks for them (issue 34): a request's
``Constraint`` (a JSON object, or a JSON schema) checked here, on the controller, so a
schema the grammar library cannot compile is a 400 before any rank sees it; and the
``logprobs`` / ``top_logprobs`` fields. Pure: no server, no session.

The grammar library is llguidance (``docs/structured-output.md`` says why). The controller
compiles the schema to llguidance's grammar and validates it; the ranks get that grammar's
source (``generate``'s ``grammar``) and compile it again against their tokenizer
(``core.worker.constrain``): the compiled matcher is native and bound to a tokenizer,
which this Mac may not even have, and compiling takes milliseconds.

Other request shapes (tool calls: ``tool_choice`` "required" or a named function) make a
``Constraint`` with ``json_schema_constraint`` and put it on their ``Ask``; the worker
enforces any constraint alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from core.serve.errors import bad_request

MAX_TOP_LOGPROBS = 20  # as OpenAI
# The body fields that carry a schema: compiling one may take a second or two (a hostile
# schema near llguidance's limits), so such a body is parsed off the event loop.
# the request fields that can bring a schema to compile (``tools``: a forced call's)
SCHEMA_FIELDS = ("response_format", "format", "output_config", "output_format", "tools")
T = TypeVar("T")
# JSON as compact as OpenAI writes it: no run of whitespace for a small model to loop in.
_JSON_OPTIONS: dict[str, Any] = {"whitespace_flexible": False}


@dataclass(frozen=True)
class Constraint:
    """What an answer must be: ``json_object`` (any JSON object) or ``json_schema`` (one
    that validates against ``schema``), as the llguidance ``grammar`` that enforces it."""

    kind: Literal["json_object", "json_schema"]
    grammar: str
    schema: dict[str, Any] | None = None
    strict: bool = False


def json_schema_constraint(schema: Any, strict: bool, param: str) -> Constraint:
    """A constraint to a JSON schema, compiled now: a 400 naming ``param`` and the part
    the library refused when it cannot. ``strict`` false: keywords the library does not
    implement are ignored (the rest is enforced); true: they are refused."""
    if not isinstance(schema, dict):
        raise bad_request(f"'{param}' must be a JSON schema (an object).", param)
    return Constraint("json_schema", _compiled(schema, strict, param), schema, strict)


def json_object_constraint() -> Constraint:
    return Constraint("json_object", _compiled({"type": "object"}, True, "response_format"))


def _compiled(schema: dict[str, Any], strict: bool, param: str) -> str:
    from llguidance import LLMatcher

    options = dict(_JSON_OPTIONS, lenient=not strict)
    try:
        grammar = LLMatcher.grammar_from_json_schema(schema, defaults=options)  # type: ignore[arg-type]
        error = LLMatcher.validate_grammar(grammar)
    except (ValueError, TypeError, RecursionError) as refused:
        error = str(refused) or type(refused).__name__
    if error:
        said = " ".join(error.split())[:300]
        raise bad_request(
            f"'{param}' cannot be enforced: the grammar library refused {said!r}. "
            "Change or remove that part of the schema.",
            param,
            "invalid_schema",
        )
    return str(grammar)


def response_format(value: Any) -> Constraint | None:
    """OpenAI's ``response_format``: ``text`` (none), ``json_object`` or ``json_schema``
    ({name, schema, strict})."""
    param = "response_format"
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return json_object_constraint()
    if kind != "json_schema":
        raise bad_request(
            f"'{param}.type' must be 'text', 'json_object' or 'json_schema'.", f"{param}.type"
        )
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        raise bad_request(
            f"'{param}.json_schema' must be an object with 'name' and 'schema'.",
            f"{param}.json_schema",
        )
    strict = spec.get("strict", False)
    if not isinstance(strict, bool) and strict is not None:
        raise bad_request(
            f"'{param}.json_schema.strict' must be true or false.", f"{param}.json_schema.strict"
        )
    schema = spec.get("schema", {"type": "object"})
    return json_schema_constraint(schema, bool(strict), f"{param}.json_schema.schema")


def ollama_format(value: Any) -> Constraint | None:
    """Ollama's ``format``: ``"json"`` or a JSON schema."""
    if value is None or value == "":
        return None
    if value == "json":
        return json_object_constraint()
    if isinstance(value, dict):
        return json_schema_constraint(value, False, "format")
    raise bad_request("'format' must be \"json\" or a JSON schema (an object).", "format")


def anthropic_output(config: Any, beta: Any = None) -> Constraint | None:
    """Anthropic's ``output_config.format`` ({type: "json_schema", schema}), or the
    beta's ``output_format`` of the same shape."""
    if config is not None and not isinstance(config, dict):
        raise bad_request("'output_config' must be an object.", "output_config")
    value, param = (config or {}).get("format"), "output_config.format"
    if value is None and beta is not None:
        value, param = beta, "output_format"
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") != "json_schema":
        raise bad_request(f"'{param}' must be {{'type': 'json_schema', 'schema': {{...}}}}.", param)
    return json_schema_constraint(value.get("schema"), True, f"{param}.schema")


def chat_logprobs(body: dict[str, Any]) -> int | None:
    """Chat's ``logprobs`` (true/false) and ``top_logprobs`` (0-20): the alternatives
    per token to report, or None (none asked)."""
    wanted = body.get("logprobs")
    if wanted is not None and not isinstance(wanted, bool):
        raise bad_request("'logprobs' must be true or false.", "logprobs")
    top = _top(body.get("top_logprobs"), "top_logprobs")
    if top is not None and not wanted:
        raise bad_request("'top_logprobs' needs 'logprobs': true.", "top_logprobs")
    return (top or 0) if wanted else None


def completion_logprobs(body: dict[str, Any]) -> int | None:
    """Completions' ``logprobs``: how many alternatives per token (0-20), or None."""
    return _top(body.get("logprobs"), "logprobs")


def _top(value: Any, param: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"'{param}' must be a whole number from 0 to {MAX_TOP_LOGPROBS}.", param)
    if not 0 <= value <= MAX_TOP_LOGPROBS:
        raise bad_request(f"'{param}' must be from 0 to {MAX_TOP_LOGPROBS}.", param)
    return value


def worker_fields(constraint: Constraint | None, logprobs: int | None) -> dict[str, Any]:
    """The ``generate`` command's ``grammar`` (and ``json_object``: the worker closes
    such an object within ``max_tokens``) and ``logprobs``, when asked."""
    fields: dict[str, Any] = {}
    if constraint is not None:
        fields["grammar"] = constraint.grammar
        if constraint.kind == "json_object":  # closed before max_tokens: it always parses
            fields["json_object"] = True
    if logprobs is not None:
        fields["logprobs"] = logprobs
    return fields


def completion_logprobs_object(entries: list[dict[str, Any]], offset: int = 0) -> dict[str, Any]:
    """The legacy completions ``logprobs`` object from the worker's per-token entries:
    tokens, token_logprobs, top_logprobs (token -> logprob) and text_offset."""
    tokens, values, tops, offsets = [], [], [], []
    at = offset
    for entry in entries:
        tokens.append(entry["token"])
        values.append(entry["logprob"])
        tops.append({t["token"]: t["logprob"] for t in entry.get("top_logprobs", [])})
        offsets.append(at)
        at += len(entry["token"])
    return {
        "tokens": tokens,
        "token_logprobs": values,
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def chat_logprobs_object(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Chat's ``logprobs``: ``{"content": [entry, ...], "refusal": null}``."""
    return {"content": entries, "refusal": None}


async def parsed(
    parse: Callable[[dict[str, Any], str, int | None], T],
    body: dict[str, Any],
    model: str,
    context: int | None,
) -> T:
    """``parse(body, model, context)``, on a thread when the body carries a schema to
    compile (the other clients' streams go on meanwhile), else here."""
    if any(body.get(name) for name in SCHEMA_FIELDS):
        return await asyncio.to_thread(parse, body, model, context)
    return parse(body, model, context)
