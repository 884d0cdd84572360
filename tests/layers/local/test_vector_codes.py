"""L3 vector search through the int8 codes: the same nearest chunks as scoring every vector, kept current.

The codes live in the index (real SQLite through apsw) and in a per-process
cache that follows the writer's change log; these tests write through one
connection and search through another, as the daemon's indexer and a search do.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from layers.local.storage import vector_codes
from layers.local.storage.index import Document, Filters, Identity, LocalIndex, rebuild
from layers.local.storage.vector_codes import CodeCache, Mask

MODEL = "test-model"
DIM = 64


def _doc(path: str, text: str, layer: str = "daily", day: str | None = None) -> Document:
    return Document(path, text, hashlib.sha256(text.encode()).hexdigest(), layer, day)


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _embed_pending(index: LocalIndex, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A random unit vector for each chunk waiting for one, stored; chunk hash → vector."""
    pending = index.take_pending(10_000)
    vectors = dict(zip((h for h, _ in pending), _unit(rng, len(pending)), strict=True))
    index.store_vectors(MODEL, vectors.items())
    return vectors


def _near(vector: np.ndarray, rng: np.random.Generator, noise: float = 0.3) -> np.ndarray:
    q = vector + noise * _unit(rng, 1)[0]
    return q / np.linalg.norm(q)


def _paths(hits) -> list[str]:
    return [h.path for h in hits]


@pytest.fixture
def written(tmp_path):
    """An index of 300 files with one vector each, its writer, and a separate reader."""
    rng = np.random.default_rng(7)
    path = tmp_path / "index.sqlite"
    writer = LocalIndex(path, Identity(embed_model=MODEL))
    for i in range(300):
        writer.update_document(
            _doc(f"memory/2026-03-{i % 28 + 1:02d}-{i}.md", f"note {i}", day=f"2026-03-{i % 28 + 1:02d}")
        )
    by_hash = _embed_pending(writer, rng)
    reader = LocalIndex(path, Identity(embed_model=MODEL), readonly=True, verify=False)
    yield writer, reader, by_hash, rng
    reader.close()
    writer.close()


def _vector_of(index: LocalIndex, path: str) -> np.ndarray:
    blob, dim = index.db.execute(
        "SELECT v.vec, v.dim FROM chunks c JOIN vectors v ON v.hash = c.hash WHERE c.path = ?", (path,)
    ).fetchone()
    return np.frombuffer(blob, dtype=np.float32)[:dim]


def test_the_codes_find_what_scoring_every_vector_finds_with_the_same_scores(written):
    _, reader, _, rng = written
    paths = [r[0] for r in reader.db.execute("SELECT path FROM chunks ORDER BY id")]
    for path in paths[::10]:
        q = _near(_vector_of(reader, path), rng)
        fast = reader.search_vectors(q, 10, Filters())
        exact = reader.exact_vectors(q, 10, Filters())
        assert _paths(fast)[0] == path
        assert _paths(fast) == _paths(exact)
        assert [h.score for h in fast] == pytest.approx([h.score for h in exact], abs=1e-6)


def test_a_reader_follows_what_another_connection_writes_removes_and_changes(written):
    writer, reader, _, rng = written
    target = "memory/2026-03-05-4.md"
    q = _near(_vector_of(reader, target), rng, noise=0.1)
    assert _paths(reader.search_vectors(q, 3, Filters()))[0] == target  # the cache is loaded now

    writer.remove_document(target)
    assert target not in _paths(reader.search_vectors(q, 300, Filters()))

    writer.update_document(_doc("memory/new.md", "a new note", day="2026-03-30"))
    ((_, new_vec),) = _embed_pending(writer, rng).items()
    assert _paths(reader.search_vectors(_near(new_vec, rng, 0.1), 1, Filters())) == ["memory/new.md"]

    writer.update_document(_doc("memory/new.md", "the new note, rewritten", day="2026-03-30"))
    ((_, changed_vec),) = _embed_pending(writer, rng).items()
    hits = reader.search_vectors(_near(changed_vec, rng, 0.1), 300, Filters())
    assert _paths(hits)[0] == "memory/new.md"
    assert _paths(hits).count("memory/new.md") == 1, "the old version's code is gone"
    assert reader.search_vectors(new_vec, 1, Filters())[0].score < 0.9, "the new text's vector, not the old one"


