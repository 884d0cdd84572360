"""L3's vector engine candidates side by side, on the same passage vectors: memstrata's int8 codes,
Qdrant Edge, sqlite-vec and usearch, against exact scoring.

The issue asked for this before choosing: does an embedded vector database do L3's
job better than the codes (layers/local/storage/vector_codes.py)?  L3's job: the 10 chunks
nearest a query vector, a chunk scoring as its best passage (the whole chunk and
its items, layers/local/text/units.py), under the hybrid search's filters (a day range,
a path glob) inside the search, not after it.

For 20,000 chunks (every passage: ~6.5 per chunk) and 100,000 chunks (one passage
per chunk: with its items 100k does not fit the reference host's memory, the run
says by how much) one index is built the way bench/bench_scale.py builds it
(``write_workspace``, ``rebuild``, ``stand_in_vectors``: random unit vectors in the
real models' widths, a labelled stand-in).  Each engine then gets the same passage
vectors, keyed ``chunk id × 32 + passage number`` (so a hit names its chunk without
a lookup), and is built in one child process and measured in another: its load, the
RSS it adds to that process (psutil, after the queries; a child per engine so one
engine's memory does not hide another's), and 40 queries (20 near a stored passage
of the allowed set — the passage plus noise, renormalised — and 20 random) with no
filter, a day range keeping ~10% of the chunks, and a path glob keeping ~10% (days
10-12 of every month, spread over the whole range).  An engine that returns passages
is asked for more (k doubled) until 10 distinct chunks come back.  recall@10 is
against ``exact`` (``LocalIndex.exact_vectors``) on the same queries.  Random unit vectors are a graph
index's worst case (no clusters: every point about as far as every other), so the graph engines'
recall here is a floor, not what the real model's vectors give.  RSS counts the pages of files an
engine maps (Qdrant's and usearch's vectors); "anon" is the part that is not such a page.

Engines (each row of the table):

- ``exact``: ``LocalIndex.exact_vectors``, every stored float vector read and scored (the reference);
- ``codes``: ``LocalIndex.search_vectors``, the shipped engine (its load: the first search), as the
  daemon runs it (one BLAS thread for the scoring pass, ``malloc.trim()`` after the cache's load);
- ``qdrant-edge``: a Qdrant Edge shard, one point per passage, payload chunk/layer/day (integer)/path,
  payload indexes on day and path, HNSW with L4's settings (layers/conversation/adapters/edge.py), int8 scalar
  quantization configured; queried on the float vectors (quantization ignored), filters in the query
  (the glob is resolved to its paths in the index's own SQLite file, then ``MatchAny``);
  ``qdrant-edge-ef1024``: the same with a search ef of 1024 (L4's is 256);
- ``qdrant-edge-int8``: the same shard, queried through its int8 codes with rescoring (oversampling 2);
- ``qdrant-edge-exact``: the same shard, ``exact=True`` (no graph: every allowed point scored);
- ``sqlite-vec``: a ``vec0`` table in the index's own SQLite file, float vectors, day as a metadata
  column and the glob as ``chunk IN (SELECT id FROM chunks WHERE path GLOB ?)``, in the KNN query;
- ``usearch``: an HNSW index per model part (f16, connectivity 16, expansion 100/256: Qdrant's m,
  ef_construct and ef), memory-mapped; its Python API has no filter, so filters are applied after the
  search (k grown until 10 allowed chunks come back).

By default only e5's columns are searched (the first of hybrid's two vector lists); ``--parts
e5,use`` searches the companion's 512 columns too, as hybrid does (each query then asks both lists
and is timed as their sum; twice the graph builds).  sqlite-vec and usearch are optional (``pip
install -e '.[bench]'``): an engine whose package is missing is reported as such.

    .venv/bin/python bench/run.py engines            # 20k and 100k (--quick: 20k)
    .venv/bin/python -m bench.bench_vector_engines --parts e5,use
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import apsw
import numpy as np
import psutil

from bench.bench_index import _pct
from bench.bench_scale import CHUNKS_PER_FILE, stand_in_vectors, workspace_documents, write_workspace
from layers.common import malloc
from layers.conversation.adapters.edge import HNSW_EF, HNSW_FULL_SCAN_KB, SEARCH_THREADS
from layers.local.models import companion
from layers.local.storage.index import Filters, Identity, LocalIndex, rebuild
from layers.local.text.units import ITEMS_UP_TO_CHUNKS, has_companion, index_model_id

REPO = Path(__file__).resolve().parent.parent
QUERIES = 40  # per filter: half near a stored passage, half random
TOP = 10  # chunks per answer
NEAR_NOISE = 0.5  # norm of the noise added to a stored passage (cosine to it ~0.9)
KEY_SHIFT = 5  # passage key = chunk id << 5 | passage number (a chunk has at most 17 passages)
E5_DIM = 384  # multilingual-e5-small, the default local model (layers/local/models/embed_llama.py)
PARTS = {"e5": (0, E5_DIM), "use": (E5_DIM, companion.DIM)}  # model part → (first column, width)
# passages per chunk as the daemon stores them: items only up to ITEMS_UP_TO_CHUNKS (layers/local/text/units.py)
SIZES = (20_000, 100_000)
QDRANT_OVERSAMPLING = 2.0
USEARCH_CONNECTIVITY, USEARCH_EXPANSION_ADD = (
    16,
    100,
)  # Qdrant's m and ef_construct (layers/conversation/adapters/edge.py)
STAND_IN_MODEL = "gguf:stand-in"  # the identity's model name: a local model, so rows hold the companion too


@dataclass(frozen=True)
class Variant:
    """One of the three filters every engine is asked with."""

    name: str
    since: str | None = None
    until: str | None = None
    glob: str | None = None

    def filters(self) -> Filters:
        return Filters(path_glob=self.glob, since=self.since, until=self.until)


def variants(chunks: int) -> list[Variant]:
    """No filter; the middle ~10% of the days; days 10-12 of every month (~10%, over the whole range)."""
    first, days = date(2014, 1, 1), chunks // CHUNKS_PER_FILE  # write_workspace: one file a day from 2014-01-01
    since = first + timedelta(days=int(days * 0.45))
    until = since + timedelta(days=max(1, days // 10) - 1)
    return [
        Variant("all"),
        Variant("days", since=since.isoformat(), until=until.isoformat()),
        Variant("glob", glob="memory/????-??-1[0-2].md"),
    ]


# ---------------------------------------------------------------- the data every engine gets


@dataclass
class Run:
    """What a child process is told: where the data is, and what to search."""

    work: Path  # this size's directory: index, exported vectors, engines' files
    parts: tuple[str, ...]
    chunks: int

    @property
    def index_path(self) -> Path:
        return self.work / "index.sqlite"

    @property
    def identity(self) -> Identity:
        return Identity(embed_model=index_model_id(STAND_IN_MODEL))

    def vectors(self, part: str) -> np.ndarray:
        return np.load(self.work / f"vectors-{part}.npy", mmap_mode="r")

    def keys(self) -> np.ndarray:
        return np.load(self.work / "keys.npy")

    def queries(self) -> dict[str, dict[str, np.ndarray]]:
        """variant name → part → (QUERIES, width) query vectors."""
        with np.load(self.work / "queries.npz") as z:
            return {v.name: {p: z[f"{v.name}-{p}"] for p in self.parts} for v in variants(self.chunks)}


def build_index(run: Run) -> dict:
    """The memstrata index every engine starts from (bench_scale's helpers), its stand-in vectors stored."""
    ws = run.work / "workspace"
    write_workspace(ws, run.chunks)
    docs = workspace_documents(ws)
    started = time.perf_counter()
    rebuild(run.index_path, run.identity, docs)
    widths = (E5_DIM, companion.DIM) if has_companion(run.identity.embed_model) else (E5_DIM,)
    with LocalIndex(run.index_path, run.identity) as index:
        stand_in_vectors(index, widths)
        index.checkpoint()
    build_s = time.perf_counter() - started
    shutil.rmtree(ws)
    return {"build_s": build_s, "file_mb": run.index_path.stat().st_size / 2**20}


def export(run: Run, seed: int = 5) -> dict:
    """The stored passage vectors as the engines take them (one .npy per part, keys beside), and the
    queries: per filter, 20 stored passages of the chunks it allows plus noise, and 20 random vectors."""
    db = apsw.Connection(str(run.index_path), flags=apsw.SQLITE_OPEN_READONLY)
    rows = db.execute(
        "SELECT c.id, v.vec, v.dim FROM chunks c JOIN vectors v ON v.hash = c.hash AND v.model = ? ORDER BY c.id",
        (run.identity.embed_model,),
    ).fetchall()
    width = rows[0][2]
    counts = np.array([len(r[1]) // (4 * width) for r in rows])
    chunk_ids = np.array([r[0] for r in rows], dtype=np.int64)
    keys = np.concatenate([(cid << KEY_SHIFT) + np.arange(n) for cid, n in zip(chunk_ids, counts, strict=True)])
    matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(-1, width)
    np.save(run.work / "keys.npy", keys)
    for part in run.parts:
        offset, dim = PARTS[part]
        np.save(run.work / f"vectors-{part}.npy", np.ascontiguousarray(matrix[:, offset : offset + dim]))
    rng = np.random.default_rng(seed)
    owner = np.repeat(chunk_ids, counts)  # passage → its chunk
    queries = {}
    for v in variants(run.chunks):
        where, args = v.filters().sql()  # the index's own filter clauses: the same chunks as every engine's
        allowed = np.array([r[0] for r in db.execute(f"SELECT c.id FROM chunks c WHERE 1{where}", args)])
        sources = rng.choice(np.flatnonzero(np.isin(owner, allowed)), QUERIES // 2, replace=False)
        for part in run.parts:
            offset, dim = PARTS[part]
            near = matrix[sources, offset : offset + dim] + rng.standard_normal((len(sources), dim)) * (
                NEAR_NOISE / np.sqrt(dim)
            )
            rand = rng.standard_normal((QUERIES - len(sources), dim))
            both = np.vstack([near, rand]).astype(np.float32)
            queries[f"{v.name}-{part}"] = both / np.linalg.norm(both, axis=1, keepdims=True)
        queries[f"{v.name}-share"] = np.array(len(allowed) / len(rows))
    np.savez(run.work / "queries.npz", **queries)
    db.close()
    return {
        "passages": len(keys),
        "per_chunk": len(keys) / len(rows),
        "shares": {v.name: float(queries[f"{v.name}-share"]) for v in variants(run.chunks)},
    }


def glob_paths(db: apsw.Connection, glob: str) -> list[str]:
    """The indexed files a path glob names (what an engine without GLOB filters on), from the index itself."""
    return [r[0] for r in db.execute("SELECT path FROM files WHERE path GLOB ?", (glob,))]


def distinct_chunks(keys: np.ndarray, limit: int = TOP) -> list[int]:
    """The first ``limit`` distinct chunks of passage keys given best first."""
    out: list[int] = []
    for chunk in (np.asarray(keys, dtype=np.int64) >> KEY_SHIFT).tolist():
        if chunk not in out:
            out.append(chunk)
            if len(out) == limit:
                break
    return out


def grow_k(search: Callable[[int], tuple[np.ndarray, bool]], start: int = 2 * TOP) -> list[int]:
    """``search(k)`` → (passage keys best first, whether more exist) asked with k doubled until
    TOP distinct chunks come back (or nothing more does)."""
    k = start
    while True:
        keys, more = search(k)
        chunks = distinct_chunks(keys)
        if len(chunks) >= TOP or not more:
            return chunks
        k *= 2


def disk_bytes(path: Path) -> int:
    """Blocks a file or directory tree takes (a sparse WAL segment counts as what it holds)."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_blocks * 512 for p in files)


# ---------------------------------------------------------------- engines (each in a child process)


class Engine:
    """Build (once, in its own child), load and search; ``builder`` names the build an engine shares."""

    filters_in_query = True
    builder: str | None = None  # engines with the same builder share one build
    modules: tuple[str, ...] = ()  # imported before the RSS baseline: a library's own pages are not the index
    env: dict[str, str] = {}  # noqa: RUF012 - the child process's environment, on top of this one's

    def __init__(self, run: Run) -> None:
        self.run = run

    def build(self) -> int:
        """Build the engine's files from the exported vectors; returns their size in bytes."""
        raise NotImplementedError

    def load(self) -> None:
        raise NotImplementedError

    def search(self, part: str, query: np.ndarray, v: Variant) -> list[int]:
        raise NotImplementedError

    def size(self) -> int | None:
        """Bytes on disk (the codes: in memory) of what it searches; None: what its build returned."""
        return None


class Exact(Engine):
    def load(self) -> None:
        self.index = LocalIndex(self.run.index_path, self.run.identity, readonly=True)

    def search(self, part: str, query: np.ndarray, v: Variant) -> list[int]:
        hits = self.index.exact_vectors(query, TOP, v.filters(), offset=PARTS[part][0])
        return [h.chunk_id for h in hits]

    def size(self) -> int:
        return _table_bytes(self.run.index_path, "vectors")


class Codes(Exact):
    """The shipped engine as the daemon runs it."""

    def load(self) -> None:
        super().load()
        for part in self.run.parts:  # a process's first search of an index loads its codes
            offset, dim = PARTS[part]
            self.index.search_vectors(np.ones(dim, dtype=np.float32) / np.sqrt(dim), TOP, Filters(), offset=offset)

    def search(self, part: str, query: np.ndarray, v: Variant) -> list[int]:
        return [h.chunk_id for h in self.index.search_vectors(query, TOP, v.filters(), offset=PARTS[part][0])]

    def size(self) -> int:
        share = sum(PARTS[p][1] for p in self.run.parts) / sum(d for _, d in PARTS.values())
        return int(_table_bytes(self.run.index_path, "codes") * share)  # the cache holds the parts searched


def _table_bytes(path: Path, table: str) -> int:
    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(db.execute("SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name = ?", (table,)).get)
    finally:
        db.close()


class QdrantEdge(Engine):
    """One shard built once; three ways of asking it (``mode``)."""

    builder = "qdrant-edge"
    modules = ("qdrant_edge",)
    mode = "hnsw"

    @property
    def path(self) -> Path:
        return self.run.work / "qdrant-edge"

    def _config(self):  # a qdrant_edge.EdgeConfig
        import qdrant_edge as qe

        return qe.EdgeConfig(
            vectors={p: qe.EdgeVectorParams(size=PARTS[p][1], distance=qe.Distance.Cosine) for p in self.run.parts},
            hnsw_config=qe.HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=HNSW_FULL_SCAN_KB),
            quantization_config=qe.ScalarQuantizationConfig(qe.ScalarType.Int8, quantile=0.99, memory=qe.Memory.Cached),
            max_search_threads=SEARCH_THREADS,
        )

    def build(self) -> int:
        import qdrant_edge as qe

        keys = self.run.keys()
        vectors = {p: self.run.vectors(p) for p in self.run.parts}
        db = apsw.Connection(str(self.run.index_path), flags=apsw.SQLITE_OPEN_READONLY)
        meta = {r[0]: r[1:] for r in db.execute("SELECT id, layer, day, path FROM chunks")}
        db.close()
        shard = qe.EdgeShard.create(str(self.path), self._config())
        shard.update(qe.UpdateOperation.create_field_index("day", qe.PayloadSchemaType.Integer))
        shard.update(qe.UpdateOperation.create_field_index("path", qe.PayloadSchemaType.Keyword))
        shard.update(qe.UpdateOperation.create_field_index("layer", qe.PayloadSchemaType.Keyword))
        for start in range(0, len(keys), 2000):
            points = []
            for i in range(start, min(start + 2000, len(keys))):
                chunk = int(keys[i]) >> KEY_SHIFT
                layer, day, path = meta[chunk]
                payload = {"chunk": chunk, "layer": layer, "day": date.fromisoformat(day).toordinal(), "path": path}
                points.append(qe.Point(int(keys[i]), {p: vectors[p][i].tolist() for p in vectors}, payload))
            shard.update(qe.UpdateOperation.upsert_points(points))
        shard.optimize()
        shard.flush()
        shard.close()
        return disk_bytes(self.path)

    def load(self) -> None:
        import qdrant_edge as qe

        self.qe = qe
        self.shard = qe.EdgeShard.load(str(self.path))
        self.db = apsw.Connection(str(self.run.index_path), flags=apsw.SQLITE_OPEN_READONLY)
        self.params = {
            "hnsw": qe.SearchParams(hnsw_ef=HNSW_EF, quantization=qe.QuantizationSearchParams(ignore=True)),
            "ef1024": qe.SearchParams(hnsw_ef=1024, quantization=qe.QuantizationSearchParams(ignore=True)),
            "int8": qe.SearchParams(
                hnsw_ef=HNSW_EF,
                quantization=qe.QuantizationSearchParams(rescore=True, oversampling=QDRANT_OVERSAMPLING),
            ),
            "exact": qe.SearchParams(exact=True, quantization=qe.QuantizationSearchParams(ignore=True)),
        }[self.mode]

    def search(self, part: str, query: np.ndarray, v: Variant) -> list[int]:
        qe = self.qe
        must = []
        if v.since or v.until:
            bounds = {"gte": v.since, "lte": v.until}
            ordinals = {k: float(date.fromisoformat(d).toordinal()) for k, d in bounds.items() if d}
            must.append(qe.FieldCondition(key="day", range=qe.RangeFloat(**ordinals)))
        if v.glob:
            must.append(qe.FieldCondition(key="path", match=qe.MatchAny(glob_paths(self.db, v.glob))))
        flt = qe.Filter(must=must) if must else None
        vector = query.tolist()

        def ask(k: int) -> tuple[np.ndarray, bool]:
            request = qe.QueryRequest(
                limit=k, query=qe.Query.Nearest(vector, using=part), filter=flt, with_payload=False, params=self.params
            )
            points = self.shard.query(request)
            return np.array([int(p.id) for p in points], dtype=np.int64), len(points) == k

        return grow_k(ask)


class QdrantEdgeEf1024(QdrantEdge):
    mode = "ef1024"


class QdrantEdgeInt8(QdrantEdge):
    mode = "int8"


class QdrantEdgeExact(QdrantEdge):
    mode = "exact"


class SqliteVec(Engine):
    builder = "sqlite-vec"
    modules = ("sqlite_vec",)
    TABLE = "bench_vec"

    def _connect(self, readonly: bool) -> apsw.Connection:
        import sqlite_vec

        flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE
        db = apsw.Connection(str(self.run.index_path), flags=flags)
        db.enable_load_extension(True)
        db.load_extension(sqlite_vec.loadable_path())
        db.enable_load_extension(False)
        return db

    def build(self) -> int:
        keys = self.run.keys()
        vectors = {p: self.run.vectors(p) for p in self.run.parts}
        columns = ", ".join(f"{p} float[{PARTS[p][1]}] distance_metric=cosine" for p in self.run.parts)
        db = self._connect(readonly=False)
        db.execute(f"CREATE VIRTUAL TABLE {self.TABLE} USING vec0({columns}, day integer, chunk integer)")
        days = dict(db.execute("SELECT id, day FROM chunks"))
        names = ", ".join(self.run.parts)
        marks = ", ".join("?" * len(self.run.parts))
        with db:
            db.executemany(
                f"INSERT INTO {self.TABLE}(rowid, {names}, day, chunk) VALUES(?, {marks}, ?, ?)",
                (
                    (
                        int(key),
                        *(vectors[p][i].tobytes() for p in self.run.parts),
                        date.fromisoformat(days[int(key) >> KEY_SHIFT]).toordinal(),
                        int(key) >> KEY_SHIFT,
                    )
                    for i, key in enumerate(keys)
                ),
            )
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = db.execute("SELECT sum(pgsize) FROM dbstat WHERE name LIKE ?", (f"{self.TABLE}%",)).get
        db.close()
        return int(size)  # the vec0 table's own pages (its shadow tables), in the index file

    def load(self) -> None:
        self.db = self._connect(readonly=True)

    def search(self, part: str, query: np.ndarray, v: Variant) -> list[int]:
        where, args = "", []
        if v.since:
            where, args = where + " AND day >= ?", [*args, date.fromisoformat(v.since).toordinal()]
        if v.until:
            where, args = where + " AND day <= ?", [*args, date.fromisoformat(v.until).toordinal()]
        if v.glob:
            where, args = where + " AND chunk IN (SELECT id FROM chunks WHERE path GLOB ?)", [*args, v.glob]
        sql = f"SELECT rowid FROM {self.TABLE} WHERE {part} MATCH ? AND k = ?{where} ORDER BY distance"
        blob = np.asarray(query, dtype=np.float32).tobytes()

        def ask(k: int) -> tuple[np.ndarray, bool]:
            keys = np.array([r[0] for r in self.db.execute(sql, (blob, k, *args))], dtype=np.int64)
            return keys, len(keys) == k

        return grow_k(ask)


class USearch(Engine):
    builder = "usearch"
    modules = ("usearch.index",)
    filters_in_query = False

    def _file(self, part: str) -> Path:
        return self.run.work / f"usearch-{part}.usearch"

    def build(self) -> int:
        from usearch.index import Index

        keys = self.run.keys()
        for part in self.run.parts:
            index = Index(
                ndim=PARTS[part][1],
                metric="cos",
                dtype="f16",
                connectivity=USEARCH_CONNECTIVITY,
                expansion_add=USEARCH_EXPANSION_ADD,
                expansion_search=HNSW_EF,
            )
            index.add(keys, np.asarray(self.run.vectors(part)), threads=os.cpu_count() or 1)
            index.save(str(self._file(part)))
            del index
        return sum(disk_bytes(self._file(p)) for p in self.run.parts)

    def load(self) -> None:
        from usearch.index import Index

        self.indexes = {}
        for part in self.run.parts:
            index = Index.restore(str(self._file(part)), view=True)
            assert index is not None, self._file(part)
            index.expansion_search = HNSW_EF
            self.indexes[part] = index
        self.db = apsw.Connection(str(self.run.index_path), flags=apsw.SQLITE_OPEN_READONLY)
        rows = self.db.execute("SELECT id, day FROM chunks").fetchall()
        self.day_of = np.full(max(r[0] for r in rows) + 1, -1, dtype=np.int32)  # chunk id → day ordinal
        for chunk, day in rows:
            self.day_of[chunk] = date.fromisoformat(day).toordinal() if day else -1

    def search(self, part: str, query: np.ndarray, v: Variant) -> list[int]:
        index = self.indexes[part]
        allowed_ids = None
        if v.glob:
            rows = self.db.execute("SELECT id FROM chunks WHERE path GLOB ?", (v.glob,))
            allowed_ids = np.fromiter((r[0] for r in rows), dtype=np.int64)
        low = date.fromisoformat(v.since).toordinal() if v.since else None
        high = date.fromisoformat(v.until).toordinal() if v.until else None

        def ask(k: int) -> tuple[np.ndarray, bool]:
            matches = index.search(query, min(k, len(index)), threads=1)
            keys = np.asarray(matches.keys, dtype=np.int64)
            chunks = keys >> KEY_SHIFT
            keep = np.ones(len(keys), dtype=bool)
            if low is not None:
                keep &= self.day_of[chunks] >= low
            if high is not None:
                keep &= self.day_of[chunks] <= high
            if allowed_ids is not None:
                keep &= np.isin(chunks, allowed_ids)
            return keys[keep], k < len(index)

        return grow_k(ask)


ENGINES: dict[str, type[Engine]] = {
    "exact": Exact,
    "codes": Codes,
    "qdrant-edge": QdrantEdge,
    "qdrant-edge-ef1024": QdrantEdgeEf1024,
    "qdrant-edge-int8": QdrantEdgeInt8,
    "qdrant-edge-exact": QdrantEdgeExact,
    "usearch": USearch,
    "sqlite-vec": SqliteVec,  # last: it adds its table to the index file the others read
}
PACKAGES = {"qdrant-edge": "qdrant_edge", "usearch": "usearch", "sqlite-vec": "sqlite_vec"}


def missing_package(name: str) -> str | None:
    """The import name an engine lacks, or None."""
    builder = ENGINES[name].builder
    module = PACKAGES.get(builder or "")
    return module if module and importlib.util.find_spec(module) is None else None


def child_build(run: Run, name: str) -> dict:
    engine = ENGINES[name](run)
    started = time.perf_counter()
    size = engine.build()
    return {"build_s": time.perf_counter() - started, "size": size}


def rss_anon() -> int:
    """The process's anonymous resident bytes (RSS less the file pages it maps, which the kernel may drop)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def child_serve(run: Run, name: str) -> dict:
    """Load the engine and ask every query; RSS added = after the queries − before the load."""
    engine = ENGINES[name](run)
    queries = run.queries()
    for module in engine.modules:
        importlib.import_module(module)
    proc = psutil.Process()
    before, anon = proc.memory_info().rss, rss_anon()
    started = time.perf_counter()
    engine.load()
    load_s = time.perf_counter() - started
    out: dict = {"load_s": load_s, "variants": {}}
    for v in variants(run.chunks):
        times, answers = [], []
        for i in range(QUERIES):
            t = time.perf_counter()
            answer = [engine.search(part, queries[v.name][part][i], v) for part in run.parts]
            times.append((time.perf_counter() - t) * 1000)
            answers.append(answer)
        out["variants"][v.name] = {"ms": times, "answers": answers}
    out["rss_added"] = proc.memory_info().rss - before
    out["anon_added"] = rss_anon() - anon
    out["size"] = engine.size()
    return out


def _child(args: list[str], extra_env: dict[str, str]) -> dict:
    """Run a child step in a fresh interpreter; its result comes back as JSON in a file."""
    result = Path(tempfile.mkstemp(suffix=".json")[1])
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, **extra_env}
    try:
        subprocess.run(
            [sys.executable, "-m", "bench.bench_vector_engines", *args, "--result", str(result)],
            cwd=REPO,
            env=env,
            check=True,
        )
        return json.loads(result.read_text())
    finally:
        result.unlink(missing_ok=True)


# ---------------------------------------------------------------- the table


def _recall(answers: list, reference: list) -> tuple[float, float]:
    """Mean recall@10 (over the query's lists) of the near half and of the random half."""
    per_query = [
        statistics.mean(len(set(a) & set(r)) / max(1, len(r)) for a, r in zip(ans, ref, strict=True))
        for ans, ref in zip(answers, reference, strict=True)
    ]
    half = QUERIES // 2
    return statistics.mean(per_query[:half]), statistics.mean(per_query[half:])


def report(results: dict[str, dict], names: list[str], chunks: int) -> None:
    """One row per engine: absolute figures and, in brackets, the ratio against ``exact`` in this run."""
    ref = results["exact"]
    vs = [v.name for v in variants(chunks)]
    print(
        f"  {'engine':<18} {'build s':>8} {'load s':>7} {'size MB':>8} {'RSS +MB (×exact)':>16} {'anon':>5} "
        + " ".join(f"{name + ' p50/p95 ms (p95 ×exact)':>33}" for name in vs)
        + "   recall@10 all/days/glob (near | random)   filters"
    )
    for name in names:
        r = results.get(name)
        if r is None:
            continue
        if "missing" in r:
            print(f"  {name:<18} not measured: {r['missing']}")
            continue
        rss = r["rss_added"] / 2**20
        ratio = r["rss_added"] / max(ref["rss_added"], 1)
        cells = []
        for v in vs:
            ms, base = r["variants"][v]["ms"], ref["variants"][v]["ms"]
            p50, p95 = statistics.median(ms), _pct(ms, 0.95)
            cells.append(f"{p50:8.1f} /{p95:8.1f} ({p95 / _pct(base, 0.95):6.3f}×)")
        recalls = [_recall(r["variants"][v]["answers"], ref["variants"][v]["answers"]) for v in vs]
        rec = "/".join(f"{(a + b) / 2:.3f}" for a, b in recalls)
        split = f"({statistics.mean(a for a, _ in recalls):.3f} | {statistics.mean(b for _, b in recalls):.3f})"
        build = f"{r['build_s']:8.1f}" if r.get("build_s") is not None else f"{'—':>8}"
        print(
            f"  {name:<18} {build} {r['load_s']:7.2f} {r['size'] / 2**20:8.0f} {rss:8.0f} ({ratio:4.1f}×) "
            f"{r['anon_added'] / 2**20:5.0f} "
            + " ".join(f"{c:>33}" for c in cells)
            + f"   {rec} {split}   {'in query' if ENGINES[name].filters_in_query else 'after search'}",
            flush=True,
        )


def one_size(chunks: int, parts: tuple[str, ...], only: list[str], tmp: Path) -> None:
    """Measure every engine at one size and print its table."""
    run = Run(tmp / f"engines-{chunks}", parts, chunks)
    run.work.mkdir(parents=True)
    base = build_index(run)
    data = export(run)
    shares = ", ".join(f"{k} {v:.0%}" for k, v in data["shares"].items() if k != "all")
    print(
        f"{chunks:,} chunks, {data['passages']:,} passages ({data['per_chunk']:.1f} per chunk"
        f"{', items up to ' + format(ITEMS_UP_TO_CHUNKS, ',') + ' chunks'}), searched: {' + '.join(parts)} "
        f"({sum(PARTS[p][1] for p in parts)} columns); filters keep {shares} of the chunks\n"
        f"  memstrata index (FTS, float vectors, codes: what every engine starts from) built in "
        f"{base['build_s']:.1f} s, {base['file_mb']:.0f} MB",
        flush=True,
    )
    results: dict[str, dict] = {}
    built: dict[str, dict] = {}
    names = [n for n in ENGINES if not only or n in only or n == "exact"]
    for name in names:
        missing = missing_package(name)
        if missing:
            results[name] = {"missing": f"package {missing!r} is not installed (pip install -e '.[bench]')"}
            continue
        common = ["--child-of", str(run.work), "--chunks", str(chunks), "--parts", ",".join(parts), "--engine", name]
        builder = ENGINES[name].builder
        if builder and builder not in built:
            built[builder] = _child([*common, "--step", "build"], {})
        results[name] = _child([*common, "--step", "serve"], ENGINES[name].env)
        if builder:
            results[name]["build_s"] = built[builder]["build_s"]
            results[name]["size"] = built[builder]["size"]
    report(results, names, chunks)
    shutil.rmtree(run.work, ignore_errors=True)


def main(quick: bool = False, parts: tuple[str, ...] = ("e5",), only: list[str] | None = None) -> None:
    if "use" in parts and not companion.available():
        parts = tuple(p for p in parts if p != "use")
        print("the companion model's package is not installed: e5's columns only")
    sizes = SIZES[:1] if quick else SIZES
    for name in ENGINES:
        if missing := missing_package(name):
            print(f"{name}: package {missing!r} is not installed, not measured (pip install -e '.[bench]')")
    print(
        "columns: build (its own child process) and load s; size of what it searches (on disk; the codes: in "
        "memory); RSS added by the load and the queries (× exact's), anon: the part that is no mapped file's "
        "page; p50/p95 of a query (e5's list; with --parts e5,use both lists) and its p95 against exact's; "
        "recall@10 against exact per filter (mean of the near and random halves), then per half",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="memstrata-engines-") as tmp:
        for chunks in sizes:
            one_size(chunks, parts, only or [], Path(tmp))


def _cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20k chunks only")
    parser.add_argument("--parts", default="e5", help="model parts searched: e5 or e5,use (default e5)")
    parser.add_argument("--engines", default="", help=f"comma-separated subset of {', '.join(ENGINES)}")
    # a child step (one engine, one process)
    parser.add_argument("--child-of", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--chunks", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--step", choices=("build", "serve"), help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    parts = tuple(p for p in args.parts.split(",") if p)
    if unknown := set(parts) - set(PARTS):
        parser.error(f"unknown part(s): {', '.join(sorted(unknown))}")
    if args.child_of:
        malloc.tune()  # the daemon's allocator settings (memstrata run), so the RSS figures are its own
        run = Run(args.child_of, parts, args.chunks)
        step = child_build if args.step == "build" else child_serve
        args.result.write_text(json.dumps(step(run, args.engine)))
        return
    engines = [e for e in args.engines.split(",") if e]
    if unknown := set(engines) - set(ENGINES):
        parser.error(f"unknown engine(s): {', '.join(sorted(unknown))}")
    started = time.monotonic()
    main(quick=args.quick, parts=parts, only=engines)
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    _cli()
