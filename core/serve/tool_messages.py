"""A conversation's tool turns, as each dialect sends them → the messages chat templates
take (Hugging Face's shape, which mlx-lm's server uses too): an assistant message's
``tool_calls`` (``{"id", "type": "function", "function": {"name", "arguments": {...}}}``,
its arguments an object) and ``tool`` messages with ``tool_call_id`` (and the called
function's ``name``, which some templates print). A malformed turn is a 400 naming it.

- OpenAI: ``tool_calls`` on assistant messages (arguments a JSON text), ``tool`` messages
  with ``tool_call_id``.
- Anthropic: ``tool_use`` blocks in an assistant's content, ``tool_result`` blocks in a
  user's (each becomes a ``tool`` message, before the user's text).
- Ollama: ``tool_calls`` on assistant messages (arguments an object), ``tool`` messages
  (``tool_name``).
"""

from __future__ import annotations

import json
from typing import Any

from core.serve.errors import bad_request
from core.serve.requests import ROLES, text_content
from core.serve.requests import messages as plain_messages

Message = dict[str, Any]


def openai_messages(value: Any, param: str = "messages") -> list[Message]:
    """OpenAI's messages, with their tool calls and results."""
    return _with_calls(value, param, arguments_as_text=True)


def ollama_messages(value: Any, param: str = "messages") -> list[Message]:
    """Ollama's messages, with their tool calls (arguments objects) and results."""
    return _with_calls(value, param, arguments_as_text=False)


def anthropic_messages(value: Any, param: str = "messages") -> list[Message]:
    """Anthropic's messages: ``tool_use`` and ``tool_result`` blocks as tool turns."""
    if not isinstance(value, list) or not value:
        raise bad_request(f"'{param}' must be a non-empty list of messages.", param)
    out: list[Message] = []
    names: dict[str, str] = {}
    for n, message in enumerate(value):
        where = f"{param}[{n}]"
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list) or not any(
            isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result") for b in content
        ):
            out.append(_plain(message, where))
            continue
        role = message.get("role")
        texts, calls, results = [], [], []
        for k, block in enumerate(content):
            at = f"{where}.content[{k}]"
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "tool_use" and role == "assistant":
                call_id = _id(block.get("id"), f"{at}.id")
                name = _text(block.get("name"), f"{at}.name")
                arguments = block.get("input", {})
                if not isinstance(arguments, dict):
                    raise bad_request(f"'{at}.input' must be an object.", f"{at}.input")
                names[call_id] = name
                calls.append(_call(call_id, name, arguments))
            elif kind == "tool_result" and role == "user":
                call_id = _id(block.get("tool_use_id"), f"{at}.tool_use_id")
                said = text_content(block.get("content"), at)
                if block.get("is_error") is True:
                    said = f"Error: {said}"
                results.append(_result(call_id, said, names.get(call_id)))
            else:
                raise bad_request(
                    f"'{at}' must be a text block, a tool_use block (assistant) or a "
                    "tool_result block (user).",
                    at,
                )
        if role == "assistant":
            out.append({"role": "assistant", "content": "".join(texts), "tool_calls": calls})
        else:
            out.extend(results)
            if texts:
                out.append({"role": "user", "content": "".join(texts)})
    return out


def _with_calls(value: Any, param: str, arguments_as_text: bool) -> list[Message]:
    out: list[Message] = list(plain_messages(value, param))
    names: dict[str, str] = {}
    for n, message in enumerate(value):
        where = f"{param}[{n}]"
        role = out[n]["role"]
        calls = message.get("tool_calls")
        if calls not in (None, []):
            if role != "assistant":
                raise bad_request(
                    f"'{where}.tool_calls' belongs to an assistant message.", f"{where}.tool_calls"
                )
            if not isinstance(calls, list):
                raise bad_request(f"'{where}.tool_calls' must be a list.", f"{where}.tool_calls")
            made = []
            for k, call in enumerate(calls):
                made.append(_given_call(call, f"{where}.tool_calls[{k}]", arguments_as_text, k))
                names[made[-1]["id"]] = made[-1]["function"]["name"]
            out[n] = {**out[n], "tool_calls": made}
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id is None and not arguments_as_text:  # Ollama names the tool instead
                name = message.get("tool_name") or message.get("name")
                out[n] = {**out[n], **({"name": name} if isinstance(name, str) else {})}
                continue
            call_id = _id(call_id, f"{where}.tool_call_id")
            out[n] = _result(call_id, out[n]["content"], names.get(call_id))
    return out


def _plain(message: Any, where: str) -> Message:
    """One message without tool blocks, as ``core.serve.requests.messages`` reads it."""
    role = message.get("role") if isinstance(message, dict) else None
    if not isinstance(role, str) or role not in ROLES:
        raise bad_request(
            f"'{where}.role' must be one of {', '.join(sorted(ROLES))}.", f"{where}.role"
        )
    return {"role": role, "content": text_content(message.get("content"), where)}


def _given_call(call: Any, where: str, arguments_as_text: bool, index: int) -> Message:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise bad_request(
            f"'{where}' must be {{'id': ..., 'type': 'function', 'function': {{'name': ..., "
            "'arguments': ...}}.",
            where,
        )
    function = call["function"]
    name = _text(function.get("name"), f"{where}.function.name")
    arguments = function.get("arguments", {} if not arguments_as_text else "{}")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            raise bad_request(
                f"'{where}.function.arguments' must be a JSON object's text.",
                f"{where}.function.arguments",
            ) from None
    if not isinstance(arguments, dict):
        raise bad_request(
            f"'{where}.function.arguments' must be a JSON object.", f"{where}.function.arguments"
        )
    call_id = call.get("id")
    if call_id is None and not arguments_as_text:  # Ollama's calls have no id
        call_id = f"call_{index}"
    return _call(_id(call_id, f"{where}.id"), name, arguments)


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> Message:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _result(call_id: str, content: str, name: str | None) -> Message:
    result: Message = {"role": "tool", "content": content, "tool_call_id": call_id}
    if name is not None:
        result["name"] = name
    return result


def _id(value: Any, param: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= 256:
        raise bad_request(f"'{param}' must be a text of 1 to 256 characters.", param)
    return value


def _text(value: Any, param: str) -> str:
    if not isinstance(value, str) or not value:
        raise bad_request(f"'{param}' must be a non-empty text.", param)
    return value