def test_filters_choose_among_all_chunks_before_the_nearest_are_kept(written):
    """A filter that leaves only chunks far from the query still fills the list (never filtered after the pool)."""
    writer, reader, _, rng = written
    q = _near(_vector_of(reader, "memory/2026-03-01-0.md"), rng)
    cases = {
        "glob": (Filters(path_glob="memory/2026-03-07-*"), lambda p: p.startswith("memory/2026-03-07-")),
        "since": (Filters(since="2026-03-27"), lambda p: p.split("-")[2] >= "27"),
        "until": (Filters(until="2026-03-02"), lambda p: p.split("-")[2] <= "02"),
    }
    for name, (filters, allowed) in cases.items():
        expected = [p for (p,) in reader.db.execute("SELECT path FROM chunks") if allowed(p)]
        hits = reader.search_vectors(q, 100, filters)
        assert sorted(_paths(hits)) == sorted(expected), name
        assert _paths(hits) == _paths(reader.exact_vectors(q, 100, filters)), name
    writer.update_document(_doc("MEMORY.md", "core note", layer="core"))
    ((_, core_vec),) = _embed_pending(writer, rng).items()
    assert _paths(reader.search_vectors(core_vec, 5, Filters(layer="core"))) == ["MEMORY.md"]
    assert "MEMORY.md" not in _paths(reader.search_vectors(core_vec, 5, Filters(layer="daily")))


def test_a_reader_behind_the_trimmed_log_loads_again(written, monkeypatch):
    writer, reader, _, rng = written
    q = _near(_vector_of(reader, "memory/2026-03-02-1.md"), rng)
    reader.search_vectors(q, 1, Filters())
    monkeypatch.setattr(vector_codes, "KEEP_CHANGES", 5)
    applied = writer.db.execute("SELECT max(seq) FROM changes").get
    for i in range(300):  # the log is trimmed every 1,024 entries
        writer.update_document(_doc(f"memory/extra-{i}.md", f"extra {i}"))
    extra = _embed_pending(writer, rng)
    assert writer.db.execute("SELECT min(seq) FROM changes").get > applied + 1, "trimmed past what the reader applied"
    for vec in list(extra.values())[:5]:
        assert _paths(reader.search_vectors(_near(vec, rng, 0.1), 1, Filters()))[0].startswith("memory/extra-")
    assert reader.vector_count() == len(reader.search_vectors(q, 10_000, Filters()))


def test_dead_rows_are_compacted_and_an_emptied_cache_takes_new_chunks():
    rng = np.random.default_rng(3)
    cache = CodeCache(DIM, frozenset({(0, DIM)}))
    vectors = _unit(rng, 3000)
    cache.add((i, None, "daily", vector_codes.quantize(vectors[i : i + 1])) for i in range(3000))
    for i in range(0, 3000, 2):
        cache.remove(i)
    cache.compact()
    assert cache.dead == 0 and len(cache) == 1500 and cache.passages == 1500
    assert cache.nearest(vectors[1], 0, [Mask()], 1) == [[1]]
    assert cache.nearest(vectors[2], 0, [Mask()], 1) != [[2]], "a removed chunk stays removed"

    for i in range(1, 3000, 2):
        cache.remove(i)
    cache.compact()
    assert len(cache) == 0
    cache.add(
        [
            (9000, None, "daily", vector_codes.quantize(vectors[:2])),
            (9001, None, "daily", vector_codes.quantize(vectors[2:3])),
        ]
    )
    assert cache.nearest(vectors[1], 0, [Mask()], 1) == [[9000]], "a chunk scores as its best passage"
    assert cache.nearest(vectors[2], 0, [Mask()], 1) == [[9001]]


def test_a_chunk_replaced_again_and_again_keeps_the_cache_within_twice_its_live_passages():
    """A daily note appended to every few seconds replaces its last chunk, every passage of it, each time
    (issue 51's traced soak: these arrays grew 10.6 MiB in 21 minutes, compaction waiting for 1,024 dead
    chunks).  Counted in passages, the dead never outgrow the live by more than the minimum."""
    rng = np.random.default_rng(4)
    cache = CodeCache(DIM, frozenset({(0, DIM)}))
    passages = 20  # the chunk as a whole, then its items
    for chunk in range(10):
        cache.add([(chunk, "2026-12-07", "daily", vector_codes.quantize(_unit(rng, passages)))])
    live = 10 * passages
    most = 0
    for _ in range(500):  # the tail chunk written again 500 times: 10,000 passages replaced
        last = _unit(rng, passages)
        cache.add([(9, "2026-12-07", "daily", vector_codes.quantize(last))])
        cache.compact()
        most = max(most, cache.passages)
    assert most <= 2 * live + vector_codes.COMPACT_AT_LEAST, most
    assert len(cache) == 10 and cache.nearest(last[3], 0, [Mask()], 1) == [[9]]
    assert cache.nbytes <= (2 * live + vector_codes.COMPACT_AT_LEAST) * (DIM + 8 + 8 + 4 + 1 + 1)


