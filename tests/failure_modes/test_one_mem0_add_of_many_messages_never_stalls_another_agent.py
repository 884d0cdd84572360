"""One mem0 add of many messages is bounded, and its length is charged to its own caller.

Before the fix ``POST /v3/memories/add/`` took any number of messages within its 128 KiB body:
2,500 one-word messages kept both cores busy for over 4 minutes on the seed's machine (each
message is a memory of its own: an embedding, a duplicate check and a store write, one after the
other; linear, ~13 ms each here), and such a request counted as *prompt* (daemon/api/fairness.py)
for its whole length, so every patient request of another agent waited a full pause
(``MAX_PAUSE_S``) at each of its steps meanwhile.

Now an add takes at most ``MAX_MESSAGES_PER_ADD`` messages (413 naming the field and the cap,
nothing stored) and each message after the first is a part charged to its caller (patient).  Here
alpha sends max-size adds one after another while beta sends pairs of writes (the second of a pair
waits for the first, so it starts patient): beta's pairs are answered in well under one pause
each.  The ratio to beta's idle figure is in bench/bench_many_messages.py.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest
import yaml

from daemon.api.fairness import MAX_PAUSE_S
from daemon.common.daemon_limits import MAX_MESSAGES_PER_ADD
from tests.helpers import FAST, init_root, run_cli, token_of, wait_for, wait_reachable

pytestmark = pytest.mark.slow

PAIRS = 9


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WORDS = "deploy qdrant port memory agent project note shard vector index search fact user run host"


def messages(n: int, tag: str, words: int = 1) -> list[dict]:
    """``n`` messages of ``words`` words each."""
    return [
        {"role": "user", "content": f"{tag} {i} " + " ".join(WORDS.split()[(i + j) % 15] for j in range(words))}
        for i in range(n)
    ]


class MaxSizeAdds:
    """Alpha's adds of MAX_MESSAGES_PER_ADD messages (a second or two each), each sent once the last is
    answered and read (not back to back: each add starts as a prompt request, as an agent's would)."""

    def __init__(self, base: str, token: str) -> None:
        self.http = httpx.Client(base_url=base, headers={"Authorization": f"Token {token}"}, timeout=600)
        self.statuses: list[int] = []
        self.sent = self.answered = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sent += 1
            body = {"messages": messages(MAX_MESSAGES_PER_ADD, f"alpha {self.sent}", words=8)}
            answer = self.http.post("/v3/memories/add/", json=body)
            self.answered += 1
            self.statuses.append(answer.status_code)
            self._stop.wait(0.1)  # the agent reads its answer

    def in_flight(self) -> int | None:
        """Which add is under way (its number), None between two."""
        sent = self.sent
        return sent if sent > self.answered else None

    def __enter__(self) -> MaxSizeAdds:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(600)
        self.http.close()


def beta_pair(http: httpx.Client, n: int) -> float:
    """Two of beta's writes sent at once; seconds until both are answered (each must be stored)."""
    answers: list[httpx.Response] = []

    def one(i: int) -> None:
        answers.append(http.post("/v3/memories/add/", json={"messages": f"beta's note {n}.{i} about the deploy"}))

    started = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    took = time.perf_counter() - started
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    return took


def test_one_mem0_add_of_many_messages_never_stalls_another_agent(tmp_path, daemons):
    port = _free_port()
    config = init_root(tmp_path, **FAST)  # the local model: the embedding is what each message costs
    for agent in ("alpha", "beta"):
        run_cli("agent", "add", agent, config=config)
    data = yaml.safe_load(config.read_text())
    data["conversation"]["mem0_api"] = {"enabled": True, "port": port}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    daemon = daemons(config)
    wait_reachable(daemon)
    base = f"http://127.0.0.1:{port}"
    alpha = httpx.Client(base_url=base, headers={"Authorization": f"Token {token_of(tmp_path, 'alpha')}"}, timeout=600)
    beta = httpx.Client(base_url=base, headers={"Authorization": f"Token {token_of(tmp_path, 'beta')}"}, timeout=600)

    # over the cap: refused from the count, before any message is stored
    over = alpha.post("/v3/memories/add/", json={"messages": messages(MAX_MESSAGES_PER_ADD + 1, "over")})
    assert over.status_code == 413, over.text
    error = over.json()["detail"]
    assert error.startswith("messages holds 101 messages; at most 100"), error
    assert alpha.post("/v3/memories/", json={}).json()["count"] == 0
    many = alpha.post("/v3/memories/add/", json={"messages": messages(2500, "flood")})
    assert many.status_code == 413 and "2,500 messages" in many.json()["detail"], many.text
    full = alpha.post("/v3/memories/add/", json={"messages": messages(MAX_MESSAGES_PER_ADD, "full")})
    assert full.status_code == 200 and len(full.json()["results"]) == MAX_MESSAGES_PER_ADD, full.text
    wait_for(lambda: beta.post("/v3/memories/search/", json={"query": "warm"}).status_code == 200, what="beta up")
    wait_for(  # the workspaces' own vectors (L3, built in the background at a start) take the model too
        lambda: all(not (a.get("index") or {}).get("pending_embeddings") for a in daemon.status()["agents"]),
        timeout=300,
        what="the L3 vectors of every workspace built",
    )

    admin = {"Authorization": f"Bearer {daemon.admin_token()}"}
    listing = httpx.Client(transport=httpx.HTTPTransport(uds=str(daemon.socket)), base_url="http://m", headers=admin)

    def alphas() -> int:  # counted by the administrator: alpha's own turn is taken by its add
        return len(listing.get("/v1/memories", params={"agent": "alpha", "limit": 1000}).json()["results"])

    stored = alphas()
    within: list[float] = []  # beta's pairs sent and answered during one and the same add of alpha's
    with MaxSizeAdds(base, token_of(tmp_path, "alpha")) as adds:
        wait_for(lambda: alphas() > stored, what="alpha's max-size add under way")
        for n in range(PAIRS * 4):
            add = adds.in_flight()
            took = beta_pair(beta, n)
            if add is not None and adds.in_flight() == add:
                within.append(took)
            if len(within) == PAIRS:
                break
    assert set(adds.statuses) == {200}, adds.statuses
    assert len(within) >= 3, f"too few of beta's pairs fell inside one of alpha's adds: {within}"
    # before the fix the second of each pair waited a full pause (MAX_PAUSE_S) behind alpha's prompt add
    assert max(within) < 0.8 * MAX_PAUSE_S, f"beta's pairs took {sorted(within)} s"
    print(json.dumps({"beta_pairs_s": sorted(round(b, 3) for b in within), "alpha_adds": len(adds.statuses)}))
    log = daemon.log()
    assert "answered 500" not in log, log[-3000:]
