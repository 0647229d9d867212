"""A request body → an ``Ask`` the cluster can answer, or an ``APIError`` (4xx) saying
which field is wrong and why. Pure: no server, no session; unit- and fuzz-tested.

A field this server does not act on is a 400 naming it ("not supported yet") when its
value would change what the answer means (``tools``, ``logit_bias``, ...:
``core.serve.fields``; ``response_format`` and ``logprobs`` are read by
``core.serve.structured``); fields that change nothing an answer says (``user``,
``metadata``, ...) and fields no dialect defines are ignored. A known field of the wrong
type or out of range is a 400 naming it. ``max_tokens`` above the model's context is a
400 here; a prompt longer than the context is found once tokenized (``core.serve.prompts``,
or the ranks when this Mac has no tokenizer) and is a 400 too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.serve.errors import bad_request, not_found
from core.serve.fields import (
    OPENAI_CHAT,
    OPENAI_COMPLETIONS,
    refuse_message_extras,
    refuse_unsupported,
)
from core.serve.structured import (
    Constraint,
    chat_logprobs,
    completion_logprobs,
    response_format,
)

if TYPE_CHECKING:
    from core.serve.tools import ToolSpec

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
MAX_STOPS = 4  # as OpenAI
DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's default for /v1/completions
FALLBACK_CONTEXT = 4096  # a model whose config does not say its context
# A \uD800-\uDFFF escape: the only way a lone surrogate gets into a body (raw UTF-8 cannot
# carry one); when there is none, the body needs no second look.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


@dataclass(frozen=True)
class Ask:
    """One answer to produce: a conversation (``messages``) or raw text (``prompt``)."""

    model: str
    max_tokens: int
    messages: list[dict[str, Any]] | None = None  # with tool calls and results (tools)
    prompt: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)  # temperature, top_p, seed, stop
    stream: bool = False
    include_usage: bool = False
    tools: ToolSpec | None = None  # the tools offered (core.serve.tools)
    constraint: Constraint | None = None  # the answer's grammar (core.serve.structured)
    logprobs: int | None = None  # report each token's logprob and this many alternatives

    @property
    def chat(self) -> bool:
        return self.messages is not None

    @property
    def question(self) -> str:
        """What the client asks now: its last user message (those before it are the
        conversation so far, already shown), or its prompt."""
        for message in reversed(self.messages or []):
            if message.get("role") == "user":
                return str(message.get("content", ""))
        return self.prompt or ""


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 saying what is wrong with it: not JSON, nested
    deeper than Python's parser goes, or holding a lone surrogate ("\\ud800", which no
    answer could encode)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise bad_request(
            f"The request body is not valid JSON ({error}). Send a JSON object."
        ) from None
    except RecursionError:
        raise bad_request(
            "The request body is nested too deeply. Send a flat JSON object."
        ) from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    if _SURROGATE_ESCAPE.search(raw):
        try:
            json.dumps(body, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise bad_request(
                "The request body holds a lone surrogate (such as \\ud800): every text must "
                "be valid Unicode."
            ) from None
        except RecursionError:
            raise bad_request(
                "The request body is nested too deeply. Send a flat JSON object."
            ) from None
    return body


def chat_request(body: dict[str, Any], model: str, context: int | None) -> Ask:
    """``POST /v1/chat/completions``."""
    check_model(body, model)
    refuse_unsupported(body, OPENAI_CHAT)
    refuse_message_extras(body.get("messages"), ("function_call", "audio"))
    chat = messages(body.get("messages"))
    limit = context or FALLBACK_CONTEXT
    wanted = _optional_int(body, "max_completion_tokens", 1)
    if wanted is None:
        wanted = _optional_int(body, "max_tokens", 1)
    return Ask(
        model=model,
        max_tokens=_within_context(wanted, limit, context),
        messages=chat,
        sampling=_sampling(body),
        stream=_stream(body),
        include_usage=_include_usage(body),
        constraint=response_format(body.get("response_format")),
        logprobs=chat_logprobs(body),
    )


def completion_request(body: dict[str, Any], model: str, context: int | None) -> Ask:
    """``POST /v1/completions``: raw text, no chat template."""
    check_model(body, model)
    refuse_unsupported(body, OPENAI_COMPLETIONS)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise bad_request("'prompt' must be a text (one prompt per request).", "prompt")
    wanted = _optional_int(body, "max_tokens", 1)
    if wanted is None:
        wanted = DEFAULT_COMPLETION_TOKENS
    return Ask(
        model=model,
        max_tokens=_within_context(wanted, context or FALLBACK_CONTEXT, context),
        prompt=prompt,
        sampling=_sampling(body),
        stream=_stream(body),
        include_usage=_include_usage(body),
        constraint=response_format(body.get("response_format")),
        logprobs=completion_logprobs(body),
    )


def check_model(body: dict[str, Any], model: str, param: str = "model") -> None:
    name = body.get(param)
    if name is None:
        raise bad_request(f"'{param}' is required: this server runs '{model}'.", param)
    if not isinstance(name, str):
        raise bad_request(f"'{param}' must be a text: this server runs '{model}'.", param)
    if name != model:
        raise not_found(
            f"The model '{name[:200]}' does not exist here: this cluster serves '{model}' "
            "(GET /v1/models).",
            code="model_not_found",
            param=param,
        )


def messages(value: Any, param: str = "messages") -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise bad_request(f"'{param}' must be a non-empty list of messages.", param)
    out = []
    for n, message in enumerate(value):
        where = f"{param}[{n}]"
        if not isinstance(message, dict):
            raise bad_request(f"'{where}' must be an object with 'role' and 'content'.", where)
        role = message.get("role")
        if not isinstance(role, str) or role not in ROLES:  # a list is no role (nor hashable)
            raise bad_request(
                f"'{where}.role' must be one of {', '.join(sorted(ROLES))}.", f"{where}.role"
            )
        out.append({"role": role, "content": text_content(message.get("content"), where)})
    return out


def text_content(content: Any, where: str) -> str:
    """A message's content: a text, or a list of text parts (other parts: a 400)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                text = part.get("text")
                if isinstance(text, str):
                    pieces.append(text)
                    continue
            raise bad_request(
                f"'{where}.content' may hold only text parts ({{'type': 'text', 'text': ...}}).",
                f"{where}.content",
            )
        return "".join(pieces)
    raise bad_request(f"'{where}.content' must be a text.", f"{where}.content")


