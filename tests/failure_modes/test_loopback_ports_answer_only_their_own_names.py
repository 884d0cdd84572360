"""A loopback port answers only requests that name it: DNS rebinding reads nothing.

Before the fix the metrics port answered ``GET /metrics`` with ``Host: evil.example`` (what a
browser sends for a page of evil.example whose name was rebound to 127.0.0.1) with every agent id
and its counts, and the mem0 REST port checked no Host either.  Now both answer 421 naming what
they answer to, before a token is looked at or a body read; the Unix socket (no browser reaches
it) takes any Host, as its clients send.
"""

from __future__ import annotations

import http.client
import json
import socket

import pytest
import yaml

from daemon.front.daemon_client import _UnixConnection
from tests.helpers import FAST, init_root, run_cli, token_of, wait_reachable


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ask(port: int, method: str, path: str, host: str, token: str | None = None, body: dict | None = None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Host": host, **({"Authorization": f"Token {token}"} if token else {})}
    if body is not None:
        headers["Content-Type"] = "application/json"
    try:
        connection.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode(), response.getheader("Connection")
    finally:
        connection.close()


@pytest.fixture
def ports(tmp_path, daemons):
    metrics_port, mem0_port = _free_port(), _free_port()
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"}, metrics={"port": metrics_port})
    run_cli("agent", "add", "alpha", config=config)
    data = yaml.safe_load(config.read_text())
    data["conversation"]["mem0_api"] = {"enabled": True, "port": mem0_port}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    daemon = daemons(config)
    wait_reachable(daemon)
    return daemon, metrics_port, mem0_port, token_of(tmp_path, "alpha")


def test_loopback_ports_answer_only_their_own_names(ports):
    daemon, metrics_port, mem0_port, token = ports
    for port, path, who in ((metrics_port, "/metrics", None), (mem0_port, "/v1/ping/", token)):
        for host in ("evil.example", f"evil.example:{port}", f"localhost:{port + 1}", "attacker.127.0.0.1.nip.io"):
            status, text, connection = _ask(port, "GET", path, host, who)
            assert status == 421, (port, host, text)
            error = json.loads(text)["error"]
            assert f"127.0.0.1:{port}, localhost:{port}" in error and "DNS rebinding" in error, error
            assert "alpha" not in text and connection == "close"
        for host in ("localhost", f"localhost:{port}", "127.0.0.1", f"127.0.0.1:{port}", f"[::1]:{port}", "LOCALHOST"):
            status, text, _ = _ask(port, "GET", path, host, who)
            assert status == 200, (port, host, text)
    assert 'agent="alpha"' in _ask(metrics_port, "GET", "/metrics", "localhost")[1], "the port's own view, unchanged"

    # a write sent with a foreign Host is refused before it is read: nothing is stored
    status, _, _ = _ask(mem0_port, "POST", "/v3/memories/add/", "evil.example", token, {"messages": "rebound note"})
    assert status == 421
    stored = _ask(mem0_port, "POST", "/v3/memories/", f"localhost:{mem0_port}", token, {})
    assert stored[0] == 200 and json.loads(stored[1])["count"] == 0, stored

    # the Unix socket takes any Host: only its mode decides who connects, and no browser can
    unix = _UnixConnection(daemon.socket, timeout=30)
    unix.request("GET", "/healthz", headers={"Host": "evil.example"})
    assert unix.getresponse().status == 200
    assert "answered 500" not in daemon.log()
