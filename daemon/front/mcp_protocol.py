"""A small MCP server over stdio: newline-delimited JSON-RPC 2.0, tools only, stdlib only.

Why not the MCP SDK's server: importing it costs ~1.5 s CPU (pydantic models of every
protocol type, two protocol eras, starlette/uvicorn for its HTTP transports), paid by
every agent session that starts ``memstrata mcp``; this module costs a few
milliseconds.  It speaks the handshake era of the protocol (``initialize``, then
requests), which every MCP client supports: a client that first probes
``server/discover`` (the stateless era) gets "method not found" and falls back to
``initialize``, as the protocol's version negotiation prescribes.

What it serves: ``initialize`` (answers with the client's protocol version when it
is one of :data:`PROTOCOL_VERSIONS`, else the newest), ``ping``, ``tools/list`` and
``tools/call``.  Each tool declares the JSON Schemas of its arguments (from its params) and of
its answer (``outputSchema``, from the answer's TypedDict: protocol/json_schema.py), and a call's result
carries the answer twice, as the 2025-06-18 revision asks of a tool with an output schema:
``structuredContent`` (the object) and a text content block (the same as indented JSON, which models read).

Notifications are never answered; an unknown method is -32601, bad params (``arguments``
that is not an object included: it never runs a tool as ``{}``) -32602, a line that is not
JSON -32700.  A tool's own failure (bad arguments included,
so a model can correct itself) is a result with ``isError: true``.  Every value an
error repeats is the caller's and may be hostile: it is cut to
:data:`~daemon.common.daemon_limits.MAX_ECHO_CHARS` characters saying how long it was, and a
whole error text to :data:`MAX_ERROR_CHARS`.  The session on stdio (calls beside the
reader, cancellation, batches, one writer) is :mod:`daemon.front.mcp_stdio`; stdout
carries only the protocol; anything else written there goes to stderr.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from daemon.common.daemon_limits import MAX_ECHO_CHARS
from daemon.common.echo import cut
from protocol.fields import Field
from protocol.json_schema import json_schema

log = logging.getLogger("memstrata.mcp")

# Handshake-era revisions, oldest to newest (the SDK client's HANDSHAKE_PROTOCOL_VERSIONS).
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

REQUIRED = object()  # a parameter's default when it has none

# An error text (a tool's refusal, a JSON-RPC error's message) is cut to this many characters: each
# value in it is already cut to MAX_ECHO_CHARS, this bounds the sum (twelve bad arguments, a daemon's
# message) while leaving every ordinary refusal whole.
MAX_ERROR_CHARS = 2_000
MAX_NAMES_SHOWN = 8  # unknown argument names an error lists; the rest are counted


def echo(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """A caller's string as an error repeats it: quoted, what cannot be printed escaped (``\\x1f``,
    ``\\ud800``), at most ``limit`` characters shown, and its length said when it was cut.

    The escapes count towards the limit: 120 control characters do not become 1,200.
    """
    pieces: list[str] = []
    size = 0
    for character in text[:limit]:
        piece = character if character.isprintable() else character.encode("unicode_escape").decode("ascii")
        if size + len(piece) > limit:
            break
        pieces.append(piece)
        size += len(piece)
    body = "".join(pieces)
    return f"'{body}'" if len(pieces) == len(text) else f"'{body}…' ({len(text):,} characters)"


def echo_json(value: Any) -> str:
    """A JSON value as an error repeats it: a string by :func:`echo`, a number as JSON (cut), a container
    by its kind (never its contents)."""
    if isinstance(value, str):
        return echo(value)
    if value is None or isinstance(value, (bool, int, float)):
        return cut(json.dumps(value))
    kinds: dict[type, str] = {dict: "an object", list: "a list"}
    return kinds.get(type(value), type(value).__name__)


def names_shown(names: list[str]) -> str:
    """Names a caller sent, listed for an error: an identifier as it is, anything else quoted and cut
    (control characters escaped), at most :data:`MAX_NAMES_SHOWN` of them and the rest counted."""
    listed = [n if n.isidentifier() and len(n) <= MAX_ECHO_CHARS else echo(n) for n in names[:MAX_NAMES_SHOWN]]
    if len(names) > MAX_NAMES_SHOWN:
        listed.append(f"and {len(names) - MAX_NAMES_SHOWN:,} more")
    return ", ".join(listed)


class ToolError(Exception):
    """A tool's failure, told to the model as an ``isError`` result (no traceback)."""


