"""A JSON object checked against a ``TypedDict``: the one machinery that turns a line of
the wire into a typed event (``core.worker.events.parse_event``) or command
(``core.worker.commands.parse_command``). Each field present has its declared type (a
float may be written as an int), each required one is there, extra fields are kept (a
newer peer may send more). What a type cannot say (a range, a length) the caller checks.
"""

from __future__ import annotations

import functools
import types
from typing import (
    Any,
    Literal,
    NotRequired,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)


@functools.cache
def fields(typed: type) -> tuple[tuple[str, Any, bool], ...]:
    """A TypedDict's (name, type, required) fields. ``NotRequired`` is read from the
    annotations: ``__required_keys__`` is wrong on Python 3.11 under postponed
    annotations."""
    found = []
    for name, hint in get_type_hints(typed, include_extras=True).items():
        optional = get_origin(hint) is NotRequired
        found.append((name, get_args(hint)[0] if optional else hint, not optional))
    return tuple(found)


def mismatch(record: dict[str, Any], typed: type) -> str | None:
    """The first field of ``record`` that is missing or not of its declared type in
    ``typed``, as a one-line reason; None when every field matches."""
    for name, hint, required in fields(typed):
        if name not in record:
            if required:
                return f"{name!r} is missing ({said(hint)})"
        elif not is_a(record[name], hint):
            return f"{name!r} must be {said(hint)}"
    return None


def matches(record: dict[str, Any], typed: type) -> bool:
    return mismatch(record, typed) is None


def is_a(value: object, hint: Any) -> bool:
    """Whether a JSON value has the type ``hint`` (the types the wire uses)."""
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint is float:  # JSON writes 2.0 as 2.0, but a number is a number
        return is_number(value)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (str, bool):
        return isinstance(value, hint)
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        return any(type(value) is type(a) and value == a for a in args)
    if origin in (Union, types.UnionType):
        return any(is_a(value, a) for a in args)
    if origin is list:
        return isinstance(value, list) and all(is_a(item, args[0]) for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            is_a(k, args[0]) and is_a(v, args[1]) for k, v in value.items()
        )
    if is_typeddict(hint):
        return isinstance(value, dict) and matches(value, hint)
    raise TypeError(f"cannot check {hint!r}")  # a new field type: teach is_a


def said(hint: Any) -> str:
    """A type as a person reads it, for a refusal: ``list[int]`` → "a list of whole
    numbers"."""
    words = {int: "a whole number", float: "a number", str: "text", bool: "true or false"}
    if hint in words:
        return words[hint]
    if hint is type(None) or hint is Any:
        return "null" if hint is type(None) else "anything"
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        return " or ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(said(a) for a in args if a is not type(None))
    if origin is list:
        return f"a list of ({said(args[0])})"
    if is_typeddict(hint):
        named = [name for name, _, required in fields(hint) if required]
        return "an object with " + ", ".join(named) if named else "an object"
    return "an object"


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
