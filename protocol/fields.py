"""How an operation's field is described: the one place its help, wire name, choices and bounds live.

An operation (protocol/operations.py) is a frozen dataclass whose fields are declared with :func:`field`;
:func:`describe` reads them back as :class:`Field` descriptions.  The request an operation sends is built
from these descriptions, and the edges (CLI options, MCP parameters, the API's validation) are to be
generated from them, so a field's help text and bounds are written once.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any

from protocol.limits import Results

METADATA_KEY = "memstrata"
WHERE = ("body", "query", "path")


@dataclass(frozen=True)
class Spec:
    """What :func:`field` records about a field (its metadata)."""

    help: str
    wire: str | None = None
    choices: tuple[str, ...] | None = None
    low: float | None = None
    high: float | None = None
    results: Results | None = None
    pattern: str | None = None
    max_length: int | None = None
    where: str | None = None
    min_length: int | None = None
    low_exclusive: bool = False


@dataclass(frozen=True, kw_only=True)
class Field(Spec):
    """One field of an operation as every edge sees it: its :class:`Spec` completed from the dataclass.

    ``name`` is the Python name, ``wire`` the API's (``memory_type`` travels as ``type``); ``where`` says
    whether it goes in the JSON body, the query string or the path; ``kind`` is the value's type (str, int,
    float, bool, dict); ``default`` is :data:`REQUIRED` for a field without one, else what is sent when the
    caller says nothing (None: left to the daemon, and not sent).  ``low``..``high`` bound a number (``low``
    itself excluded when ``low_exclusive``); ``min_length``..``max_length`` a text's length.
    """

    name: str
    wire: str
    where: str
    kind: type
    required: bool
    default: object


REQUIRED: Any = dataclasses.MISSING


def field(
    help: str,
    *,
    default: object = dataclasses.MISSING,
    wire: str | None = None,
    choices: tuple[str, ...] | None = None,
    low: float | None = None,
    high: float | None = None,
    results: Results | None = None,
    pattern: str | None = None,
    max_length: int | None = None,
    where: str | None = None,
    min_length: int | None = None,
    low_exclusive: bool = False,
) -> Any:
    """A dataclass field carrying its description (``help``: one sentence, as the CLI and MCP show it).

    ``results`` gives a count's default and bounds at once (protocol/limits.py); ``where`` defaults to the
    operation's (body for POST and PUT, query for GET and DELETE); ``low_exclusive``: ``low`` itself is
    refused (a share of (0, 1]).
    """
    if where is not None and where not in WHERE:
        raise ValueError(f"where must be one of {', '.join(WHERE)}, not {where!r}")
    spec = Spec(help, wire, choices, low, high, results, pattern, max_length, where, min_length, low_exclusive)
    if results is not None:
        spec = dataclasses.replace(spec, low=results.low, high=results.high)
    return dataclasses.field(default=default, metadata={METADATA_KEY: spec})


def _kind(hint: object) -> type:
    """The value type of a hint like ``str | None`` or ``dict[str, Any] | None``."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and args:
        hint = args[0]
    origin = typing.get_origin(hint) or hint
    return origin if isinstance(origin, type) else object


def describe(operation: type) -> list[Field]:
    """The fields of an operation class (or instance's class), in their order, as :class:`Field`."""
    if not dataclasses.is_dataclass(operation):
        raise TypeError(f"{operation!r} is not an operation (a dataclass)")
    hints = typing.get_type_hints(operation)
    default_where = "body" if getattr(operation, "METHOD", "GET") in ("POST", "PUT") else "query"
    out = []
    for item in dataclasses.fields(operation):
        spec = item.metadata.get(METADATA_KEY)
        if not isinstance(spec, Spec):
            raise TypeError(f"{operation.__name__}.{item.name} is not described: declare it with protocol.fields.field")
        required = item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING
        described = {f.name: getattr(spec, f.name) for f in dataclasses.fields(Spec)}
        described.update(
            name=item.name,
            wire=spec.wire or item.name,
            where=spec.where or default_where,
            kind=_kind(hints[item.name]),
            required=required,
            default=REQUIRED if required else item.default,
        )
        out.append(Field(**described))
    return out
