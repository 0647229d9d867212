"""A request's tools, as each dialect sends them → one ``ToolSpec`` (OpenAI's shape, which
the chat templates take as their ``tools=``), or a 400 naming the field that is wrong.

- OpenAI: ``tools`` (``{"type": "function", "function": {name, description, parameters,
  strict}}``), ``tool_choice`` (``auto``, ``none``, ``required``, or ``{"type":
  "function", "function": {"name": ...}}``) and ``parallel_tool_calls``.
- Anthropic: ``tools`` (``{name, description, input_schema}``) and ``tool_choice``
  (``{"type": "auto" | "any" | "tool" | "none", "name", "disable_parallel_tool_use"}``).
- Ollama: ``tools`` in OpenAI's shape; no choice (``auto``).

``required`` (Anthropic's ``any``) and a named function are *forced*: the answer must be
one call, and the request carries the call's JSON schema for constrained decoding
(``core.serve.tool_schema``). Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from core.serve.errors import bad_request
from core.serve.tool_schema import call_schema, constraint

MAX_TOOLS = 128  # as OpenAI
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's and Anthropic's rule for a name
CHOICES = ("auto", "none", "required")


@dataclass(frozen=True)
class ToolSpec:
    """The tools a request offers and what it asks of them."""

    tools: tuple[dict[str, Any], ...]  # OpenAI's shape, validated
    choice: str = "auto"  # auto, none, required, or the name of the function to call
    parallel: bool = True  # more than one call in an answer

    @property
    def forced(self) -> bool:
        """The answer must be one call (``required`` or a named function)."""
        return self.choice not in ("auto", "none")

    @property
    def names(self) -> list[str]:
        return [tool["function"]["name"] for tool in self.tools]

    @property
    def listed(self) -> list[dict[str, Any]]:
        """The tools as the chat template's ``tools=`` takes them."""
        return [dict(tool) for tool in self.tools]

    def schema(self) -> dict[str, Any]:
        """The JSON schema of a call this request allows (forced requests)."""
        return call_schema(self.listed, self.choice)

    def sampling(self) -> dict[str, Any]:
        """The sampling fields to send with a forced request (its constraint)."""
        return constraint(self.schema()) if self.forced else {}


def openai_tools(body: dict[str, Any]) -> ToolSpec | None:
    """``tools``, ``tool_choice``, ``parallel_tool_calls`` of a chat completion."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools is None or tools == []:
        if choice not in (None, "auto", "none"):
            raise bad_request("'tool_choice' needs 'tools': give the tools to call.", "tool_choice")
        return None
    listed = _listed(tools, "tools")
    checked = tuple(_openai_tool(tool, f"tools[{n}]") for n, tool in enumerate(listed))
    _unique(checked, "tools")
    return ToolSpec(
        checked,
        _openai_choice(choice, checked),
        _flag(body.get("parallel_tool_calls"), "parallel_tool_calls", True),
    )


def anthropic_tools(body: dict[str, Any]) -> ToolSpec | None:
    """Anthropic's ``tools`` and ``tool_choice``, in OpenAI's shape."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools is None or tools == []:
        if choice is not None and _choice_type(choice) not in ("auto", "none"):
            raise bad_request("'tool_choice' needs 'tools': give the tools to call.", "tool_choice")
        return None
    checked: list[dict[str, Any]] = []
    for n, tool in enumerate(_listed(tools, "tools")):
        where = f"tools[{n}]"
        if not isinstance(tool, dict):
            raise bad_request(f"'{where}' must be an object with 'name' and 'input_schema'.", where)
        if tool.get("type") not in (None, "custom"):
            raise bad_request(
                f"'{where}.type' is {str(tool.get('type'))[:60]!r}: this server runs client "
                "tools only (name, description, input_schema), not Anthropic's server tools.",
                f"{where}.type",
                "unsupported_parameter",
            )
        function: dict[str, Any] = {"name": _name(tool.get("name"), f"{where}.name")}
        description = tool.get("description")
        if description is not None:
            function["description"] = _text(description, f"{where}.description")
        function["parameters"] = _schema(tool.get("input_schema"), f"{where}.input_schema", True)
        checked.append({"type": "function", "function": function})
    spec = tuple(checked)
    _unique(spec, "tools")
    if choice is None:
        return ToolSpec(spec)
    if not isinstance(choice, dict):
        raise bad_request("'tool_choice' must be an object with a 'type'.", "tool_choice")
    kind = _choice_type(choice)
    parallel = not _flag(
        choice.get("disable_parallel_tool_use"), "tool_choice.disable_parallel_tool_use", False
    )
    if kind in ("auto", "none"):
        return ToolSpec(spec, kind, parallel)
    if kind == "any":
        return ToolSpec(spec, "required", parallel)
    if kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or name not in [t["function"]["name"] for t in spec]:
            raise bad_request("'tool_choice.name' must name one of the tools.", "tool_choice.name")
        return ToolSpec(spec, name, parallel)
    raise bad_request(
        "'tool_choice.type' must be one of auto, any, tool, none.", "tool_choice.type"
    )


