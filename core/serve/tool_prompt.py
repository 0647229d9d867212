"""The prompt of a request with tools, rendered on the controller by the model's own chat
template with its ``tools=`` argument (as mlx-lm's server does), or refused.

- ``tool_choice`` auto: the model's template must know tools (mlx-lm knows its call
  format: ``has_tool_calling``); a model whose template has none is a 400 saying so and
  pointing to ``required`` (constrained decoding serves any model).
- forced (``required``, a named function): a template that knows tools gets them as
  ``tools=``; one that does not gets them in a system message, with the answer's shape
  (the JSON of one call, which the grammar enforces).
- ``none``: the tools are given to a template that knows them, and no call is read.

On a template without tools, earlier calls in the conversation are written into their
assistant message's text (the JSON of each call), so the model still sees them.
"""

from __future__ import annotations

import json
from typing import Any

from core.serve.errors import bad_request
from core.serve.requests import Ask
from core.serve.tool_calls import tool_format
from core.serve.tools import ToolSpec

NO_TOOLS = (
    "This model's chat template has no tool calling (mlx-lm knows no call format for it), "
    "so it cannot choose to call a tool: send tool_choice 'required' or a named function "
    "(the answer is then constrained to a call), or leave 'tools' out."
)
FORCED_SYSTEM = (
    "You can call these tools (JSON schemas of their arguments):\n{tools}\n"
    'Answer with one call, as JSON and nothing else: {{"name": <the tool\'s name>, '
    '"arguments": {{...}}}}.'
)


def tool_prompt_ids(tokenizer: Any, ask: Ask) -> list[int]:
    """The ids of ``ask``'s prompt (it has ``tools``) through the model's template."""
    spec = ask.tools
    assert spec is not None and ask.messages is not None
    knows_tools = tool_format(tokenizer) is not None
    if not knows_tools and not spec.forced and spec.choice != "none":
        raise bad_request(NO_TOOLS, "tools", "tools_unsupported")
    if not getattr(tokenizer, "chat_template", None):
        raise bad_request("This model has no chat template to give tools to.", "tools")
    if knows_tools:
        ids = tokenizer.apply_chat_template(
            ask.messages, tools=spec.listed, add_generation_prompt=True
        )
    else:
        chat = _with_tools_said(_calls_as_text(ask.messages), spec)
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True)
    return [int(t) for t in ids]


def _calls_as_text(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each earlier call as JSON in its message's text; results as plain turns."""
    out = []
    for message in messages:
        calls = message.get("tool_calls") or []
        said = [
            json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]})
            for c in calls
        ]
        content = "\n".join([message["content"], *said] if message["content"] else said)
        out.append({"role": message["role"], "content": content})
    return out


def _with_tools_said(messages: list[dict[str, Any]], spec: ToolSpec) -> list[dict[str, Any]]:
    if not spec.forced:
        return messages
    tools = [
        {
            "name": t["function"]["name"],
            "description": t["function"].get("description", ""),
            "parameters": t["function"].get("parameters", {}),
        }
        for t in spec.tools
        if spec.choice == "required" or t["function"]["name"] == spec.choice
    ]
    said = FORCED_SYSTEM.format(tools=json.dumps(tools, ensure_ascii=False))
    if messages and messages[0]["role"] == "system":
        first = {**messages[0], "content": messages[0]["content"] + "\n\n" + said}
        return [first, *messages[1:]]
    return [{"role": "system", "content": said}, *messages]
