"""L4 benchmarks, each against a baseline measured in the same run.

- add (infer=False, embedded store, real model): p50 of a mem0 write, against
  embedding the same text alone (the model's share) and a raw Qdrant upsert;
- search at 10k memories: three-phase search p50/p95, against one raw Edge
  query with the same vector and no filter (the engine's floor); Edge against
  qdrant-client's local mode and raw Edge at 1k/10k/50k is bench/bench_edge.py;
- fallback with the link down: the daemon's answer from L3 (first call, later
  calls), against the same L3 search asked for directly;
- cleanup: memories scanned per second (dry-run, execute) against a bare paged
  scroll of the same collection;
- the durable queue: enqueue rate (one fsync'd commit per write) against an
  in-memory SQLite insert;
- outage replay: 10,000 queued writes drained by the daemon into the embedded
  store, against single adds through the same daemon (the ratio), first with a
  stand-in HTTP embedding endpoint (tests/stand_in_embedder.py, labelled: it
  makes the replay itself the thing measured), then with the real llama.cpp
  model, against the model alone embedding the same texts in the same batches.

The 10k memories are written straight into the collection in mem0's payload
format (embedding 10k texts would take minutes); their vectors are 500 real
embeddings with small perturbations, which is all a brute-force search cares about.
"""

from __future__ import annotations

import hashlib
import socket
import statistics
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path

import apsw
import numpy as np
import yaml

from bench.bench_index import _pct
from daemon.common.config import DEFAULT_MODEL_PATH
from daemon.front.daemon_client import DaemonClient
from layers.conversation.adapters.store import ConversationStore, NewMemory, StoreSettings
from layers.conversation.lifecycle.durable_queue import WriteQueue
from layers.conversation.policy.rules import Phase
from layers.local.models.vectors import LocalEmbedder
from tests.corpus import Corpus
from tests.helpers import DaemonProcess, init_root, run_cli, wait_for
from tests.stand_in_embedder import StandInEmbedder

QUERIES = ["Qdrant 端口", "部署 计划", "tailscale peer", "预算 会议", "backup schedule", "记忆 衰减", "python 版本"]


def _memory(agent: str, text: str, visibility: str = "private", project: str | None = None) -> NewMemory:
    return NewMemory(
        str(uuid.uuid4()), agent, text, "knowledge", visibility, project, "2026-11-30T00:00:00+00:00", None, None
    )