def ollama_tools(body: dict[str, Any]) -> ToolSpec | None:
    """Ollama's ``tools`` (OpenAI's shape); the model chooses (``auto``)."""
    tools = body.get("tools")
    if tools is None or tools == []:
        return None
    listed = _listed(tools, "tools")
    checked = tuple(_openai_tool(tool, f"tools[{n}]") for n, tool in enumerate(listed))
    _unique(checked, "tools")
    return ToolSpec(checked)


# -- parts --------------------------------------------------------------------------------


def _listed(value: Any, param: str) -> list[Any]:
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        raise bad_request(f"'{param}' must be a list of up to {MAX_TOOLS} tools.", param)
    return value


def _openai_tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise bad_request(
            f"'{where}' must be {{'type': 'function', 'function': {{'name': ..., "
            "'parameters': ...}}: the only kind of tool there is.",
            where,
        )
    given = tool.get("function")
    if not isinstance(given, dict):
        raise bad_request(f"'{where}.function' must be an object.", f"{where}.function")
    function: dict[str, Any] = {"name": _name(given.get("name"), f"{where}.function.name")}
    if given.get("description") is not None:
        function["description"] = _text(given["description"], f"{where}.function.description")
    if given.get("parameters") is not None:
        function["parameters"] = _schema(given["parameters"], f"{where}.function.parameters")
    _flag(given.get("strict"), f"{where}.function.strict", False)
    return {"type": "function", "function": function}


def _openai_choice(choice: Any, tools: tuple[dict[str, Any], ...]) -> str:
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        if choice not in CHOICES:
            raise bad_request(
                "'tool_choice' must be auto, none, required, or {'type': 'function', "
                "'function': {'name': ...}}.",
                "tool_choice",
            )
        return choice
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or name is None:
        raise bad_request(
            "'tool_choice' must be auto, none, required, or {'type': 'function', "
            "'function': {'name': ...}}.",
            "tool_choice",
        )
    if name not in [t["function"]["name"] for t in tools]:
        raise bad_request(
            f"'tool_choice' names {str(name)[:64]!r}, which is not one of the tools.",
            "tool_choice",
        )
    return str(name)


def _choice_type(choice: Any) -> Any:
    return choice.get("type") if isinstance(choice, dict) else None


def _name(value: Any, param: str) -> str:
    if not isinstance(value, str) or not NAME.match(value):
        raise bad_request(f"'{param}' must be 1 to 64 letters, digits, '_' or '-'.", param)
    return value


def _text(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise bad_request(f"'{param}' must be a text.", param)
    return value


def _schema(value: Any, param: str, required: bool = False) -> dict[str, Any]:
    if value is None and not required:
        return {"type": "object", "properties": {}}
    if not isinstance(value, dict):
        raise bad_request(f"'{param}' must be a JSON schema (an object).", param)
    if value.get("type", "object") != "object":
        raise bad_request(f"'{param}' must describe an object ('type': 'object').", param)
    return value


def _flag(value: Any, param: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"'{param}' must be true or false.", param)
    return value


def _unique(tools: tuple[dict[str, Any], ...], param: str) -> None:
    names = [tool["function"]["name"] for tool in tools]
    for name in names:
        if names.count(name) > 1:
            raise bad_request(f"'{param}' names the tool {name!r} twice.", param)
