"""uvicorn's HTTP/1.1 protocol (h11) with the two deadlines it lacks: for the headers, and for silence.

uvicorn closes a kept-alive connection that stays quiet between requests
(``timeout_keep_alive``), but a connection still sending its first request is
never timed out: headers sent a byte at a time held a connection (and its
slot) for as long as the sender liked.  Here the headers of a request must be
complete within :data:`~daemon.common.daemon_limits.HEADER_TIMEOUT_S` of its first byte (of
the connection, for the first request), and a request whose body is still
coming may go silent for at most :data:`~daemon.common.daemon_limits.IDLE_TIMEOUT_S`.  Once a
request is whole, nothing is timed here: the answer may take as long as the
work (a reindex), and the client decides how long to wait.
"""

from __future__ import annotations

import asyncio
import json
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from daemon.common.daemon_limits import HEADER_TIMEOUT_S, IDLE_TIMEOUT_S, MAX_HEADER_BYTES

log = logging.getLogger(__name__)


class DeadlineH11Protocol(H11Protocol):
    header_timeout_s = HEADER_TIMEOUT_S
    idle_timeout_s = IDLE_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE and self._header_timer is None:
            self._arm_header_timer()  # the first bytes of the next request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._cancel("_header_timer")
        self._cancel("_idle_timer")
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
            self._idle_timer = self.loop.call_later(self.idle_timeout_s, self._silent)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.IDLE:
            self._cancel("_header_timer")  # between requests uvicorn's keep-alive timeout applies
            self._cancel("_idle_timer")

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel("_header_timer")
        self._cancel("_idle_timer")
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """A request h11 cannot parse (or whose headers are over the limit): a JSON error like every other."""
        problem = f"a malformed request line or header, or over {MAX_HEADER_BYTES:,} bytes of them"
        body = json.dumps({"error": f"invalid HTTP request: {problem}"}).encode()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        try:
            self.transport.write(self.conn.send(h11.Response(status_code=400, headers=headers, reason=b"Bad Request")))
            self.transport.write(self.conn.send(h11.Data(data=body)))
            self.transport.write(self.conn.send(h11.EndOfMessage()))
        except h11.LocalProtocolError:
            pass  # no answer is possible in this state: closing says it
        self.transport.close()

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _cancel(self, name: str) -> None:
        timer = getattr(self, name, None)
        if timer is not None:
            timer.cancel()
            setattr(self, name, None)

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            log.debug("closed a connection whose request headers took over %g s", self.header_timeout_s)
            self.transport.close()

    def _silent(self) -> None:
        self._idle_timer = None
        if self.transport.is_closing() or self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
            return
        if self.flow.read_paused:  # the application has not read what came: the client is not the one idle
            self._idle_timer = self.loop.call_later(self.idle_timeout_s, self._silent)
            return
        log.debug("closed a connection silent for %g s in the middle of a request", self.idle_timeout_s)
        self.transport.close()
