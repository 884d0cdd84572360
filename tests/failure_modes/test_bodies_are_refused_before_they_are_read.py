"""A request body is refused from its headers: no token, or a declared length over the route's limit.

Before the fix ``POST /v1/memories`` (and update, the admin routes and reindex)
read and parsed the whole body before looking at the token: four 100 MB bodies
sent without a token took the daemon from 446 to 1,032 MB (bench/bench_flood.py
measures the RSS).  Now the caller is known from the ``Authorization`` header
alone, a declared ``Content-Length`` over the route's limit is a 413, and a
route that takes no body takes none: each answered after the headers, with not
one byte of the body sent (so none can have been read), and the connection
closed.  A body sent without a length is counted as it comes and refused once
over the limit.
"""

from __future__ import annotations

import contextlib
import json
import socket

import pytest

from daemon.common.daemon_limits import MAX_MEMORY_BODY_BYTES, MAX_SEARCH_BODY_BYTES, MAX_SMALL_BODY_BYTES
from tests.helpers import LEAN, init_root, run_cli, token_of

pytestmark = pytest.mark.slow

HUNDRED_MB = 100 * 1024 * 1024
BODY_ROUTES = [  # (method, path, limit)
    ("POST", "/v1/memories", MAX_MEMORY_BODY_BYTES),
    ("PUT", "/v1/memories/0b7c4c57-2b6a-4f7e-9d57-3d0c1e0f8a11", MAX_MEMORY_BODY_BYTES),
    ("POST", "/v1/search", MAX_SEARCH_BODY_BYTES),
    ("POST", "/v1/memories/search", MAX_SEARCH_BODY_BYTES),
    ("POST", "/v1/reindex", MAX_SMALL_BODY_BYTES),
    ("POST", "/v1/admin/cleanup", MAX_SMALL_BODY_BYTES),
    ("POST", "/v1/admin/backup", MAX_SMALL_BODY_BYTES),
    ("POST", "/v1/admin/restore", MAX_SMALL_BODY_BYTES),
]


def _headers_only(
    sock_path, method: str, path: str, headers: dict[str, str], closed: bool = True
) -> tuple[int, dict, bytes]:
    """Send the request line and headers, no body; the status, headers and body of the answer."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(str(sock_path))
    try:
        lines = [f"{method} {path} HTTP/1.1", "Host: memstrata", *(f"{k}: {v}" for k, v in headers.items())]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        return _answer(sock, closed)
    finally:
        sock.close()


def _answer(sock: socket.socket, closed: bool = True) -> tuple[int, dict, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed without an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
    while len(body) < int(headers.get("content-length", 0)):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    if closed:  # the daemon closes the connection: what is left of the 100 MB never has to be received
        assert headers.get("connection") == "close", headers
        with contextlib.suppress(ConnectionResetError):  # closed with bytes of ours unread
            assert sock.recv(1) == b"", "the connection stayed open"
    return int(status_line.split()[1]), headers, body


def test_bodies_are_refused_before_they_are_read(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN)
    run_cli("agent", "add", "alpha", config=config)
    daemon = daemons(config)
    alpha = {"Authorization": f"Bearer {token_of(tmp_path, 'alpha')}"}
    json_type = {"Content-Type": "application/json"}

    for method, path, limit in BODY_ROUTES:
        declared = {**json_type, "Content-Length": str(HUNDRED_MB)}
        for who, auth in (("no token", {}), ("a wrong token", {"Authorization": "Bearer not-a-token"})):
            status, _, body = _headers_only(daemon.socket, method, path, {**declared, **auth})
            assert status == 401 and "token" in json.loads(body)["error"], (method, path, who, body)

        status, _, body = _headers_only(daemon.socket, method, path, {**declared, **alpha})
        admin_route = path.startswith("/v1/admin/")
        assert status == (403 if admin_route else 413), (method, path, body)  # an agent's token is not enough
        if not admin_route:
            message = json.loads(body)["error"]
            assert f"{HUNDRED_MB:,}" in message and f"{limit:,}" in message, message

    # A route that takes no body refuses one.
    status, _, body = _headers_only(daemon.socket, "GET", "/v1/status", {"Content-Length": str(HUNDRED_MB)})
    assert status == 413 and "takes no request body" in json.loads(body)["error"], body

    # A body without a declared length (chunked) is read only up to the limit.
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(str(daemon.socket))
    head = "\r\n".join(
        [
            "POST /v1/memories HTTP/1.1",
            "Host: memstrata",
            "Transfer-Encoding: chunked",
            *(f"{k}: {v}" for k, v in {**json_type, **alpha}.items()),
        ]
    )
    sock.sendall((head + "\r\n\r\n").encode())
    chunk = b"x" * 65536
    sent = 0
    try:
        while sent < 8 * MAX_MEMORY_BODY_BYTES:
            sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass  # refused mid-body: what follows is not received
    status, _, body = _answer(sock)
    sock.close()
    assert status == 413 and "over the limit" in json.loads(body)["error"], body

    # Within the limits everything still works on the same daemon.
    status, _, body = _headers_only(daemon.socket, "GET", "/v1/status", alpha, closed=False)
    assert status == 200 and json.loads(body)["access"] == "agent alpha"
    assert "answered 500" not in daemon.log()
