"""The embedded L4 engines side by side: Qdrant Edge against qdrant-client's local mode and raw Edge.

At each size (1k / 10k, and 50k with ``--sizes``) the same mem0-shaped memories (¼ public,
¼ project over two projects, ½ private of five agents; 384-d vectors from the real model,
perturbed) go into a store on each engine, and the same queries are asked:

- three-phase search through ``ConversationStore.search`` (the broker's phases, top 10 merged),
  the query's embedding computed beforehand and cached, so it is excluded (reported apart);
- the same three filtered queries straight to the Edge shard (raw Edge: the floor);
- recall@10 of each phase against an exact numpy search over the points the phase allows;
- add (infer=False) minus its embedding; open (close + connect) with the store full;
- cleanup of the store with 10 % expired (execute);
- the process's anonymous memory (RssAnon, glibc tuned as the daemon's): building mem0, after the
  fill, after the optimize (the daemon's state once its schedule ran, no restart), and after the reopen.

Local mode is measured at 1k and 10k only (at 50k one search takes 36-40 s).  Printed as
ratios, in the same run.  Usage: ``python -m bench.bench_edge [--sizes 1000,10000,50000]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.bench_conversation import QUERIES, _fill, _memory
from bench.bench_index import _pct
from daemon.common.config import DEFAULT_MODEL_PATH
from layers.conversation.adapters.store import EDGE, QDRANT_LOCAL, ConversationStore, StoreSettings
from layers.conversation.policy.rules import DEFAULT_RETENTION_DAYS, Phase
from layers.local.models.vectors import LocalEmbedder

PHASES = [
    Phase("public", "public"),
    Phase("project", "project", projects=("infra",)),
    Phase("private", "private", owner="agent1"),
]


REPLAY_BATCHES = 10  # of 100 writes (the broker sizes its batches to about a second, 16-500)


class _Cached:
    """The embedder with the replayed texts' passages given beforehand (the replay's own cost is what is measured)."""

    def __init__(self, embedder: LocalEmbedder, cache: dict) -> None:
        self._embedder, self._cache, self.model_id = embedder, cache, embedder.model_id

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return np.vstack([self._cache[t] for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self._embedder.embed_query(text)


def rss_anon_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return float("nan")


SEARCH_EVERY_S = 0.08  # the arrival rate of three-phase searches during the optimize (12.5/s)
UPKEEP_EVERY_S = 0.25  # how often the store thread looks at the optimize (the daemon: after writes, on its ping)


class _NoTick:
    """The store's own optimizer held back while the bench drives the shard's optimize step by step."""

    def tick(self, *args, **kwargs) -> None:
        pass


def _during_optimize(store: ConversationStore, three_phase, queries: list[str]) -> dict:
    """Searches (queued on one store thread, with the optimize's steps) from before the copy to after the close.

    Latency is arrival to answer, so it includes waiting behind the copy, the swap and the close of
    the replaced shard (each timed on the store thread: the pauses).  Before generation directories
    the swap closed the live shard itself (no separate close: ``tidy`` absent).
    """
    import queue
    import threading

    shard, jobs = store._client, queue.Queue()
    saved, store.optimizer = store.optimizer, _NoTick()
    pauses: dict[str, float] = {}
    state = {"swapped": None, "tidied": False, "child_cpu_s": 0.0}

    def timed(name: str, fn) -> object:
        t = time.perf_counter()
        result = fn()
        pauses[name] = pauses.get(name, 0.0) + time.perf_counter() - t
        trace.append((name, t - started, pauses[name]))
        return result

    def upkeep() -> None:
        if state["swapped"] is None:
            pid = shard.optimize_pid
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
                state["child_cpu_s"] = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
            t = time.perf_counter()
            if shard.finish_optimize() is not None:
                pauses["swap"] = time.perf_counter() - t
                state["swapped"] = time.perf_counter()
                trace.append(("swap", t - started, pauses["swap"]))
        elif not state["tidied"]:
            tidy = getattr(shard, "tidy", None)
            if tidy is not None:
                timed("close_replaced", tidy)
            state["tidied"] = True

    def worker() -> None:
        while (job := jobs.get()) is not None:
            job()

    thread = threading.Thread(target=worker, name="store")
    thread.start()
    latencies: list[float] = []
    service: list[float] = []  # the store thread's own time per search (no queueing)
    trace: list[tuple] = []  # (arrival s, latency s, service s) per search, (pause, start s, length s)
    n, started = 0, time.perf_counter()
    jobs.put(lambda: timed("start", shard.start_optimize))
    next_search = next_upkeep = started
    try:
        while not state["tidied"]:
            now = time.perf_counter()
            if now >= next_search:
                arrived, q = now, queries[n % len(queries)]

                def search(arrived=arrived, q=q) -> None:
                    service.append(three_phase(q))
                    latencies.append(time.perf_counter() - arrived)
                    trace.append((arrived - started, latencies[-1], service[-1]))

                jobs.put(search)
                if n % 10 == 9:
                    jobs.put(lambda n=n: store.add(_memory("agent2", f"written during the optimize {n}")))
                n += 1
                next_search += SEARCH_EVERY_S
            if now >= next_upkeep:
                jobs.put(upkeep)
                next_upkeep += UPKEEP_EVERY_S
            time.sleep(max(0.0, min(next_search, next_upkeep) - time.perf_counter()))
    finally:
        jobs.put(None)
        thread.join()
        store.optimizer = saved
    if os.environ.get("BENCH_EDGE_TRACE"):  # a file to write the per-search trace to (for diagnosis)
        Path(os.environ["BENCH_EDGE_TRACE"]).write_text(json.dumps(trace))
    return {
        "service_p50_ms": _pct(service, 0.5) * 1000,
        "service_p95_ms": _pct(service, 0.95) * 1000,
        "optimize_s": (state["swapped"] or time.perf_counter()) - started,
        "optimize_child_cpu_s": state["child_cpu_s"],
        "during_p50_ms": _pct(latencies, 0.5) * 1000,
        "during_p95_ms": _pct(latencies, 0.95) * 1000,
        "during_max_ms": max(latencies) * 1000,
        "during_n": len(latencies),
        "optimize_start_pause_s": pauses.get("start", 0.0),
        "optimize_swap_pause_s": pauses.get("swap", 0.0),
        "optimize_close_pause_s": pauses.get("close_replaced", 0.0),
    }


def _all_points(store: ConversationStore) -> tuple[list[str], np.ndarray, list[dict]]:
    """Every point with its vector, from whichever engine (for the exact search)."""
    ids, vectors, payloads = [], [], []
    if store.settings.engine == EDGE:
        cursor = None
        while True:
            page, cursor = store._client.scroll(limit=2000, offset=cursor, with_vector=True)
            for h in page:
                ids.append(h.id)
                vectors.append(h.vector)
                payloads.append(h.payload)
            if cursor is None:
                break
    else:
        cursor = None
        while True:
            page, cursor = store._client.scroll(
                store.settings.collection, limit=2000, offset=cursor, with_payload=True, with_vectors=True
            )
            for p in page:
                ids.append(str(p.id))
                vectors.append(p.vector.get("") if isinstance(p.vector, dict) else p.vector)
                payloads.append(p.payload)
            if cursor is None:
                break
    return ids, np.asarray(vectors, dtype=np.float32), payloads


def _allowed(phase: Phase, payload: dict) -> bool:
    if payload.get("visibility") != phase.visibility:
        return False
    if phase.owner and payload.get("agent_id") != phase.owner:
        return False
    return phase.visibility != "project" or payload.get("project_id") in phase.projects


def run(size: int, engine: str, embedder: LocalEmbedder, queries: list[str]) -> dict:
    out: dict = {"size": size, "engine": engine}
    with tempfile.TemporaryDirectory(dir=Path(".cache").resolve() if Path(".cache").is_dir() else None) as tmp:
        settings = StoreSettings("embedded", Path(tmp), engine=engine)
        store = ConversationStore(settings, embedder, embedder.dimension())
        store.connect()
        base_anon = rss_anon_mb()
        store._memory  # noqa: B018 -- mem0 built (on Edge at the first write): its imports apart from the points
        out["anon_mem0_mb"] = rss_anon_mb() - base_anon
        base_anon = rss_anon_mb()
        t = time.perf_counter()
        _fill(store, embedder, size, old_session_every=10)  # every 10th: a session from last year (expired)
        out["fill_s"] = time.perf_counter() - t
        out["anon_after_fill_mb"] = rss_anon_mb() - base_anon
        mem0 = store._memory
        vectors = {q: mem0.embedding_model.embed(q, "search") for q in queries}

        def three_phase(q: str) -> float:
            mem0.embedding_model._last_query = (q, vectors[q])  # embedding excluded: the phases share it
            t = time.perf_counter()
            store.search(q, PHASES, limit=10)
            return time.perf_counter() - t

        def searches(prefix: str) -> None:
            lat, raw = [three_phase(q) for q in queries], []
            out[f"{prefix}search_p50_ms"] = _pct(lat, 0.5) * 1000
            out[f"{prefix}search_p95_ms"] = _pct(lat, 0.95) * 1000
            if engine != EDGE:
                return
            for q in queries:
                t = time.perf_counter()
                for phase in PHASES:
                    store._client.search(vectors[q], 10, store._phase_filter_dict(phase, False, time.time()))
                raw.append(time.perf_counter() - t)
            out[f"{prefix}raw_p50_ms"] = _pct(raw, 0.5) * 1000
            out[f"{prefix}raw_p95_ms"] = _pct(raw, 0.95) * 1000

        searches("brute_" if engine == EDGE else "")
        if engine == EDGE:
            # optimize off the request path, as the daemon runs it: one store thread runs every request
            # and the upkeep; searches arrive every SEARCH_EVERY_S whether or not the last one is answered
            # (a write after every 10th), so a search that arrives during a pause waits for it
            out.update(_during_optimize(store, three_phase, queries))
            # the daemon's own state after its optimize (the unoptimized shard closed), no restart
            out["anon_after_optimize_mb"] = rss_anon_mb() - base_anon
            out["indexed"] = store._client.info()
            searches("")
        if engine == EDGE:
            ids, matrix, payloads = _all_points(store)
            hits = total = 0
            for q in queries[:5]:
                scores = matrix @ np.asarray(vectors[q], dtype=np.float32)
                for phase in PHASES:
                    mask = np.array([_allowed(phase, p) for p in payloads])
                    exact = [ids[i] for i in np.argsort(-np.where(mask, scores, -np.inf))[:10] if mask[i]]
                    got = [h.id for h in store._client.search(vectors[q], 10, store._phase_filter_dict(phase, True, 0))]
                    hits += len(set(got) & set(exact))
                    total += len(exact)
            out["recall_at_10"] = hits / total if total else float("nan")
        adds, embeds = [], []
        for i, q in enumerate(queries[:10]):
            text = f"{q} 新写入 {i}"
            t = time.perf_counter()
            embedder.embed_passages([text])
            embeds.append(time.perf_counter() - t)
            t = time.perf_counter()
            store.add(_memory("agent0", text))
            adds.append(time.perf_counter() - t)
        out["add_minus_embedding_p50_ms"] = (statistics.median(adds) - statistics.median(embeds)) * 1000
        out["embedding_p50_ms"] = statistics.median(embeds) * 1000
        # replay: what the broker's _replay_plain does per batch (store.add_batch on the store thread), the
        # batch's embeddings computed beforehand (reported apart: the model's own rate is the other bound)
        batches = [
            [_memory(f"agent{i % 5}", f"replayed {b}-{i} {queries[i % len(queries)]}") for i in range(100)]
            for b in range(REPLAY_BATCHES)
        ]
        texts = [m.text for batch in batches for m in batch]
        rng = np.random.default_rng(5)  # stand-in passages: the model's own rate is reported apart
        stand_in = rng.normal(size=(len(texts), embedder.dimension()))
        cache = {t: v / np.linalg.norm(v) for t, v in zip(texts, stand_in, strict=True)}
        real = store.embedder
        store.embedder = mem0.embedding_model._embedder = _Cached(real, cache)
        t = time.perf_counter()
        for batch in batches:
            results = store.add_batch(batch)
            assert all(r.event == "ADD" for r in results)
        out["replay_per_s"] = len(texts) / (time.perf_counter() - t)
        store.embedder = mem0.embedding_model._embedder = real
        store.close()
        gc.collect()
        before = rss_anon_mb()
        t = time.perf_counter()
        store = ConversationStore(settings, embedder, embedder.dimension())
        store.connect()
        store.count()
        out["open_s"] = time.perf_counter() - t
        out["anon_after_reopen_mb"] = rss_anon_mb() - before
        from layers.conversation.lifecycle.cleanup import Rules, run_cleanup

        t = time.perf_counter()
        report = run_cleanup(store, Rules(DEFAULT_RETENTION_DAYS), execute=True)
        out["cleanup_s"] = time.perf_counter() - t
        out["cleanup_deleted"] = report.deleted
        store.close()
    return out


def _memory_of(pid: int) -> dict:
    """VmRSS and anonymous memory of a process, in MB (/proc/PID/status and smaps_rollup)."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
    smaps = dict(line.split(":", 1) for line in rollup if ":" in line)
    return {
        "vm_rss_mb": int(status["VmRSS"].split()[0]) / 1024,
        "anonymous_mb": int(smaps["Anonymous"].split()[0]) / 1024,
        "threads": int(status["Threads"].split()[0]),
    }


def _mappings_of(pid: int) -> dict[str, tuple[float, float]]:
    """RSS and anonymous MB per kind of mapping: [heap], [anon] (glibc arenas, Python's object
    arenas, thread stacks, big buffers), [stack], and each file (its anonymous part is relocations)."""
    rss: dict[str, float] = {}
    anon: dict[str, float] = {}
    name = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
            name = head[5].strip() if len(head) == 6 else "[anon]"
        elif head and head[0] == "Rss:":
            rss[name] = rss.get(name, 0.0) + int(head[1]) / 1024
        elif head and head[0] == "Anonymous:":
            anon[name] = anon.get(name, 0.0) + int(head[1]) / 1024
    return {k: (rss[k], anon.get(k, 0.0)) for k in sorted(rss, key=rss.get, reverse=True)}


def _idle(status: dict) -> str:
    """What the daemon is still doing ("" once idle): L4 opening, chunks to embed, a model loaded."""
    if not (status.get("conversation") or {}).get("reachable"):
        return "L4 not reachable yet"
    pending = sum((a.get("index") or {}).get("pending_embeddings") or 0 for a in status.get("agents") or [])
    states = {(a.get("index") or {}).get("state") for a in status.get("agents") or []}
    if pending or states != {"ready"}:
        return f"indexes {sorted(map(str, states))}, {pending} chunks to embed"
    v = status.get("vectors") or {}
    if v.get("loaded") or v.get("companion_loaded"):
        return f"model loaded {v.get('loaded')}, companion loaded {v.get('companion_loaded')}"
    return ""


def idle_daemon_memory(agents: int = 10, settle_s: float = 10.0, breakdown: bool = False) -> dict:
    """The real daemon, L4 embedded (the default), ``agents`` agents, nothing stored: memory once idle.

    Idle means: L4 reachable, every agent's chunks embedded, and both models (the GGUF and the
    companion) unloaded again -- vectors.idle_unload_s is set to 5 s so that comes soon after the
    demo workspaces are embedded; then ``settle_s`` more before the figures are read.
    """
    from tests.helpers import DaemonProcess, init_root, run_cli, wait_for

    with tempfile.TemporaryDirectory(dir=Path(".cache").resolve() if Path(".cache").is_dir() else None) as tmp:
        config = init_root(Path(tmp), vectors={"idle_unload_s": 5, "unload": "idle"})  # the idle figure: both let go
        for a in range(agents - 1):
            run_cli("agent", "add", f"agent{a}", config=config)
        daemon = DaemonProcess(config).start()
        try:
            started = time.monotonic()
            figures = {"at_start": _memory_of(daemon.proc.pid)}
            wait_for(lambda: not _idle(daemon.status()), timeout=900, what="the daemon idle")
            figures["idle_after_s"] = time.monotonic() - started
            time.sleep(settle_s)
            status = daemon.status()
            figures.update(_memory_of(daemon.proc.pid), busy=_idle(status) or None)
            figures["model_loaded"] = status["vectors"].get("loaded")
            figures["companion_loaded"] = status["vectors"].get("companion_loaded")
            if breakdown:
                figures["mappings"] = _mappings_of(daemon.proc.pid)
        finally:
            daemon.stop()
    return figures


def print_idle(idle: dict) -> None:
    print(
        f"idle daemon, L4 embedded, 10 agents, nothing stored: VmRSS {idle['vm_rss_mb']:.1f} MB, anonymous "
        f"{idle['anonymous_mb']:.1f} MB, {idle['threads']} threads (target VmRSS <= 150 MB; model loaded: "
        f"{idle['model_loaded']}, companion loaded: {idle['companion_loaded']}; idle {idle['idle_after_s']:.0f} s "
        f"after the start, when VmRSS was {idle['at_start']['vm_rss_mb']:.1f} MB)"
    )
    for name, (rss, anon) in list((idle.get("mappings") or {}).items())[:12]:
        print(f"  {rss:7.1f} MB RSS {anon:7.1f} MB anonymous  {name}")


def main(sizes: list[int], memory_only: bool = False, idle_daemon: bool = True) -> None:
    from layers.common import malloc

    malloc.tune()  # the daemon's allocator settings (memstrata run), so the anonymous figures are its own
    if idle_daemon:
        print_idle(idle_daemon_memory(breakdown=memory_only))
    if memory_only:
        return
    embedder = LocalEmbedder(DEFAULT_MODEL_PATH, min_free_mb=0)
    embedder.embed_query("warm up")
    queries = (QUERIES * 3)[:20]
    for size in sizes:
        edge = run(size, EDGE, embedder, queries)
        local = run(size, QDRANT_LOCAL, embedder, queries[:3]) if size <= 10_000 else None
        print(
            f"{size:>6} Edge indexed: three-phase search p50 {edge['search_p50_ms']:.1f} ms p95 "
            f"{edge['search_p95_ms']:.1f} ms (target <= 20 ms at 50k); raw Edge 3 queries p50 {edge['raw_p50_ms']:.1f}"
            f" p95 {edge['raw_p95_ms']:.1f} ms: {edge['search_p95_ms'] / edge['raw_p95_ms']:.2f}x at p95 (<= 2x);"
            f" recall@10 {edge['recall_at_10']:.3f} (>= 0.99); {edge['indexed']}"
        )
        print(
            f"{size:>6} Edge before optimize (brute force): search p50 {edge['brute_search_p50_ms']:.1f} p95 "
            f"{edge['brute_search_p95_ms']:.1f} ms, raw p95 {edge['brute_raw_p95_ms']:.1f} ms; during the optimize "
            f"({edge['optimize_s']:.1f} s, child CPU {edge['optimize_child_cpu_s']:.1f} s; {edge['during_n']} searches"
            f" arriving every {SEARCH_EVERY_S * 1000:.0f} ms at one store thread, arrival to answer): p50 "
            f"{edge['during_p50_ms']:.1f} p95 {edge['during_p95_ms']:.1f} (target <= 50 ms) max "
            f"{edge['during_max_ms']:.0f} ms (the search alone: p50 {edge['service_p50_ms']:.1f} p95 "
            f"{edge['service_p95_ms']:.1f} ms); store-thread pauses: start (copy) "
            f"{edge['optimize_start_pause_s']:.2f} s,"
            f" swap {edge['optimize_swap_pause_s']:.2f} s, close of the replaced shard "
            f"{edge['optimize_close_pause_s']:.2f} s"
        )
        print(
            f"{size:>6} Edge: add-embedding p50 {edge['add_minus_embedding_p50_ms']:.1f} ms (<= 5; embedding "
            f"{edge['embedding_p50_ms']:.0f} ms); replay {edge['replay_per_s']:.0f} writes/s embedding excluded "
            f"(>= 200; the model embeds ~{1000 / edge['embedding_p50_ms']:.0f}/s one at a time); "
            f"open {edge['open_s']:.2f} s (<= 3);"
            f" cleanup {edge['cleanup_s']:.1f} s ({edge['cleanup_deleted']} deleted, <= 30); fill "
            f"{edge['fill_s']:.1f} s; anon +{edge['anon_mem0_mb']:.0f} MB building mem0, then "
            f"+{edge['anon_after_fill_mb']:.0f} MB after the fill, +{edge['anon_after_optimize_mb']:.0f} MB after the "
            "optimize, "
            f"+{edge['anon_after_reopen_mb']:.0f} MB to reopen it (from the closed store)"
        )
        if local:
            print(
                f"{size:>6} local mode: search p50 {local['search_p50_ms']:.0f} ms p95 {local['search_p95_ms']:.0f}"
                f" ms ({local['search_p50_ms'] / edge['search_p50_ms']:.0f}x Edge at p50); add-embedding p50 "
                f"{local['add_minus_embedding_p50_ms']:.1f} ms; replay {local['replay_per_s']:.0f} writes/s; "
                f"open {local['open_s']:.2f} s "
                f"({local['open_s'] / edge['open_s']:.1f}x); cleanup {local['cleanup_s']:.1f} s; anon "
                f"+{local['anon_after_reopen_mb']:.0f} MB after reopen"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000", help="comma-separated store sizes (default 1000,10000)")
    parser.add_argument(
        "--memory-only", action="store_true", help="only the idle daemon's memory, with its breakdown by mapping"
    )
    parser.add_argument("--no-idle-daemon", action="store_true", help="skip the idle daemon's memory (minutes)")
    args = parser.parse_args()
    main([int(s) for s in args.sizes.split(",")], args.memory_only, idle_daemon=not args.no_idle_daemon)
