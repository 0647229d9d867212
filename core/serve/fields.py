"""The request fields each dialect knows and this server does not act on: refused with a
400 naming the field when a value would change the answer's meaning (the client would get
an answer that silently is not what it asked for), or ignored on purpose when it changes
nothing an answer says. The README's table of fields is this module's."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from core.serve.errors import bad_request


def _set(value: Any) -> bool:
    """A value that asks for something (not the field's do-nothing default)."""
    return value not in (None, False, 0, "", [], {})


def _not_auto(value: Any) -> bool:
    return _set(value) and value not in ("none", "auto")


def _not_one(value: Any) -> bool:
    return _set(value) and value != 1


def _not_text_modality(value: Any) -> bool:
    return _set(value) and value != ["text"]


Check = Callable[[Any], bool]

# Field -> when a value is refused. Fields of each dialect that no list names are ignored.
OPENAI_CHAT: Mapping[str, Check] = {
    "functions": _set,
    "function_call": _not_auto,
    "logit_bias": _set,
    "frequency_penalty": _set,
    "presence_penalty": _set,
    "prediction": _set,
    "audio": _set,
    "modalities": _not_text_modality,
    "reasoning_effort": _set,
    "web_search_options": _set,
    "verbosity": lambda v: _set(v) and v != "medium",
    "moderation": _set,
}
OPENAI_COMPLETIONS: Mapping[str, Check] = {
    "echo": _set,
    "suffix": _set,
    "best_of": _not_one,
    "logit_bias": _set,
    "frequency_penalty": _set,
    "presence_penalty": _set,
}
ANTHROPIC: Mapping[str, Check] = {
    "thinking": _set,
    "top_k": _set,
    "container": _set,
}
OLLAMA: Mapping[str, Check] = {
    "logprobs": _set,
    "top_logprobs": _set,
    "think": _set,
    "suffix": _set,
    "raw": _set,
}
OLLAMA_OPTIONS: Mapping[str, Check] = {
    "top_k": _set,
    "min_p": _set,
    "typical_p": _set,
    "repeat_penalty": lambda v: _set(v) and v != 1,
    "repeat_last_n": _set,
    "presence_penalty": _set,
    "frequency_penalty": _set,
    "mirostat": _set,
    "penalize_newline": _set,
}
# Ignored on purpose (documented): they change nothing an answer says.
IGNORED = {
    "OpenAI": (
        "user",
        "metadata",
        "store",
        "service_tier",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
    ),
    "Anthropic": (
        "metadata",
        "service_tier",
        "cache_control",
        "inference_geo",
        "speed",
        "diagnostics",
        "user_profile_id",
        "workspace_id",
    ),
    "Ollama": ("keep_alive", "options.num_ctx", "options.num_thread", "options.num_gpu"),
}


def refuse_unsupported(
    body: Mapping[str, Any], fields: Mapping[str, Check], prefix: str = ""
) -> None:
    """A 400 naming the first field of ``fields`` whose value asks for what this server
    does not do yet."""
    for name, refused in fields.items():
        if name in body and refused(body[name]):
            where = prefix + name
            raise bad_request(
                f"'{where}' is not supported yet: this server would answer without it. "
                "Leave it out (the README lists the fields it reads).",
                where,
                "unsupported_parameter",
            )


def refuse_message_extras(messages: Any, keys: tuple[str, ...], param: str = "messages") -> None:
    """A 400 naming a message field (Ollama's ``images``, OpenAI's ``tool_calls``) that
    this server would otherwise drop."""
    if not isinstance(messages, list):
        return
    for n, message in enumerate(messages):
        if isinstance(message, dict):
            for key in keys:
                if _set(message.get(key)):
                    where = f"{param}[{n}].{key}"
                    raise bad_request(
                        f"'{where}' is not supported yet: this server would answer without "
                        "it. Leave it out (the README lists the fields it reads).",
                        where,
                        "unsupported_parameter",
                    )