def test_a_whole_chunks_cache_stays_one_after_a_compaction():
    """A large index's cache keeps each chunk's first passage only; compacting it kept every passage of what
    was added after (and the index reloaded the cache at each search, finding it changed)."""
    rng = np.random.default_rng(6)
    cache = CodeCache(DIM, frozenset({(0, DIM)}), whole_only=True)
    cache.add((i, None, "daily", vector_codes.quantize(_unit(rng, 3))) for i in range(600))
    for i in range(400):
        cache.remove(i)
    cache.compact()
    assert cache.whole_only and len(cache) == 200 and cache.passages == 200
    cache.add([(1000, None, "daily", vector_codes.quantize(_unit(rng, 3)))])
    assert cache.passages == 201


def test_an_index_from_before_the_codes_is_rebuilt_with_codes_for_every_vector(tmp_path):
    """An index of schema 1 (vectors, no codes): the rebuild keeps its vectors and makes their codes."""
    rng = np.random.default_rng(5)
    path = tmp_path / "index.sqlite"
    docs = [_doc(f"memory/{i}.md", f"old note {i}") for i in range(40)]
    with LocalIndex(path, Identity(embed_model=MODEL, schema=1)) as old:
        for d in docs:
            old.update_document(d)
        vectors = _embed_pending(old, rng)
        old.db.execute("DELETE FROM codes")
    stats = rebuild(path, Identity(embed_model=MODEL), docs)
    assert stats["vectors_reused"] == 40
    with LocalIndex(path, Identity(embed_model=MODEL), readonly=True, verify=False) as fresh:
        assert fresh.db.execute("SELECT count(*) FROM codes").get == 40
        by_hash = {h: p for h, p in fresh.db.execute("SELECT hash, path FROM chunks")}
        for chunk_hash, vec in vectors.items():
            assert _paths(fresh.search_vectors(vec, 1, Filters())) == [by_hash[chunk_hash]]


def test_the_scoring_pass_runs_on_one_blas_thread_and_leaves_the_count_as_it_was(written, monkeypatch):
    """Each block's gemv is too small to share; on a busy 2-core host a second BLAS thread only waits
    (docs/facts.md, "L3 vectors at scale").  The limit is the pass's alone: BLAS elsewhere in the process
    (the companion model) keeps its threads."""
    from threadpoolctl import threadpool_info

    def blas_threads() -> list[int]:
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    before = blas_threads()
    assert before, "numpy's BLAS is not visible to threadpoolctl"
    seen: list[list[int]] = []
    in_pass = []
    real_dot, real_nearest = np.dot, CodeCache.nearest

    def recording_dot(*args, **kwargs):
        if in_pass:
            seen.append(blas_threads())
        return real_dot(*args, **kwargs)

    def recording_nearest(self, *args, **kwargs):
        in_pass.append(True)
        try:
            return real_nearest(self, *args, **kwargs)
        finally:
            in_pass.clear()

    _, reader, by_hash, _ = written
    monkeypatch.setattr(np, "dot", recording_dot)
    monkeypatch.setattr(CodeCache, "nearest", recording_nearest)
    hits = reader.search_vectors(next(iter(by_hash.values())), 5, Filters())
    monkeypatch.undo()
    assert hits
    assert seen and all(threads == [1] * len(before) for threads in seen)
    assert blas_threads() == before


def test_an_index_past_the_items_limit_keeps_whole_chunks_codes_only(tmp_path, monkeypatch):
    """Items are searched while an index is small; past ITEMS_UP_TO_CHUNKS the cache holds one code per
    chunk (its memory stays within the gate at 100,000 chunks), and the exact rescoring still reads every
    stored passage, so a chunk found by its whole code is scored by its best item."""
    from layers.local.storage import index as index_module

    monkeypatch.setattr(index_module, "ITEMS_UP_TO_CHUNKS", 4)
    rng = np.random.default_rng(3)
    path = tmp_path / "index.sqlite"
    writer = LocalIndex(path, Identity(embed_model=MODEL))
    reader = LocalIndex(path, Identity(embed_model=MODEL), readonly=True, verify=False)

    def add(i: int) -> np.ndarray:
        writer.update_document(_doc(f"memory/{i}.md", f"note {i}"))
        (chunk_hash, _), *_ = writer.take_pending(10)
        rows = _unit(rng, 3)  # the whole chunk, then two items
        writer.store_vectors(MODEL, [(chunk_hash, rows)])
        return rows

    stored = [add(i) for i in range(4)]

    def cache() -> CodeCache:
        hits = reader.search_vectors(stored[0][2], 1, Filters())
        assert [h.path for h in hits] == ["memory/0.md"], "found by its item"
        (found,) = [c for k, c in vector_codes._CACHES.items() if k[0] == str(path)]
        return found

    assert not cache().whole_only and cache().passages == 4 * 3
    stored.append(add(4))
    assert cache().whole_only and cache().passages == 5, "one code per chunk past the limit"
    hit = reader.search_vectors(stored[0][2], 1, Filters())[0]
    assert hit.score > 0.99, "the rescoring scored the chunk by its item's stored vector"
    writer.close()
    reader.close()