class ProtocolError(Exception):
    """A request the server cannot serve, answered as a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


_JSON_TYPES = {str: "string", int: "integer", bool: "boolean", float: "number", dict: "object"}


@dataclass(frozen=True)
class Param:
    """One tool argument: its JSON type, description, default and bounds (the schema is built from it)."""

    name: str
    type: type  # str, int, bool, float or dict (a JSON object)
    description: str
    default: Any = REQUIRED
    nullable: bool = False
    enum: tuple[str, ...] | None = None
    minimum: int | None = None
    maximum: int | None = None

    def schema(self) -> dict[str, Any]:
        """The property's JSON schema, in the shape the SDK's pydantic models produced."""
        base: dict[str, Any] = {}
        if self.enum is not None:
            base["enum"] = list(self.enum)
        if self.maximum is not None:
            base["maximum"] = self.maximum
        if self.minimum is not None:
            base["minimum"] = self.minimum
        base["type"] = _JSON_TYPES[self.type]
        prop: dict[str, Any] = {"anyOf": [base, {"type": "null"}]} if self.nullable else base
        if self.default is not REQUIRED:
            prop["default"] = self.default
        prop["description"] = self.description
        prop["title"] = self.name.replace("_", " ").title()
        return prop

    def check(self, value: Any) -> str | None:
        """Why ``value`` is not acceptable, or None."""
        if value is None:
            return None if self.nullable else f"{self.name}: must not be null"
        wanted = _JSON_TYPES[self.type]
        # bool is an int in Python, not in JSON
        kinds = (int, float) if self.type is float else self.type  # a JSON number may be written 1 or 1.0
        if not isinstance(value, kinds) or (self.type is not bool and isinstance(value, bool)):
            return f"{self.name}: expected {wanted}, got {echo_json(value)}"
        if self.enum is not None and value not in self.enum:
            return f"{self.name}: {echo_json(value)} is not one of {', '.join(self.enum)}"
        if isinstance(value, int) and self.minimum is not None and value < self.minimum:
            return f"{self.name}: must be ≥ {self.minimum}, got {value}"
        if isinstance(value, int) and self.maximum is not None and value > self.maximum:
            return f"{self.name}: must be ≤ {self.maximum}, got {value}"
        return None


def param_of(item: Field, name: str | None = None, description: str | None = None, **changes: Any) -> Param:
    """A tool argument for an operation's field (protocol/fields.py): its kind, default, choices and
    whole-number bounds; ``name`` when the tool calls it otherwise (``type`` for ``memory_type``),
    ``description`` when the tool words it for a model, ``changes`` any other of :class:`Param`'s."""
    whole = item.kind is int
    param = Param(
        name or item.name,
        item.kind,
        description or item.help,
        default=REQUIRED if item.required else item.default,
        nullable=not item.required and item.default is None,
        enum=item.choices,
        minimum=int(item.low) if whole and item.low is not None else None,
        maximum=int(item.high) if whole and item.high is not None else None,
    )
    return dataclasses.replace(param, **changes) if changes else param


class TextAnswer(TypedDict):
    """A text tool's structured result: its text as ``result`` (the shape the SDK gave a tool returning a str)."""

    result: str


