"""Told 429, the clients wait Retry-After and try again a bounded number of times, then say why.

A real HTTP server on a Unix socket stands in for a daemon busy with this
caller's earlier requests: it answers 429 (with Retry-After) a given number of
times, then 200.  Both clients that agents use are driven: the daemon's own
(daemon/front/daemon_client.py: the CLI and the MCP server) and the skill's standard-library
one (skills/mem0-integration/mem0_client.py).
"""

from __future__ import annotations

import http.server
import importlib.util
import json
import socketserver
import threading
from pathlib import Path

import pytest

from daemon.common.daemon_limits import CLIENT_RETRIES
from daemon.front.daemon_client import DaemonClient, DaemonRequestError

SKILL_CLIENT = Path(__file__).resolve().parents[3] / "skills" / "mem0-integration" / "mem0_client.py"


def _skill():
    spec = importlib.util.spec_from_file_location("mem0_client_busy", SKILL_CLIENT)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


class BusyServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: Path, busy_times: int) -> None:
        self.busy_left = busy_times
        self.requests_seen = 0
        super().__init__(str(path), Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: BusyServer

    def address_string(self) -> str:
        return "unix"

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.server.requests_seen += 1
        if self.server.busy_left > 0:
            self.server.busy_left -= 1
            status, body = 429, {"error": "too many requests at once from this caller: retry in 1 s"}
        else:
            status, body = 200, {"results": [], "ok": True}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 429:
            self.send_header("Retry-After", "0.05")  # whole seconds from the daemon; short here
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer


@pytest.fixture
def busy(tmp_path):
    servers = []

    def start(busy_times: int) -> BusyServer:
        server = BusyServer(tmp_path / f"busy-{len(servers)}.sock", busy_times)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_the_daemon_client_retries_after_a_429(busy):
    server = busy(CLIENT_RETRIES)  # busy for every retry but the last
    client = DaemonClient(Path(server.server_address), token="t")
    assert client.memory_search("alpha", "port")["ok"] is True
    assert server.requests_seen == CLIENT_RETRIES + 1


def test_the_daemon_client_gives_up_with_a_clear_error(busy):
    server = busy(100)
    client = DaemonClient(Path(server.server_address), token="t")
    with pytest.raises(DaemonRequestError) as refused:
        client.search("alpha", "port")
    assert refused.value.status == 429 and server.requests_seen == CLIENT_RETRIES + 1
    assert "busy with this caller's earlier requests" in str(refused.value)
    assert f"tried {CLIENT_RETRIES + 1} times" in str(refused.value)


def test_the_skill_client_retries_then_reports_the_429(busy):
    """The skill sends through the protocol's client: the same retries, the same message, its own error type."""
    skill = _skill()
    server = busy(CLIENT_RETRIES)
    client = skill.Mem0Client("alpha", "t", Path(server.server_address))
    assert client.status()["ok"] is True and server.requests_seen == CLIENT_RETRIES + 1

    server = busy(100)
    client = skill.Mem0Client("alpha", "t", Path(server.server_address))
    with pytest.raises(skill.RequestError) as refused:
        client.status()
    assert refused.value.status == 429 and server.requests_seen == CLIENT_RETRIES + 1
    assert "busy with this caller's earlier requests" in str(refused.value)
