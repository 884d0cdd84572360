"""The MCP server's session on stdio: one reader, tool calls beside it, one writer.

Why calls run beside the reader: a tool call may wait for the daemon as long as the
client's timeout (90 s measured with a daemon that accepted and never answered), and
a session that served one line at a time answered nothing meanwhile: no ``ping``, no
``memory_core`` (which needs no daemon), and a ``notifications/cancelled`` was read
only after the call it cancelled had been answered.

How: the reader (the thread that calls :meth:`StdioSession.serve`) parses each line
and answers at once everything that runs no tool: ``initialize``, ``ping``,
``tools/list``, JSON-RPC errors, and a call whose arguments the tool refuses.  A call
with valid arguments runs in a thread of its own, at most :data:`MAX_CALLS_RUNNING` at
once (past that it is refused, not queued behind the stuck ones).  A cancelled call is
never answered, as the MCP spec asks; its thread cannot be interrupted (it may be
inside a read of the daemon's socket), so it runs to its end, or to the client's
timeout, and what it returns is dropped.  Each message is encoded first and written
whole under one lock: two answers never interleave on stdout.

Batches (a JSON array of messages) are part of MCP 2025-03-26 only, which requires a
server to accept them; 2025-06-18 removed them.  A batch is served when the session
agreed to 2025-03-26 (an ``initialize`` inside one is refused, as that revision says),
and refused with one -32600 error otherwise, before ``initialize`` too.

stdin's end is the client's "shutdown": running calls get :data:`SHUTDOWN_GRACE_S` to
answer, then the session returns, nothing more is written, and the calls still running
(their threads are daemon threads) are abandoned unanswered when the process exits.
A write the daemon already received is the daemon's to apply or not.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from daemon.common.echo import cut
from daemon.front.mcp_protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ProtocolError,
    Server,
    Tool,
    ToolError,
    echo_json,
    error,
    success,
    tool_error,
)

log = logging.getLogger("memstrata.mcp")

# Tool calls running at once in one session: ample for a model (clients rarely send more than a
# few at a time), and a bound on threads that a stuck daemon holds until the client's timeout.
MAX_CALLS_RUNNING = 16
# How long the session waits for running calls once stdin has ended: an MCP client (the SDK's) kills
# the server 2 s after closing its stdin, so the server ends on its own before that.
SHUTDOWN_GRACE_S = 1.5
# The protocol revisions whose sessions accept JSON-RPC batches (added in 2025-03-26, removed in 2025-06-18).
BATCH_VERSIONS = frozenset({"2025-03-26"})

Message = dict[str, Any]
Reply = Callable[[Any], None]  # an answer (a message, or a batch's list), or None: nothing to say


@dataclass(eq=False)
class _Call:
    """A tool call running in its own thread; ``reply`` takes its answer, or None once cancelled."""

    request_id: str | int
    reply: Reply


class _Batch:
    """The answers of one batch, sent as one array once every message in it has been answered.

    Each message of the batch gets a slot (:meth:`slot`) that is filled exactly once, with an
    answer or with None (a notification, a cancelled call): the array goes out with the last.
    """

    def __init__(self, send: Reply) -> None:
        self._send = send
        self._lock = threading.Lock()
        self._open = 1  # the reader's own, until it has read the whole batch (seal)
        self._answers: list[Message] = []

    def slot(self) -> Reply:
        with self._lock:
            self._open += 1
        return self._fill

    def seal(self) -> None:
        self._fill(None)

    def _fill(self, answer: Message | None) -> None:
        with self._lock:
            if answer is not None:
                self._answers.append(answer)
            self._open -= 1
            complete = self._open == 0
        if complete and self._answers:  # a batch of notifications only is not answered at all
            self._send(self._answers)


class StdioServer(Server):
    """A :class:`~daemon.front.mcp_protocol.Server` on stdio: :meth:`run` serves until stdin is closed."""

    def run(self, transport: str = "stdio") -> None:
        """Serve newline-delimited JSON-RPC on stdin/stdout until stdin is closed."""
        if transport != "stdio":
            raise ValueError(f"unsupported transport {transport!r}: only stdio")
        out = sys.stdout.buffer
        sys.stdout = sys.stderr  # a stray print must not corrupt the protocol stream
        self.serve(sys.stdin.buffer, out)

    def serve(self, inp: IO[bytes], out: IO[bytes]) -> None:
        """Serve the JSON-RPC lines of ``inp`` on ``out`` until ``inp`` ends."""
        StdioSession(self, out).serve(inp)


class StdioSession:
    """One MCP session: :meth:`serve` reads JSON-RPC lines until its input ends; answers go to ``out``."""

    def __init__(self, server: Server, out: IO[bytes]) -> None:
        self.server = server
        self.protocol_version: str | None = None  # what initialize agreed to
        self._out = out
        self._write_lock = threading.Lock()
        self._closed = False  # under _write_lock: nothing more is written
        self._lock = threading.Lock()  # the calls in flight and the running count
        self._idle = threading.Condition(self._lock)
        self._in_flight: dict[str | int, _Call] = {}
        self._running = 0  # call threads alive, cancelled ones included (bounded by MAX_CALLS_RUNNING)
        self._owing = 0  # calls whose answer is not written yet, cancelled ones excluded (close waits for them)

    # ------------------------------------------------------------ reading

    def serve(self, inp: IO[bytes]) -> None:
        try:
            for line in inp:
                if line.strip():
                    self.receive(line)
        finally:
            self.close(SHUTDOWN_GRACE_S)

    def receive(self, line: bytes) -> None:
        """Handle one line: a message, or a batch of them."""
        try:
            message = json.loads(line)
        except ValueError as exc:  # includes bad UTF-8
            self.send(error(None, PARSE_ERROR, f"parse error: {exc}"))
            return
        if isinstance(message, list):
            self._receive_batch(message)
        else:
            self.handle(message, self.send)

    def _receive_batch(self, messages: list[Any]) -> None:
        if self.protocol_version not in BATCH_VERSIONS:
            agreed = f"protocol version {self.protocol_version}" if self.protocol_version else "the session yet"
            why = f"invalid request: JSON-RPC batches are not part of {agreed} (only of 2025-03-26); one message a line"
            self.send(error(None, INVALID_REQUEST, why))
            return
        if not messages:
            self.send(error(None, INVALID_REQUEST, "invalid request: an empty batch"))
            return
        batch = _Batch(self.send)
        for message in messages:
            reply = batch.slot()
            if isinstance(message, dict) and message.get("method") == "initialize":
                refusal = "invalid request: initialize must not be part of a batch"
                reply(error(message.get("id"), INVALID_REQUEST, refusal) if "id" in message else None)
            else:
                self.handle(message, reply)
        batch.seal()

    def handle(self, message: Any, reply: Reply) -> None:
        """Handle one message; ``reply`` is called exactly once: with its answer, or None (a notification,
        a client's response, a cancelled call), at once or from the call's thread."""
        if not isinstance(message, dict):
            reply(error(None, INVALID_REQUEST, "invalid request: expected a JSON-RPC object"))
            return
        method = message.get("method")
        if "id" not in message:  # a notification: never answered
            if method == "notifications/cancelled":
                self._cancel(message.get("params"))
            elif isinstance(method, str) and not method.startswith("notifications/"):
                log.debug("ignoring notification %s", cut(method))
            reply(None)
            return
        request_id = message.get("id")
        if method is None and ("result" in message or "error" in message):
            reply(None)  # a response to a request of ours (we send none)
            return
        if message.get("jsonrpc") != "2.0" or not isinstance(method, str):
            reply(error(request_id, INVALID_REQUEST, "invalid request: needs jsonrpc '2.0' and a method"))
            return
        if request_id is None or isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
            reply(error(None, INVALID_REQUEST, "invalid request: id must be a string or an integer"))
            return
        params = message.get("params", {})
        if not isinstance(params, dict):
            reply(error(request_id, INVALID_PARAMS, "invalid params: expected an object"))
            return
        try:
            if method == "tools/call":
                self._call(request_id, params, reply)
                return
            result = self.server.dispatch(method, params)
        except ProtocolError as exc:
            reply(error(request_id, exc.code, str(exc)))
            return
        except Exception as exc:  # a bug here must not end the session
            log.error("MCP %s failed:\n%s", cut(method), traceback.format_exc())
            reply(error(request_id, INTERNAL_ERROR, f"internal error: {exc}"))
            return
        if method == "initialize":
            self.protocol_version = result["protocolVersion"]
        reply(success(request_id, result))

    # ------------------------------------------------------------ calls

    def _call(self, request_id: str | int, params: dict[str, Any], reply: Reply) -> None:
        """Check a tools/call here, run it in a thread of its own (ProtocolError: not a call to run)."""
        try:
            tool, values = self.server.prepare_call(params)
        except ToolError as exc:  # refused arguments: answered now, the model can correct them
            reply(success(request_id, tool_error(str(params.get("name")), str(exc))))
            return
        call = _Call(request_id, reply)
        with self._lock:
            busy = self._running >= MAX_CALLS_RUNNING
            taken = request_id in self._in_flight
            if not busy and not taken:
                self._in_flight[request_id] = call
                self._running += 1
                self._owing += 1
        if taken:
            reply(
                error(
                    request_id,
                    INVALID_REQUEST,
                    f"invalid request: id {echo_json(request_id)} is in use by a call in flight",
                )
            )
        elif busy:
            why = (
                f"{MAX_CALLS_RUNNING} calls of this session are still running (the memstrata daemon may be "
                "slow or stuck); try again when one has answered"
            )
            reply(success(request_id, tool_error(tool.name, why)))
        else:
            name = f"mcp-call-{cut(str(request_id), limit=40)}"
            threading.Thread(target=self._run, args=(call, tool, values), name=name, daemon=True).start()

    def _run(self, call: _Call, tool: Tool, values: dict[str, Any]) -> None:
        current = False
        try:
            try:
                answer = success(call.request_id, self.server.run_call(tool, values))
            except Exception as exc:  # run_call answers a tool's failure itself; this is a bug of ours
                log.error("MCP tool %s failed:\n%s", tool.name, traceback.format_exc())
                answer = error(call.request_id, INTERNAL_ERROR, f"internal error: {exc}")
            with self._lock:
                current = self._in_flight.get(call.request_id) is call
                if current:
                    del self._in_flight[call.request_id]
            if current:  # else it was cancelled: its slot was filled with nothing then
                call.reply(answer)
        finally:
            with self._idle:  # counted down once the answer is written, so close() waits for the write
                self._running -= 1
                self._owing -= 1 if current else 0
                self._idle.notify_all()

    def _cancel(self, params: Any) -> None:
        """``notifications/cancelled``: the call is never answered; unknown or finished ids are ignored."""
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
            return
        with self._idle:
            call = self._in_flight.pop(request_id, None)
            if call is not None:
                self._owing -= 1
                self._idle.notify_all()
        if call is not None:
            log.info("MCP call %s cancelled by the client", cut(str(request_id)))
            call.reply(None)

    # ------------------------------------------------------------ writing

    def send(self, answer: Any) -> None:
        """Write one message (or a batch's array) as one line; None writes nothing."""
        if answer is None:
            return
        data = _encode(answer)
        with self._write_lock:
            if self._closed:
                return
            try:
                self._out.write(data)
                self._out.flush()
            except (OSError, ValueError) as exc:  # the client is gone (a closed pipe or file)
                self._closed = True
                log.info("MCP client stopped reading: %s", exc)

    def close(self, grace: float) -> None:
        """Wait up to ``grace`` seconds for the calls that owe an answer (not the cancelled ones, which
        will never give one); then nothing more is written."""
        deadline = time.monotonic() + grace
        with self._idle:
            while self._owing and (left := deadline - time.monotonic()) > 0:
                self._idle.wait(left)
            abandoned = self._owing
        with self._write_lock:
            self._closed = True
        if abandoned:
            log.warning("MCP input ended with %d call(s) still running: they are abandoned unanswered", abandoned)


def _encode(answer: Any) -> bytes:
    """``answer`` as one line of JSON; lone surrogates (a caller's, repeated in an error) are escaped."""
    try:
        return json.dumps(answer, ensure_ascii=False, separators=(",", ":"), default=str).encode() + b"\n"
    except UnicodeEncodeError:  # "\ud800" cannot be UTF-8; as an escape it is valid JSON
        return json.dumps(answer, ensure_ascii=True, separators=(",", ":"), default=str).encode() + b"\n"