@dataclass
class Tool:
    """A tool: ``fn`` is called with its arguments by name, after they were checked against ``params``.

    ``fn`` returns a dict (the structured result) or a str (wrapped as ``{"result": text}``, as the
    SDK did for a text tool).  ``answer`` is the result's type (a TypedDict, :class:`TextAnswer` for a text
    tool): ``tools/list`` declares it as the tool's ``outputSchema`` (protocol/json_schema.py), which a
    client may hold every result to (the MCP SDK's does).  ``unknown_arguments`` words the refusal of an
    argument the tool does not take (given the unknown and the known names; list the unknown ones with
    :func:`names_shown`, they are the caller's).
    """

    name: str
    description: str
    fn: Callable[..., dict[str, Any] | str]
    params: tuple[Param, ...] = ()
    annotations: dict[str, bool] = field(default_factory=dict)
    answer: type = dict
    unknown_arguments: Callable[[list[str], list[str]], str] | None = None

    def listing(self) -> dict[str, Any]:
        """The tool as ``tools/list`` shows it."""
        schema: dict[str, Any] = {"type": "object", "properties": {p.name: p.schema() for p in self.params}}
        required = [p.name for p in self.params if p.default is REQUIRED]
        if required:
            schema["required"] = required
        schema["title"] = f"{self.name}Arguments"
        schema["additionalProperties"] = False
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": schema,
            "outputSchema": json_schema(self.answer),
            "annotations": self.annotations,
        }

    def arguments(self, given: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments with defaults filled in; ToolError naming what is wrong."""
        known = [p.name for p in self.params]
        unknown = sorted(set(given) - set(known))
        if unknown:
            if self.unknown_arguments is not None:
                raise ToolError(self.unknown_arguments(unknown, sorted(known)))
            raise ToolError(f"unknown argument(s) {names_shown(unknown)} for {self.name}")
        problems = []
        values = {}
        for p in self.params:
            if p.name not in given:
                if p.default is REQUIRED:
                    problems.append(f"{p.name}: required")
                else:
                    values[p.name] = p.default
                continue
            problem = p.check(given[p.name])
            if problem:
                problems.append(problem)
            values[p.name] = given[p.name]
        if problems:
            raise ToolError(f"invalid arguments for {self.name}: {'; '.join(problems)}")
        return values


class Server:
    """An MCP server of ``tools``, apart from its transport (served on stdio by
    :class:`daemon.front.mcp_stdio.StdioServer`).

    The server answers what needs no tool (:meth:`dispatch`) and checks a tool call
    (:meth:`prepare_call`) at once; running the tool (:meth:`run_call`) may wait for the
    daemon, so the session runs it beside the reader (:mod:`daemon.front.mcp_stdio`).
    """

    def __init__(self, name: str, version: str, instructions: str, tools: list[Tool]) -> None:
        self.name = name
        self.version = version
        self.instructions = instructions
        self.tools = {t.name: t for t in tools}

    # ------------------------------------------------------------ MCP

    def dispatch(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The result of a request other than ``tools/call``; ProtocolError when there is none."""
        if method == "initialize":
            return self.initialize(params)
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": [t.listing() for t in self.tools.values()]}
        raise ProtocolError(METHOD_NOT_FOUND, f"method not found: {echo(method)}")

    def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise ProtocolError(INVALID_PARAMS, "invalid params: initialize needs a protocolVersion string")
        return {
            "protocolVersion": requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1],
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": self.name, "version": self.version},
            "instructions": self.instructions,
        }

    def prepare_call(self, params: dict[str, Any]) -> tuple[Tool, dict[str, Any]]:
        """The tool a ``tools/call`` names and its checked arguments, defaults filled in.

        ProtocolError for a call that names no known tool or whose ``arguments`` is not an object
        (absent or null: no arguments); ToolError for arguments the tool refuses (the model reads it).
        """
        name = params.get("name")
        if not isinstance(name, str):
            raise ProtocolError(INVALID_PARAMS, "invalid params: tools/call needs a tool name")
        tool = self.tools.get(name)
        if tool is None:
            raise ProtocolError(INVALID_PARAMS, f"unknown tool: {echo(name)} (tools: {', '.join(self.tools)})")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            # [], 0, false and "" once ran the tool as if {} had been sent
            raise ProtocolError(
                INVALID_PARAMS, f"invalid params: arguments must be an object, got {echo_json(arguments)}"
            )
        return tool, tool.arguments(arguments)

    def run_call(self, tool: Tool, values: dict[str, Any]) -> dict[str, Any]:
        """Run ``tool``: its result, or its failure as an ``isError`` result (never an exception)."""
        try:
            result = tool.fn(**values)
        except ToolError as exc:
            return tool_error(tool.name, str(exc))
        except Exception as exc:
            log.error("MCP tool %s failed:\n%s", tool.name, traceback.format_exc())
            return tool_error(tool.name, f"{type(exc).__name__}: {exc}")
        if isinstance(result, str):
            return {
                "content": [{"type": "text", "text": result}],
                "structuredContent": {"result": result},
                "isError": False,
            }
        text = json.dumps(result, ensure_ascii=False, indent=2, default=str)
        return {"content": [{"type": "text", "text": text}], "structuredContent": result, "isError": False}


def tool_error(tool: str, message: str) -> dict[str, Any]:
    """A tool's failure as the model reads it: an ``isError`` result, its text bounded."""
    text = cut(f"Error executing tool {tool}: {message}", limit=MAX_ERROR_CHARS)
    return {"content": [{"type": "text", "text": text}], "isError": True}


def error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC error answer, its message bounded."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": cut(message, limit=MAX_ERROR_CHARS)}}


def success(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}
