"""An answer's text → the prose to show and the tool calls it makes, as it streams.

The model's own call format is mlx-lm's: its tokenizer wrapper says whether the model
calls tools (``has_tool_calling``), the markers around a call (``tool_call_start`` /
``tool_call_end``) and the parser that reads one (``mlx_lm/tool_parsers``). The text is
split at the markers by mlx-lm's own ``TextStateMachine`` (a marker cut across two tokens
is held back until it is known), the text between them parsed by the model's parser.

A forced answer (``tool_choice`` required or a named function) is the call's JSON itself,
``{"name": ..., "arguments": {...}}`` (``core.serve.tool_schema``: constrained decoding
keeps it to that schema), read whole at the end; an answer that is not a call of the
given tools is ``NotACall``. An unforced call that the parser cannot read stays in the
text, as the model wrote it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.serve.tools import ToolSpec

FRAGMENT = 24  # characters of a call's arguments per streamed fragment


@dataclass(frozen=True)
class ToolFormat:
    """How a model writes its calls: mlx-lm's parser ``name``, markers and parser."""

    name: str
    start: str
    end: str
    parse: Callable[[str, Any], Any]


def tool_format(tokenizer: Any) -> ToolFormat | None:
    """The call format of mlx-lm's tokenizer wrapper ``tokenizer`` (None: it has none)."""
    if tokenizer is None or not getattr(tokenizer, "has_tool_calling", False):
        return None
    parse = tokenizer.tool_parser
    name = str(getattr(parse, "__module__", "") or "").rsplit(".", 1)[-1] or "unknown"
    return ToolFormat(name, tokenizer.tool_call_start, tokenizer.tool_call_end or "", parse)


@dataclass(frozen=True)
class Call:
    """One call the answer makes."""

    name: str
    arguments: dict[str, Any]
    key: str = field(default_factory=lambda: secrets.token_hex(12))

    @property
    def id(self) -> str:
        return f"call_{self.key}"

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)

    def fragments(self) -> list[str]:
        """The arguments' JSON in pieces, as a stream sends them."""
        text = self.arguments_json
        return [text[i : i + FRAGMENT] for i in range(0, len(text), FRAGMENT)] or [""]


Piece = str | Call  # text to show, or a call


class NotACall(Exception):
    """A forced answer that is not a call of the request's tools."""


class CallReader:
    """Reads one answer's text, piece by piece (``feed``), then ``end``."""

    def __init__(self, spec: ToolSpec, form: ToolFormat | None) -> None:
        self.spec, self.form = spec, form
        self.calls: list[Call] = []
        self._whole: list[str] = []  # a forced answer's text
        self._tool = ""  # the text of the call being read
        self._in_call = False
        self._state: Any = None
        self._machine: Any = None
        if form is not None and not spec.forced:
            from mlx_lm.generate import TextStateMachine  # here: the GUI imports this module

            self._machine = TextStateMachine
            edges = [(form.end, "normal")] if form.end else []
            machine = TextStateMachine({"normal": [(form.start, "tool")], "tool": edges})
            self._state = machine.make_state("normal")

    def feed(self, text: str) -> list[Piece]:
        if self.spec.forced:
            self._whole.append(text)
            return []
        if self._state is None:
            return [text] if text else []
        self._state, segments = self._machine.split(self._state, text)
        return self._segments(segments)

    def end(self) -> list[Piece]:
        """The rest: a forced answer's call (``NotACall`` if it is none), an open call."""
        if self.spec.forced:
            return list(self._forced("".join(self._whole)))
        if self._state is None:
            return []
        self._state, rest, where = self._machine.flush(self._state)
        pieces = self._segments([(where, rest)])
        if self._in_call:
            pieces.extend(self._read_call())
        return pieces

    # -- parts ---------------------------------------------------------------------------

    def _segments(self, segments: list[tuple[str | None, str]]) -> list[Piece]:
        pieces: list[Piece] = []
        for where, text in segments:
            if where == "tool":
                self._in_call = True
                self._tool += text
                continue
            if self._in_call:
                pieces.extend(self._read_call())
            if text:
                pieces.append(text)
        return pieces

    def _read_call(self) -> list[Piece]:
        """The call just read (its text as written when the parser cannot read it)."""
        text, self._tool, self._in_call = self._tool, "", False
        assert self.form is not None
        try:
            calls = _calls(self.form.parse(text, self.spec.listed))
        except Exception:  # the parser's on a model's text: anything may be wrong with it
            calls = []
        if not calls:
            return [self.form.start + text + self.form.end]
        return self._keep(calls)

    def _forced(self, text: str) -> list[Piece]:
        calls: list[Call] = []
        try:
            calls = _calls(json.loads(text))
        except (ValueError, RecursionError):
            if self.form is not None and self.form.start in text:
                inner = text.split(self.form.start, 1)[1]
                inner = inner.split(self.form.end, 1)[0] if self.form.end else inner
                try:
                    calls = _calls(self.form.parse(inner, self.spec.listed))
                except Exception:
                    calls = []
        allowed = self.spec.names if self.spec.choice == "required" else [self.spec.choice]
        if not calls or any(call.name not in allowed for call in calls):
            said = " ".join(text.split())[:200]
            raise NotACall(
                f"The model's answer is not a call of {', '.join(allowed)} (tool_choice "
                f"{self.spec.choice!r}): {said!r}"
            )
        return self._keep(calls)

    def _keep(self, calls: list[Call]) -> list[Piece]:
        if not self.spec.parallel:
            calls = calls[: max(0, 1 - len(self.calls))]
        self.calls.extend(calls)
        return list(calls)


def _calls(parsed: Any) -> list[Call]:
    """mlx-lm's parsed call(s) (``{"name", "arguments"}`` or a list of them) as Calls."""
    found = parsed if isinstance(parsed, list) else [parsed]
    calls = []
    for one in found:
        if not isinstance(one, dict) or not isinstance(one.get("name"), str):
            raise ValueError("not a call")
        arguments = one.get("arguments", {})
        if isinstance(arguments, str):
            arguments = json.loads(arguments) if arguments.strip() else {}
        if not isinstance(arguments, dict):
            raise ValueError("a call's arguments are not an object")
        calls.append(Call(one["name"], arguments))
    return calls
