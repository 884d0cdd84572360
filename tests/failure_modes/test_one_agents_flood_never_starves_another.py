"""One agent's flood of requests never makes another agent wait behind it.

Before the fix every request ran in one shared thread pool in arrival order:
300 concurrent searches from alpha made beta's single search take 22 s, and
5,000 L4 adds from alpha made beta's L4 search p50 21x slower.  Now each token
runs at most a few requests at once and queues a bounded number more (past
that: 429 with Retry-After), and a free thread goes to the callers in turn.

Here alpha keeps 300 requests outstanding (each thread sends its next one the
moment its last is answered, ignoring Retry-After), first searches, then L4
adds; meanwhile beta's searches are answered after at most a few of alpha's,
and alpha is told 429 with a Retry-After.  The latencies are in
bench/bench_flood.py; what is asserted here is order and counts, not time.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections import Counter
from pathlib import Path

import pytest

from daemon.common.daemon_limits import PER_CALLER_QUEUED
from tests.helpers import FAST, init_root, run_cli, token_of, wait_for, wait_reachable

pytestmark = pytest.mark.slow

FLOOD = 300


class _Connection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("memstrata", timeout=300)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.path))


def post(sock: Path, token: str, path: str, body: dict) -> tuple[int, dict, dict]:
    """One request, no retry: status, headers, JSON answer."""
    connection = _Connection(sock)
    try:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        connection.request("POST", path, body=json.dumps(body), headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read())
    finally:
        connection.close()


class Flood:
    """FLOOD threads sending alpha's requests back to back; counts what came back, in order."""

    def __init__(self, sock: Path, token: str, path: str, body) -> None:
        self.statuses: Counter = Counter()
        self.retry_after: set[str] = set()
        self.refusal = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._args = (sock, token, path, body)
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(FLOOD)]

    def _run(self, i: int) -> None:
        sock, token, path, body = self._args
        n = 0
        while not self._stop.is_set():
            n += 1
            status, headers, answer = post(sock, token, path, body(i, n))
            with self._lock:
                self.statuses[status] += 1
                if status == 429:
                    self.retry_after.add(headers.get("retry-after", ""))
                    self.refusal = answer["error"]

    def served(self) -> int:
        with self._lock:
            return self.statuses[200]

    def __enter__(self) -> Flood:
        for t in self._threads:
            t.start()
        wait_for(lambda: self.statuses[429] or self.served() > FLOOD, timeout=120, what="the flood under way")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=120)


def beta_is_served_amid(flood: Flood, call) -> int:
    """How many of alpha's requests were answered while beta's one was (beta's must be a 200)."""
    before = flood.served()
    status, _, answer = call()
    assert status == 200, answer
    return flood.served() - before


def test_one_agents_flood_never_starves_another(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    for agent in ("alpha", "beta"):
        run_cli("agent", "add", agent, config=config)
        memory = tmp_path / "workspace" / "agents" / f"{agent}-workspace" / "memory"
        for day in range(1, 29):
            lines = "\n".join(f"- {agent} note {day}.{i}: the qdrant port is {6000 + i}" for i in range(200))
            (memory / f"2026-02-{day:02d}.md").write_text(f"# 2026-02-{day:02d}\n\n{lines}\n")
    daemon = daemons(config)
    wait_reachable(daemon)
    alpha, beta = token_of(tmp_path, "alpha"), token_of(tmp_path, "beta")
    sock = daemon.socket
    for agent, token in (("alpha", alpha), ("beta", beta)):
        wait_for(
            lambda a=agent, t=token: post(sock, t, "/v1/search", {"agent": a, "q": "qdrant port"})[2].get("results"),
            timeout=120,
            what=f"{agent} indexed",
        )
    post(sock, beta, "/v1/memories", {"agent": "beta", "text": "beta's store listens on 6333"})

    def beta_search():
        return post(sock, beta, "/v1/search", {"agent": "beta", "q": "qdrant port", "limit": 50})

    def beta_memory_search():
        return post(sock, beta, "/v1/memories/search", {"agent": "beta", "q": "which port"})

    # alpha's 300 outstanding searches: beta is answered after a few of them, not after the 300.
    with Flood(sock, alpha, "/v1/search", lambda i, n: {"agent": "alpha", "q": "qdrant port", "limit": 50}) as flood:
        amid = [beta_is_served_amid(flood, beta_search) for _ in range(5)]
        assert max(amid) < PER_CALLER_QUEUED, f"alpha's searches answered while beta waited: {amid}"
    assert flood.statuses[429] and min(int(v) for v in flood.retry_after) >= 1, flood.statuses
    assert "too many requests at once" in flood.refusal and set(flood.statuses) <= {200, 429}, flood.statuses

    # alpha's 300 outstanding L4 adds: beta's L4 search goes ahead of them.
    def alpha_add(i: int, n: int) -> dict:
        return {"agent": "alpha", "text": f"alpha's flood note {i}.{n} about the deploy"}

    with Flood(sock, alpha, "/v1/memories", alpha_add) as flood:
        amid = [beta_is_served_amid(flood, beta_memory_search) for _ in range(5)]
        assert max(amid) < PER_CALLER_QUEUED, f"alpha's adds answered while beta waited: {amid}"
    assert flood.statuses[429] and set(flood.statuses) <= {200, 429}, flood.statuses
    assert "answered 500" not in daemon.log()
