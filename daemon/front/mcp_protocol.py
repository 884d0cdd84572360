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
``tools/call``.  Notifications are never answered; an unknown method is -32601, bad
params -32602, a line that is not JSON -32700.  A tool's own failure (bad arguments
included, so a model can correct itself) is a result with ``isError: true``.  stdout
carries only the protocol; anything else written there goes to stderr.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

log = logging.getLogger("memstrata.mcp")

# Handshake-era revisions, oldest to newest (the SDK client's HANDSHAKE_PROTOCOL_VERSIONS).
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

REQUIRED = object()  # a parameter's default when it has none


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
            return f"{self.name}: expected {wanted}, got {json.dumps(value)[:80]}"
        if self.enum is not None and value not in self.enum:
            return f"{self.name}: {value!r} is not one of {', '.join(self.enum)}"
        if isinstance(value, int) and self.minimum is not None and value < self.minimum:
            return f"{self.name}: must be ≥ {self.minimum}, got {value}"
        if isinstance(value, int) and self.maximum is not None and value > self.maximum:
            return f"{self.name}: must be ≤ {self.maximum}, got {value}"
        return None


@dataclass
class Tool:
    """A tool: ``fn`` is called with its arguments by name, after they were checked against ``params``.

    ``fn`` returns a dict (the structured result) or a str (wrapped as ``{"result": text}``, as the
    SDK did for a text tool).  ``unknown_arguments`` words the refusal of an argument the tool does
    not take (given the unknown and the known names).
    """

    name: str
    description: str
    fn: Callable[..., dict[str, Any] | str]
    params: tuple[Param, ...] = ()
    annotations: dict[str, bool] = field(default_factory=dict)
    returns_text: bool = False
    unknown_arguments: Callable[[list[str], list[str]], str] | None = None

    def listing(self) -> dict[str, Any]:
        """The tool as ``tools/list`` shows it."""
        schema: dict[str, Any] = {"type": "object", "properties": {p.name: p.schema() for p in self.params}}
        required = [p.name for p in self.params if p.default is REQUIRED]
        if required:
            schema["required"] = required
        schema["title"] = f"{self.name}Arguments"
        schema["additionalProperties"] = False
        output: dict[str, Any]
        if self.returns_text:
            output = {
                "properties": {"result": {"title": "Result", "type": "string"}},
                "required": ["result"],
                "title": f"{self.name}Output",
                "type": "object",
            }
        else:
            output = {"additionalProperties": True, "title": f"{self.name}DictOutput", "type": "object"}
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": schema,
            "outputSchema": output,
            "annotations": self.annotations,
        }

    def arguments(self, given: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments with defaults filled in; ToolError naming what is wrong."""
        known = [p.name for p in self.params]
        unknown = sorted(set(given) - set(known))
        if unknown:
            if self.unknown_arguments is not None:
                raise ToolError(self.unknown_arguments(unknown, sorted(known)))
            raise ToolError(f"unknown argument(s) {', '.join(unknown)} for {self.name}")
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
    """An MCP server of ``tools`` over stdio; :meth:`run` serves until stdin ends."""

    def __init__(self, name: str, version: str, instructions: str, tools: list[Tool]) -> None:
        self.name = name
        self.version = version
        self.instructions = instructions
        self.tools = {t.name: t for t in tools}

    # ------------------------------------------------------------ transport

    def run(self, transport: str = "stdio") -> None:
        """Serve newline-delimited JSON-RPC on stdin/stdout until stdin is closed."""
        if transport != "stdio":
            raise ValueError(f"unsupported transport {transport!r}: only stdio")
        out = sys.stdout.buffer
        sys.stdout = sys.stderr  # a stray print must not corrupt the protocol stream
        self.serve(sys.stdin.buffer, out)

    def serve(self, inp: IO[bytes], out: IO[bytes]) -> None:
        for line in inp:
            if not line.strip():
                continue
            answer = self.handle_line(line)
            if answer is not None:
                out.write(json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
                out.flush()

    # ------------------------------------------------------------ JSON-RPC

    def handle_line(self, line: bytes) -> dict[str, Any] | None:
        """The answer to one line, or None for a notification or a client's response."""
        try:
            message = json.loads(line)
        except ValueError as exc:  # includes bad UTF-8
            return _error(None, PARSE_ERROR, f"parse error: {exc}")
        if not isinstance(message, dict):
            return _error(None, INVALID_REQUEST, "invalid request: expected one JSON-RPC object per line")
        request_id = message.get("id")
        method = message.get("method")
        if "id" not in message:  # a notification: never answered
            if isinstance(method, str) and not method.startswith("notifications/"):
                log.debug("ignoring notification %s", method)
            return None
        if method is None and ("result" in message or "error" in message):
            return None  # a response to a request of ours (we send none)
        if message.get("jsonrpc") != "2.0" or not isinstance(method, str):
            return _error(request_id, INVALID_REQUEST, "invalid request: needs jsonrpc '2.0' and a method")
        if request_id is None or isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
            return _error(None, INVALID_REQUEST, "invalid request: id must be a string or an integer")
        params = message.get("params", {})
        if not isinstance(params, dict):
            return _error(request_id, INVALID_PARAMS, "invalid params: expected an object")
        try:
            return {"jsonrpc": "2.0", "id": request_id, "result": self.dispatch(method, params)}
        except ProtocolError as exc:
            return _error(request_id, exc.code, str(exc))
        except Exception as exc:  # a bug here must not end the session
            log.error("MCP %s failed:\n%s", method, traceback.format_exc())
            return _error(request_id, INTERNAL_ERROR, f"internal error: {exc}")

    def dispatch(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "initialize":
            return self.initialize(params)
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": [t.listing() for t in self.tools.values()]}
        if method == "tools/call":
            return self.call(params)
        raise ProtocolError(METHOD_NOT_FOUND, f"method not found: {method}")

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

    def call(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        arguments = params.get("arguments") or {}
        if not isinstance(name, str):
            raise ProtocolError(INVALID_PARAMS, "invalid params: tools/call needs a tool name")
        tool = self.tools.get(name)
        if tool is None:
            raise ProtocolError(INVALID_PARAMS, f"unknown tool: {name} (tools: {', '.join(self.tools)})")
        if not isinstance(arguments, dict):
            raise ProtocolError(INVALID_PARAMS, "invalid params: arguments must be an object")
        try:
            result = tool.fn(**tool.arguments(arguments))
        except ToolError as exc:
            return _tool_error(name, str(exc))
        except Exception as exc:
            log.error("MCP tool %s failed:\n%s", name, traceback.format_exc())
            return _tool_error(name, f"{type(exc).__name__}: {exc}")
        if isinstance(result, str):
            return {
                "content": [{"type": "text", "text": result}],
                "structuredContent": {"result": result},
                "isError": False,
            }
        text = json.dumps(result, ensure_ascii=False, indent=2, default=str)
        return {"content": [{"type": "text", "text": text}], "structuredContent": result, "isError": False}


def _tool_error(tool: str, message: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": f"Error executing tool {tool}: {message}"}], "isError": True}


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
