"""A JSON Schema from a Python type: how an answer's TypedDict (protocol/answers.py) is told to a client.

Why not pydantic's ``TypeAdapter(...).json_schema()``: the MCP server declares each tool's ``outputSchema``
from these types, and importing pydantic costs the server's start more than the rest of it (the server is
started by every agent session, daemon/front/mcp_protocol.py); the types it has to say are few.  What it
knows: ``str``, ``int``, ``float`` (a JSON number, whole or not), ``bool``, ``None``, ``Any`` (anything),
``list[X]``, ``dict[str, X]``, ``Literal[...]``, ``X | Y`` and ``Optional[X]``, ``Annotated[X, ...]`` (as X), and
TypedDicts, nested ones inlined (no ``$ref``: every client reads the schema whole), each key required unless
the class is ``total=False`` or the key is ``NotRequired``.

A TypedDict's object is left open (``additionalProperties`` unsaid, so allowed): a client validating an answer
(the MCP SDK's does) must not fail a call because a daemon added a key this type does not name yet; the tests
hold the answers to their types exactly (tests/daemon/front/test_mcp_output_schemas.py).
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any, Literal, Union

_SCALARS: dict[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
_PRESENCE = {getattr(typing, name, None) for name in ("Required", "NotRequired")} - {None}


def json_schema(kind: object) -> dict[str, Any]:
    """The JSON Schema of ``kind``, a type as above; TypeError naming a type it does not know."""
    if kind in _SCALARS:
        return {"type": _SCALARS[kind]}
    if kind is Any or kind is object:
        return {}
    if typing.is_typeddict(kind):
        assert isinstance(kind, type)
        return _object(kind)
    origin, arguments = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Annotated:
        return json_schema(arguments[0])
    if origin is list or kind is list:
        return {"type": "array", "items": json_schema(arguments[0])} if arguments else {"type": "array"}
    if origin is dict or kind is dict:
        values = json_schema(arguments[1]) if arguments else {}
        return {"type": "object", "additionalProperties": values} if values else {"type": "object"}
    if origin is Literal:
        return _literal(arguments)
    if origin is Union or origin is types.UnionType:
        return _union([json_schema(a) for a in arguments])
    raise TypeError(f"no JSON Schema for {kind!r}")


def _object(kind: type) -> dict[str, Any]:
    """A TypedDict as an object: its keys' schemas, which are required, its name and what it is for."""
    hints = typing.get_type_hints(kind, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for key, hint in hints.items():
        presence = typing.get_origin(hint)
        if presence in _PRESENCE:
            needed = presence is getattr(typing, "Required", None)
            hint = typing.get_args(hint)[0]
        else:
            needed = key in getattr(kind, "__required_keys__", frozenset())
        properties[key] = json_schema(hint)
        if needed:
            required.append(key)
    schema: dict[str, Any] = {"type": "object", "title": kind.__name__}
    if kind.__doc__:  # its own docstring's first paragraph (a class without one has None, not dict's)
        schema["description"] = " ".join(inspect.cleandoc(kind.__doc__).split("\n\n")[0].split())
    schema["properties"] = properties
    if required:
        schema["required"] = required
    return schema


def _literal(values: tuple[object, ...]) -> dict[str, Any]:
    """``Literal[...]``: its values, and their JSON type when they share one."""
    kinds = {_SCALARS.get(type(v)) for v in values}
    schema: dict[str, Any] = {"enum": list(values)}
    if len(kinds) == 1 and None not in kinds:
        schema = {"type": kinds.pop(), **schema}
    return schema


def _union(members: list[dict[str, Any]]) -> dict[str, Any]:
    """``X | Y``: one ``type`` list when every member is a bare type (``["string", "null"]``), else ``anyOf``."""
    if any(m == {} for m in members):
        return {}
    if all(set(m) == {"type"} and isinstance(m["type"], str) for m in members):
        return {"type": [m["type"] for m in members]}
    return {"anyOf": members}