def _texts(n: int) -> list[str]:
    corpus = Corpus(seed=11)
    texts = []
    for _, doc in corpus.documents(files=n // 5 + 1, chunks_per_file=5):
        texts += [line.strip() for line in doc.splitlines() if len(line.strip()) > 20]
    return texts[:n]


_BASE: dict[int, np.ndarray] = {}


def _fill(store: ConversationStore, embedder: LocalEmbedder, total: int, old_session_every: int = 0) -> None:
    """``total`` memories in mem0's payload shape: public, two projects, private of five agents;
    every ``old_session_every``-th one a session memory from last year (expired).

    Written through mem0's vector store (``insert``), so the same code fills either engine; a
    local-mode store gets each thousand as one commit.
    """
    texts = _texts(500)
    if id(embedder) not in _BASE:  # the 500 real embeddings, once per run
        _BASE[id(embedder)] = np.vstack([embedder.embed_passages(texts[i : i + 32]) for i in range(0, len(texts), 32)])
    base = _BASE[id(embedder)]
    rng = np.random.default_rng(3)
    vectors_store = store._memory.vector_store
    points = []

    def flush() -> None:
        with store._one_commit():
            vectors_store.insert(
                vectors=[p[1] for p in points], payloads=[p[2] for p in points], ids=[p[0] for p in points]
            )

    for i in range(total):
        vector = base[i % len(base)] + rng.normal(0, 0.02, base.shape[1])
        vector /= np.linalg.norm(vector)
        kind = i % 4
        text = f"{texts[i % len(texts)]} #{i}"
        payload = {
            "data": text,
            "hash": hashlib.md5(text.encode()).hexdigest(),
            "created_at": "2026-11-30T00:00:00+00:00",
            "agent_id": f"agent{i % 5}",
            "visibility": ("public", "project", "private", "private")[kind],
            "memory_type": "knowledge",
            "write_id": str(uuid.uuid4()),
        }
        if old_session_every and i % old_session_every == 0:
            payload.update(memory_type="session", created_at="2025-01-01T00:00:00+00:00")
        if kind == 1:  # i is odd here: (i // 4) alternates, where i % 2 made every project memory "web"
            payload["project_id"] = ("infra", "web")[(i // 4) % 2]
        points.append((str(uuid.uuid4()), vector.tolist(), payload))
        if len(points) == 1000:
            flush()
            points = []
    if points:
        flush()


def bench_store(quick: bool) -> None:
    total = 2000 if quick else 10_000
    embedder = LocalEmbedder(DEFAULT_MODEL_PATH, min_free_mb=0)
    with tempfile.TemporaryDirectory() as tmp:
        store = ConversationStore(StoreSettings("embedded", Path(tmp)), embedder, embedder.dimension())
        started = time.perf_counter()
        store.connect()
        print(f"connect (mem0 import + Edge shard): {time.perf_counter() - started:.2f} s")
        embedder.embed_query("warm up")

        samples = _texts(60)
        adds, embeds, upserts = [], [], []
        for text in samples[:40]:
            t = time.perf_counter()
            store.add(_memory("agent0", text))
            adds.append(time.perf_counter() - t)
            t = time.perf_counter()
            vector = embedder.embed_passages([text])[0]
            embeds.append(time.perf_counter() - t)
            t = time.perf_counter()
            store._client.upsert([(str(uuid.uuid4()), vector.tolist(), {"data": text})])  # the Edge shard
            upserts.append(time.perf_counter() - t)
        add_ms, embed_ms, upsert_ms = (statistics.median(v) * 1000 for v in (adds, embeds, upserts))
        print(
            f"add (infer=False, empty collection): p50 {add_ms:.1f} ms = embedding {embed_ms:.1f} ms "
            f"+ raw upsert {upsert_ms:.1f} ms + mem0 {add_ms - embed_ms - upsert_ms:.1f} ms "
            f"({add_ms / (embed_ms + upsert_ms):.2f}x embedding + upsert)"
        )

        started = time.perf_counter()
        _fill(store, embedder, total)
        print(f"filled {total} memories in {time.perf_counter() - started:.1f} s")
        phases = [Phase("public", "public"), Phase("project", "project", projects=("infra",))]
        phases.append(Phase("private", "private", owner="agent1"))
        searches, raw = [], []
        for query in QUERIES * (2 if quick else 5):
            t = time.perf_counter()
            store.search(query, phases, limit=10)
            searches.append(time.perf_counter() - t)
            vector = embedder.embed_query(query).tolist()
            t = time.perf_counter()
            store._client.search(vector, limit=10)
            raw.append(time.perf_counter() - t)
        p50, p95, raw50 = _pct(searches, 0.5) * 1000, _pct(searches, 0.95) * 1000, _pct(raw, 0.5) * 1000
        print(
            f"search at {total} memories (3 phases): p50 {p50:.0f} ms, p95 {p95:.0f} ms; one unfiltered raw "
            f"Edge query p50 {raw50:.1f} ms ({p50 / raw50:.1f}x)"
        )
        adds = []
        for text in samples[40:60]:
            t = time.perf_counter()
            store.add(_memory("agent0", text))
            adds.append(time.perf_counter() - t)
        print(f"add at {total} memories: p50 {statistics.median(adds) * 1000:.1f} ms")
        store.close()


def bench_cleanup(quick: bool) -> None:
    from layers.conversation.lifecycle.cleanup import Rules, Selection, run_cleanup
    from layers.conversation.policy.rules import DEFAULT_RETENTION_DAYS

    total = 2000 if quick else 10_000
    embedder = LocalEmbedder(DEFAULT_MODEL_PATH, min_free_mb=0)
    with tempfile.TemporaryDirectory() as tmp:
        store = ConversationStore(StoreSettings("embedded", Path(tmp)), embedder, embedder.dimension())
        store.connect()
        _fill(store, embedder, total, old_session_every=4)
        for _ in range(2):  # the first pass warms up; the second is the baseline
            t = time.perf_counter()
            cursor, scrolled = None, 0
            while True:
                page, cursor = store.scan(Selection(), 256, cursor)
                scrolled += len(page)
                if cursor is None:
                    break
            raw = scrolled / (time.perf_counter() - t)
        rules = Rules(DEFAULT_RETENTION_DAYS)
        for execute in (False, True):
            t = time.perf_counter()
            report = run_cleanup(store, rules, execute=execute)
            rate = report.scanned / (time.perf_counter() - t)
            print(
                f"cleanup {report.mode} over {report.scanned} memories ({report.expired} expired, "
                f"{report.deleted} deleted): {rate:.0f} memories/s; a bare paged scroll {raw:.0f}/s "
                f"({rate / raw:.2f}x)"
            )
        store.close()


def bench_queue(quick: bool) -> None:
    n = 200 if quick else 1000
    with tempfile.TemporaryDirectory() as tmp:
        queue = WriteQueue(Path(tmp) / "queue.sqlite")
        request = {"text": "断网时的一条记忆 " * 5, "agent_id": "a"}
        t = time.perf_counter()
        for i in range(n):
            queue.put(f"w{i}", "a", request)
        ours = n / (time.perf_counter() - t)
        memory = apsw.Connection(":memory:")
        memory.execute("CREATE TABLE q(id TEXT PRIMARY KEY, body TEXT)")
        t = time.perf_counter()
        for i in range(n):
            with memory:
                memory.execute("INSERT INTO q VALUES (?, ?)", (f"w{i}", str(request)))
        baseline = n / (time.perf_counter() - t)
        print(f"enqueue: {ours:.0f} writes/s (durable, synchronous=FULL); in-memory insert {baseline:.0f}/s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _set_backend(config: Path, backend: str, url: str | None = None) -> None:
    data = yaml.safe_load(config.read_text())
    conv = data.setdefault("conversation", {})
    conv.update(backend=backend, probe_interval_s=0.5)
    if url:
        conv.setdefault("qdrant", {}).update(url=url, timeout_s=2)
    config.write_text(yaml.safe_dump(data, sort_keys=False))


def bench_outage(quick: bool) -> None:
    n = 20 if quick else 100
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = init_root(root, watch={"debounce_ms": 100}, git={"quiet_period_s": 0.3})
        run_cli("agent", "add", "a", config=config)
        notes = root / "workspace" / "agents" / "a-workspace" / "memory" / "2026-11-30.md"
        notes.write_text("# 部署\n\nQdrant 服务在 6333 端口，经 Tailscale 访问。\n", encoding="utf-8")
        _set_backend(config, "remote", f"http://127.0.0.1:{_free_port()}")
        daemon = DaemonProcess(config).start()
        token = (notes.parents[1] / ".memstrata" / "token").read_text().strip()
        try:
            wait_for(lambda: daemon.agent("a")["index"]["chunks"] > 0, timeout=60)
            with DaemonClient(daemon.socket, timeout=30, token=token) as a:
                t = time.perf_counter()
                a.memory_search("a", "Qdrant 端口")
                first = time.perf_counter() - t
                later, direct = [], []
                for _ in range(20):
                    t = time.perf_counter()
                    a.memory_search("a", "Qdrant 端口")
                    later.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    a.search("a", "Qdrant 端口")
                    direct.append(time.perf_counter() - t)
                later_ms, direct_ms = statistics.median(later) * 1000, statistics.median(direct) * 1000
                print(
                    f"fallback search, link down: first {first * 1000:.0f} ms, later p50 {later_ms:.1f} ms; "
                    f"L3 search asked directly p50 {direct_ms:.1f} ms ({later_ms / direct_ms:.2f}x)"
                )
                t = time.perf_counter()
                for i in range(n):
                    a.add("a", f"断网时写入的第 {i} 条记忆")
                print(f"queued adds through the daemon: {n / (time.perf_counter() - t):.0f}/s")
        finally:
            daemon.stop()


def _replay_root(root: Path, stand_in: StandInEmbedder | None) -> tuple[Path, dict, str]:
    config = init_root(root, watch={"debounce_ms": 100}, git={"quiet_period_s": 0.3})
    run_cli("agent", "add", "a", config=config)
    env = stand_in.configure(config) if stand_in else {}
    _set_backend(config, "embedded")
    token = (root / "workspace" / "agents" / "a-workspace" / ".memstrata" / "token").read_text().strip()
    return config, env, token


def _backlog(texts: list[str], start: int) -> list[tuple[str, str, dict]]:
    created = "2026-11-30T08:00:00+00:00"
    writes = []
    for i, text in enumerate(texts, start):
        record = NewMemory(f"bench-{i:06d}", "a", f"{text} #{i}", "knowledge", "private", None, created, None, None)
        writes.append((record.write_id, "a", asdict(record)))
    return writes


def _replay_case(label: str, stand_in: StandInEmbedder | None, singles: int, queued: int) -> tuple[float, float]:
    """Single adds through a daemon, then ``queued`` writes put in its queue and drained after a restart."""
    texts = _texts(singles + queued)
    texts = (texts * ((singles + queued) // len(texts) + 1))[: singles + queued]  # each gets its own #n below
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config, env, token = _replay_root(root, stand_in)
        daemon = DaemonProcess(config, env).start()
        try:
            wait_for(lambda: daemon.status()["conversation"]["reachable"], timeout=120)
            with DaemonClient(daemon.socket, timeout=60, token=token) as a:
                a.add("a", "warm up: the model loads on first use")
                t = time.perf_counter()
                for text in texts[:singles]:
                    assert a.add("a", text)["queued"] is False
                single = singles / (time.perf_counter() - t)
        finally:
            daemon.stop()
        queue = WriteQueue(root / "state" / "conversation" / "queue.sqlite")
        queue.put_many(_backlog(texts[singles:], singles))
        queue.close()
        daemon = DaemonProcess(config, env).start()
        try:
            started = time.perf_counter()
            status: dict = {}

            def drained() -> bool:
                nonlocal status
                status = daemon.status()["conversation"]["queue"]
                return status["depth"] == 0

            seen_rate = []
            while not drained():
                if status.get("replay_rate_per_s"):
                    seen_rate.append(status["replay_rate_per_s"])
                if time.perf_counter() - started > 3600:
                    raise TimeoutError("the backlog did not drain within an hour")
                time.sleep(0.5)
            elapsed = time.perf_counter() - started
        finally:
            daemon.stop()
        rate = queued / elapsed
        assert status["replayed"] == queued, status
        print(
            f"replay of {queued} queued writes ({label}): {rate:.0f} writes/s from daemon ready to drained "
            f"({queued / rate:.0f} s; the daemon's own batch rate said {seen_rate[-1] if seen_rate else '?'}/s); "
            f"single adds through the daemon {single:.0f}/s ({rate / single:.1f}x)"
        )
        return rate, single


def bench_replay(quick: bool) -> None:
    stand_in = StandInEmbedder()
    try:
        _replay_case("stand-in HTTP embedding endpoint", stand_in, 50 if quick else 200, 2000 if quick else 10_000)
    finally:
        stand_in.close()
    queued = 40 if quick else 300
    rate, _ = _replay_case("real llama.cpp model", None, 10 if quick else 30, queued)
    # the model alone on the same texts, in batches like the replay's
    embedder = LocalEmbedder(DEFAULT_MODEL_PATH, min_free_mb=0)
    texts = [w[2]["text"] for w in _backlog((_texts(queued) * 2)[:queued], 0)]
    embedder.embed_passages(texts[:4])
    t = time.perf_counter()
    for i in range(0, len(texts), 16):
        embedder.embed_passages(texts[i : i + 16])
    alone = len(texts) / (time.perf_counter() - t)
    embedder.unload()
    print(
        f"real model alone embedding the same {len(texts)} texts: {alone:.1f} texts/s; the replay reaches "
        f"{rate / alone:.2f}x of it (the model is the limit)"
    )


def main(quick: bool = False) -> None:
    bench_store(quick)
    bench_cleanup(quick)
    bench_queue(quick)
    bench_outage(quick)
    bench_replay(quick)
