"""A dead or hung Qdrant link: answers from L3, durable queue, SIGKILL, exactly-once replay.

The remote server here is a closed port or a socket of the test's own that
accepts and never answers (a real server cannot run on these machines); the
store that comes back is the real embedded one.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path

import pytest
import yaml

from daemon.front.daemon_client import DaemonClient
from layers.conversation.lifecycle.durable_queue import WriteQueue
from tests.helpers import FAST, init_root, run_cli, token_of, wait_for, wait_reachable

TIMEOUT_S = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SilentServer:
    """Accepts connections and never says a word: a hung server, or a link that drops packets."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


def set_backend(config: Path, backend: str, url: str | None = None) -> None:
    data = yaml.safe_load(config.read_text())
    conv = data.setdefault("conversation", {})
    conv["backend"] = backend
    conv["probe_interval_s"] = 0.5
    if url:
        conv.setdefault("qdrant", {}).update({"url": url, "timeout_s": TIMEOUT_S})
    config.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


def prepare(tmp_path: Path, url: str) -> Path:
    config = init_root(tmp_path, **FAST)
    run_cli("agent", "add", "a", config=config)
    notes = tmp_path / "workspace" / "agents" / "a-workspace" / "memory" / "2026-11-30.md"
    notes.write_text("# 部署\n\nQdrant 服务在 6333 端口，经 Tailscale 访问。\n", encoding="utf-8")
    set_backend(config, "remote", url)
    return config


def timed(fn):
    started = time.monotonic()
    value = fn()
    return value, time.monotonic() - started


def assert_answered_from_l3(answer: dict) -> None:
    assert answer["degraded"] is True and answer["layer"] == "local"
    assert "unreachable" in answer["reason"]
    assert answer["results"], "a dead link must not look like 'nothing found'"
    assert answer["results"][0]["source"] == "local" and "6333" in answer["results"][0]["memory"]


def test_closed_port_queue_sigkill_and_exactly_once_replay(tmp_path, daemons):
    config = prepare(tmp_path, f"http://127.0.0.1:{free_port()}")
    daemon = daemons(config)
    wait_for(lambda: daemon.agent("a")["index"]["chunks"] > 0, what="a's notes indexed")
    token = token_of(tmp_path, "a")
    with DaemonClient(daemon.socket, timeout=30, token=token) as a:
        answer, first = timed(lambda: a.memory_search("a", "Qdrant 端口"))
        assert_answered_from_l3(answer)
        assert first < TIMEOUT_S + 3
        again, _ = timed(lambda: a.memory_search("a", "Qdrant 端口"))
        assert_answered_from_l3(again)
        written = [a.add("a", f"断网时写入的第 {i} 条记忆", type="session") for i in range(3)]
    assert all(w["queued"] for w in written)
    status = daemon.status()["conversation"]
    assert status["queue"]["depth"] == 3 and status["breaker"]["state"] == "open" and not status["reachable"]
    assert status["last_error"]

    daemon.signal(signal.SIGKILL)
    daemon.proc.wait(10)
    assert WriteQueue(tmp_path / "state" / "conversation" / "queue.sqlite").depth() == 3

    set_backend(config, "embedded")  # the store is reachable again
    daemon = daemons(config)
    wait_for(lambda: daemon.status()["conversation"]["queue"]["depth"] == 0, timeout=90, what="queue drained")
    with DaemonClient(daemon.socket, timeout=30, token=token) as a:
        stored = a.get_all("a")["results"]
    assert sorted(m["memory"] for m in stored) == [f"断网时写入的第 {i} 条记忆" for i in range(3)]
    assert sorted(m["write_id"] for m in stored) == sorted(w["write_id"] for w in written)
    # created_at is when the agent wrote it, not when it was replayed; the type's lifetime came along
    assert all(m["memory_type"] == "session" and m["expiration_date"] for m in stored)
    assert daemon.status()["conversation"]["queue"]["replayed"] == 3


def test_replay_after_a_crash_between_write_and_dequeue_writes_once(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    run_cli("agent", "add", "a", config=config)
    daemon = daemons(config)
    wait_reachable(daemon)
    with DaemonClient(daemon.socket, timeout=30, token=token_of(tmp_path, "a")) as a:
        first = a.add("a", "只应出现一次", write_id="w-123")
        retry = a.add("a", "只应出现一次", write_id="w-123")  # a client retry with the same key
    assert first["results"][0]["event"] == "ADD" and retry["results"][0]["event"] == "EXISTS"
    daemon.stop()
    # as if the daemon died after the store had the memory but before the queue forgot it
    request = {
        "write_id": "w-123",
        "agent_id": "a",
        "text": "只应出现一次",
        "memory_type": "knowledge",
        "visibility": "private",
        "project_id": None,
        "created_at": "2026-11-30T00:00:00+00:00",
        "expiration_date": None,
        "expires_at": None,
        "infer": False,
    }
    WriteQueue(tmp_path / "state" / "conversation" / "queue.sqlite").put("w-123", "a", request)
    daemon = daemons(config)
    wait_for(lambda: daemon.status()["conversation"]["queue"]["depth"] == 0, timeout=90, what="queue drained")
    with DaemonClient(daemon.socket, timeout=30, token=token_of(tmp_path, "a")) as a:
        assert [m["memory"] for m in a.get_all("a")["results"]] == ["只应出现一次"]
    assert daemon.status()["conversation"]["queue"]["skipped_already_written"] == 1


@pytest.fixture
def silent_server():
    server = SilentServer()
    yield server
    server.close()


def test_hung_server_answers_from_l3_and_stops_promptly(tmp_path, daemons, silent_server):
    config = prepare(tmp_path, f"http://127.0.0.1:{silent_server.port}")
    daemon = daemons(config)
    wait_for(lambda: daemon.agent("a")["index"]["chunks"] > 0, what="a's notes indexed")
    with DaemonClient(daemon.socket, timeout=30, token=token_of(tmp_path, "a")) as a:
        answer, first = timed(lambda: a.memory_search("a", "Tailscale"))
        assert_answered_from_l3(answer)
        assert first < TIMEOUT_S + 3
        queued = a.add("a", "写入挂起的服务器")
        assert queued["queued"] is True
    wait_for(lambda: silent_server.held, what="the probe reached the silent server")
    wait_for(lambda: "probe" in daemon.status()["conversation"]["last_error"], what="the probe timed out")
    assert daemon.status()["conversation"]["breaker"]["state"] == "open"
    assert "UNREACHABLE" in run_cli("status", config=config, check=False).stdout
    assert daemon.stop() == 0  # a hung link does not hold up shutdown
    assert WriteQueue(tmp_path / "state" / "conversation" / "queue.sqlite").depth() == 1
