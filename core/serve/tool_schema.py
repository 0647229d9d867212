"""The JSON schema of one valid tool call, for constrained decoding: where a request's
``tool_choice`` is ``required`` (or Anthropic's ``any``) or names a function, the answer
must be one call of the given tools, and the grammar (``response_format``'s constrained
decoding) enforces this schema on it. The answer is then the JSON of the call itself,
``{"name": ..., "arguments": {...}}``, whatever the model's own call format, so even a
model whose template has no tools can be made to call one.

The interface with the sampling side is ``constraint(schema)``: the fields merged into the
request's ``sampling`` (the worker's generate command) that make the ranks that sample keep
to the schema, as they do for ``response_format: json_schema``: the grammar
``core.serve.structured`` compiles (a 400 naming ``tools`` for a schema the library
refuses).
"""

from __future__ import annotations

from typing import Any

from core.serve.structured import json_schema_constraint, worker_fields


def call_schema(tools: list[dict[str, Any]], tool_choice: str | dict[str, Any]) -> dict[str, Any]:
    """The schema of one call of ``tools`` (OpenAI's ``[{"type": "function", "function":
    {name, parameters}}]``, validated) that ``tool_choice`` allows: any of them
    (``"required"``) or the one it names (``"name"``, or OpenAI's ``{"type": "function",
    "function": {"name": ...}}``). Each alternative ties the name to its own arguments."""
    wanted = chosen_name(tool_choice)
    options = []
    for tool in tools:
        function = tool["function"]
        if wanted is not None and function["name"] != wanted:
            continue
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": function["name"]}, "arguments": parameters},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    if not options:
        raise ValueError(f"no tool named {wanted!r}")
    return options[0] if len(options) == 1 else {"anyOf": options}


def chosen_name(tool_choice: str | dict[str, Any]) -> str | None:
    """The function ``tool_choice`` names (None: any)."""
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return str(function["name"])
        return None
    if tool_choice in ("required", "auto", "none"):
        return None
    return tool_choice


def constraint(schema: dict[str, Any]) -> dict[str, Any]:
    """The sampling fields that make the ranks' sampler keep to ``schema``."""
    return worker_fields(json_schema_constraint(schema, True, "tools"), None)
