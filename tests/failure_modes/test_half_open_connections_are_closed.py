"""A connection that sends its headers a byte at a time, or goes quiet mid-body, is closed.

Before the fix uvicorn timed out only kept-alive connections between requests:
a client sending its first request's headers one byte at a time (or a body that
stops half-way) held the connection for as long as it liked (bench/bench_flood.py:
still open after 60 s).  Now the headers must be complete within
``HEADER_TIMEOUT_S`` and a request half sent may be silent for at most
``IDLE_TIMEOUT_S``; both connections here are closed by the daemon while other
callers are served as usual.
"""

from __future__ import annotations

import socket
import time

import pytest

from daemon.common.daemon_limits import HEADER_TIMEOUT_S, IDLE_TIMEOUT_S
from tests.helpers import LEAN, init_root, run_cli, token_of

pytestmark = pytest.mark.slow


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def test_half_open_connections_are_closed(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN)
    run_cli("agent", "add", "alpha", config=config)
    daemon = daemons(config)
    token = token_of(tmp_path, "alpha")

    # Headers a byte every half second: 400 bytes would take 200 s.
    slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    slow.connect(str(daemon.socket))
    head = b"GET /v1/status HTTP/1.1\r\nHost: memstrata\r\nX-Padding: " + b"a" * 350 + b"\r\n\r\n"
    # A body that stops after its first bytes.
    quiet = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    quiet.connect(str(daemon.socket))
    quiet.sendall(
        f"POST /v1/memories HTTP/1.1\r\nHost: memstrata\r\nAuthorization: Bearer {token}\r\n"
        'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"agent": '.encode()
    )
    started = time.monotonic()
    sent, slow_closed, quiet_closed_after = 0, False, None
    deadline = started + HEADER_TIMEOUT_S + IDLE_TIMEOUT_S + 30  # generous: the figures are in the bench
    while not (slow_closed and quiet_closed_after is not None) and time.monotonic() < deadline:
        if not slow_closed and sent < len(head):
            try:
                slow.send(head[sent : sent + 1])
                sent += 1
            except (BrokenPipeError, ConnectionResetError):
                slow_closed = True
        slow_closed = slow_closed or _closed(slow)
        if quiet_closed_after is None and _closed(quiet):
            quiet_closed_after = time.monotonic() - started
        assert daemon.status()["daemon"]["running"]  # everyone else is served meanwhile
        time.sleep(0.5)
    assert slow_closed and sent < len(head), "the daemon waited for headers sent a byte at a time"
    assert quiet_closed_after is not None, "a request silent in the middle of its body was never closed"
    assert quiet_closed_after >= IDLE_TIMEOUT_S - 1  # silence, not the header deadline, closed it
    slow.close()
    quiet.close()
