"""protocol/client.py against a stand-in daemon on a Unix socket: retries, errors, what it sends."""

from __future__ import annotations

import http.server
import json
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol import client as client_module
from protocol.client import Client, query_string
from protocol.errors import DaemonRequestError, DaemonUnavailableError, MemstrataError, TokenError
from protocol.limits import MAX_QUERY_CHARS, QueryTooLongError
from protocol.operations import MemorySearch, Search


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[Path, list, list]]:
    """A socket whose handler answers from ``answers`` (status, body, headers) and records each request."""
    answers: list[tuple[int, bytes, dict[str, str]]] = []
    seen: list[tuple[str, str, dict, bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            seen.append((self.command, self.path, dict(self.headers), self.rfile.read(length)))
            status, body, headers = answers.pop(0) if answers else (200, b'{"ok": true}', {})
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _any

        def address_string(self) -> str:
            return "unix"

        def log_message(self, *args: object) -> None:
            pass

    sock = tmp_path / "d.sock"
    server = _Server(str(sock), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield sock, answers, seen
    finally:
        server.shutdown()
        server.server_close()


def test_sends_the_operation_with_the_token(daemon):
    sock, _, seen = daemon
    client = Client(sock, token="tok")
    assert client.add("a", "青岛", memory_type="fact") == {"ok": True}
    method, path, headers, body = seen[-1]
    assert (method, path) == ("POST", "/v1/memories") and headers["Authorization"] == "Bearer tok"
    assert json.loads(body) == {"agent": "a", "text": "青岛", "type": "fact"} and "青岛".encode() in body
    client.list("a", show_archived=True)
    assert seen[-1][1] == "/v1/memories?agent=a&limit=100&show_archived=true"
    client.get("a", "x y")
    assert seen[-1][1] == "/v1/memories/x%20y?agent=a"


def test_a_429_is_retried_then_reported_as_busy(daemon, monkeypatch):
    sock, answers, seen = daemon
    monkeypatch.setattr(client_module.time, "sleep", lambda s: None)
    answers.append((429, b'{"error": "wait"}', {"Retry-After": "1"}))
    assert Client(sock).status() == {"ok": True} and len(seen) == 2
    answers.extend([(429, b'{"error": "wait"}', {"Retry-After": "1"})] * 5)
    with pytest.raises(DaemonRequestError) as busy:
        Client(sock).status()
    assert busy.value.status == 429 and "busy with this caller's earlier requests: wait" in str(busy.value)


def test_errors_carry_the_daemons_message_and_status(daemon):
    sock, answers, _ = daemon
    answers.append((403, b'{"error": "not yours"}', {}))
    with pytest.raises(DaemonRequestError) as refused:
        Client(sock).delete("a", "m")
    assert (refused.value.status, str(refused.value), refused.value.message) == (403, "not yours", "not yours")
    assert isinstance(refused.value, MemstrataError)
    answers.append((500, b"", {}))
    with pytest.raises(DaemonRequestError, match="Internal Server Error"):
        Client(sock).status()
    answers.append((200, b"[1]", {}))
    with pytest.raises(MemstrataError, match="not a JSON object"):
        Client(sock).status()


def test_no_daemon_is_unavailable_with_advice(tmp_path):
    with pytest.raises(DaemonUnavailableError) as gone:
        Client(tmp_path / "none.sock").status()
    assert isinstance(gone.value, ConnectionError) and "no daemon socket at" in str(gone.value)
    assert "memstrata run" in str(gone.value)


def test_a_long_query_is_refused_before_sending(daemon):
    """The client checks the query (the operation does not: mem0's REST search builds one with any)."""
    sock, _, seen = daemon
    client = Client(sock)
    too_long = "x" * (MAX_QUERY_CHARS + 1)
    for refused in (
        lambda: client.search("a", too_long),
        lambda: client.memory_search("a", too_long),
        lambda: client.call(Search("a", too_long)),
        lambda: client.call(MemorySearch("a", too_long)),
    ):
        with pytest.raises(QueryTooLongError, match="the query is 4,097 characters; the limit is 4,096"):
            refused()
    assert seen == []
    client.memory_search("a", "x" * MAX_QUERY_CHARS)
    assert len(seen) == 1


def test_a_token_no_memstrata_token_looks_like_is_refused_unshown():
    with pytest.raises(TokenError) as bad:
        Client("/nowhere", token="sécret\n")
    assert "sécret" not in str(bad.value) and isinstance(bad.value, ValueError)


def test_query_string():
    assert query_string({"a": None, "b": True, "c": 1}) == "?b=true&c=1" and query_string(None) == ""