def _within_context(wanted: int | None, limit: int, context: int | None) -> int:
    if wanted is None:
        return limit
    if wanted > limit:
        said = f"this model's context is {context} tokens" if context else f"at most {limit}"
        raise bad_request(
            f"max_tokens is too large: {wanted}; {said}.", "max_tokens", "context_length_exceeded"
        )
    return wanted


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
    sampling: dict[str, Any] = {}
    temperature = _optional_number(body, "temperature", 0.0, 2.0)
    if temperature is not None:
        sampling["temperature"] = temperature
    top_p = _optional_number(body, "top_p", 0.0, 1.0)
    if top_p is not None:
        sampling["top_p"] = top_p
    seed = _optional_int(body, "seed", None)
    if seed is not None:
        sampling["seed"] = seed
    stop = stops(body.get("stop"), "stop")
    if stop:
        sampling["stop"] = stop
    n = _optional_int(body, "n", 1)
    if n is not None and n != 1:
        raise bad_request("'n' must be 1: the cluster gives one answer per request.", "n")
    return sampling


def stops(value: Any, param: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if (
        not isinstance(value, list)
        or len(value) > MAX_STOPS
        or not all(isinstance(s, str) for s in value)
    ):
        raise bad_request(f"'{param}' must be a text or a list of up to {MAX_STOPS} texts.", param)
    return [s for s in value if s]


def _stream(body: dict[str, Any]) -> bool:
    value = body.get("stream")
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_request("'stream' must be true or false.", "stream")
    return value


def _include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object.", "stream_options")
    value = options.get("include_usage", False)
    if not isinstance(value, bool):
        raise bad_request("'stream_options.include_usage' must be true or false.", "stream_options")
    return value


def _optional_int(body: dict[str, Any], key: str, minimum: int | None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise bad_request(f"'{key}' must be a whole number.", key)
    if minimum is not None and value < minimum:
        raise bad_request(f"'{key}' must be at least {minimum}.", key)
    if abs(value) >= 1 << 63:
        raise bad_request(f"'{key}' is out of range.", key)
    return value


def _optional_number(body: dict[str, Any], key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        raise bad_request(f"'{key}' must be a number from {low:g} to {high:g}.", key)
    if not low <= value <= high:
        raise bad_request(f"'{key}' must be from {low:g} to {high:g}.", key)
    return float(value)
