"""The L3 index on real SQLite FTS5 (apsw): recall, incremental updates, hostile input, rebuilds."""

from __future__ import annotations

import hashlib
import random
import re
import threading

import numpy as np
import pytest

from layers.local.models.vectors import VectorsUnavailableError
from layers.local.ranking.hybrid_search import search
from layers.local.storage.index import (
    CURATED_CHUNKS_SQL,
    Document,
    Filters,
    ForeignFile,
    Identity,
    IndexStale,
    LocalIndex,
    rebuild,
)
from layers.local.text.query import EmptyQueryError, parse_query
from tests.corpus import Corpus

ALL = 10**6


def _doc(path: str, text: str, layer: str = "daily", day: str | None = None) -> Document:
    return Document(path, text, hashlib.sha256(text.encode()).hexdigest(), layer, day)


@pytest.fixture(scope="module")
def corpus_index(tmp_path_factory):
    corpus = Corpus(seed=11)
    index = LocalIndex(tmp_path_factory.mktemp("idx") / "index.sqlite", Identity())
    chunks: dict[str, str] = {}
    for f in range(150):
        text = corpus.chunk()
        chunks[f"memory/c{f}.md"] = text
        index.update_document(_doc(f"memory/c{f}.md", text))
    yield index, chunks, corpus
    index.close()


def _found(index: LocalIndex, query: str) -> set[str]:
    """Files with every term (no relaxed retry)."""
    return {h.path for h in index.search_text(parse_query(query).all_terms, ALL, Filters())}


def _recall(index, chunks, queries) -> float:
    expected = found = 0
    for q in queries:
        truth = {p for p, text in chunks.items() if q in text}
        assert truth, q
        got = _found(index, q)
        expected += len(truth)
        found += len(truth & got)
    return found / expected


def _chinese_runs(chunks) -> list[str]:
    return [run for text in chunks.values() for run in re.findall(r"[\u4e00-\u9fff]{4,}", text)]


@pytest.mark.parametrize("length", [1, 2, 4])
def test_chinese_queries_have_full_recall_against_a_substring_scan(corpus_index, length):
    index, chunks, _ = corpus_index
    rng = random.Random(length)
    runs = _chinese_runs(chunks)
    queries = set()
    while len(queries) < 40:
        run = rng.choice(runs)
        start = rng.randrange(0, len(run) - length + 1)
        queries.add(run[start : start + length])
    assert _recall(index, chunks, sorted(queries)) == 1.0


def test_english_and_mixed_queries_have_full_recall(corpus_index):
    index, chunks, _ = corpus_index
    words = sorted({w for text in chunks.values() for w in re.findall(r"[a-z]{6}", text)})[:40]
    assert _recall(index, chunks, words) == 1.0
    mixed = sorted({m for text in chunks.values() for m in re.findall(r"[\u4e00-\u9fff]{2}[a-z]{6}", text)})[:30]
    assert len(mixed) >= 10
    assert _recall(index, chunks, mixed) == 1.0


def test_the_cases_unicode61_gets_wrong(tmp_path):
    with LocalIndex(tmp_path / "i.sqlite", Identity()) as index:
        index.update_document(_doc("memory/a.md", "Qdrant 部署在6333端口\n"))
        index.update_document(_doc("memory/b.md", "我们使用qdrant作为向量库\n"))
        index.update_document(_doc("memory/c.md", "un café au lait, kein Ärger\n"))
        assert _found(index, "6333") == {"memory/a.md"}
        assert _found(index, "qdrant") == {"memory/a.md", "memory/b.md"}
        assert _found(index, "使用qdrant") == {"memory/b.md"}
        assert _found(index, "café") == {"memory/c.md"}
        assert _found(index, "ärger") == {"memory/c.md"}
        assert _found(index, "端") == {"memory/a.md"}


def test_only_changed_chunks_are_rewritten_and_deletes_and_renames_are_handled(tmp_path):
    sections = [f"## part {i}\n\ncontent number {i} 内容{i}\n" for i in range(5)]
    with LocalIndex(tmp_path / "i.sqlite", Identity()) as index:
        first = index.update_document(_doc("memory/x.md", "\n".join(sections)))
        assert (first.added, first.removed, first.kept) == (5, 0, 0)
        sections[2] = "## part 2\n\nrewritten 新的\n"
        second = index.update_document(_doc("memory/x.md", "\n".join(sections)))
        assert (second.added, second.removed, second.kept) == (1, 1, 4)
        assert _found(index, "rewritten") == {"memory/x.md"}
        assert _found(index, "number 2") == set()
        # rename: the file leaves one path and appears under another
        index.remove_document("memory/x.md")
        index.update_document(_doc("memory/y.md", "\n".join(sections)))
        assert _found(index, "rewritten") == {"memory/y.md"}
        assert index.documents().keys() == {"memory/y.md"}


HOSTILE = [
    '"',
    "*",
    "NEAR(",
    "a:b",
    "(x OR",
    "col:term",
    "'; DROP TABLE chunks; --",
    "^start",
    "x" * 10_000,
    "检索 " * 2000,
]


@pytest.mark.parametrize("query", HOSTILE, ids=lambda q: q[:12])
def test_hostile_queries_return_normally(corpus_index, query):
    index, _, _ = corpus_index
    try:
        answer = search(index, query, mode="fts")
    except EmptyQueryError as exc:
        assert "nothing to search for" in str(exc)
        return
    assert isinstance(answer.results, list)


def test_empty_and_punctuation_only_queries_get_a_clear_message(corpus_index):
    index, _, _ = corpus_index
    for query in ("", "   ", "。，！？", "***"):
        with pytest.raises(EmptyQueryError, match="nothing to search for"):
            search(index, query)


def test_and_first_then_relaxed_or(tmp_path):
    with LocalIndex(tmp_path / "i.sqlite", Identity()) as index:
        index.update_document(_doc("memory/a.md", "alpha beta\n"))
        index.update_document(_doc("memory/b.md", "beta gamma\n"))
        strict = search(index, "alpha beta", mode="fts")
        assert [r["path"] for r in strict.results] == ["memory/a.md"] and not strict.relaxed
        relaxed = search(index, "alpha gamma", mode="fts")
        assert {r["path"] for r in relaxed.results} == {"memory/a.md", "memory/b.md"} and relaxed.relaxed


def test_question_words_do_not_have_to_match_and_do_not_match_noise(tmp_path):
    with LocalIndex(tmp_path / "i.sqlite", Identity()) as index:
        index.update_document(_doc("memory/a.md", "qdrant-02 listens on port 6333\n"))
        index.update_document(_doc("memory/b.md", "what did we do, which one is it of the day\n"))
        answer = search(index, "What is the port of qdrant-02?", mode="fts")
        assert [r["path"] for r in answer.results] == ["memory/a.md"] and not answer.relaxed
        assert [r["path"] for r in search(index, "what is it", mode="fts").results] == ["memory/b.md"]


def test_a_chinese_question_is_relaxed_to_its_two_character_phrases(tmp_path):
    with LocalIndex(tmp_path / "i.sqlite", Identity()) as index:
        index.update_document(_doc("memory/a.md", "备份负责人从今天起换成陈静\n"))
        index.update_document(_doc("memory/b.md", "今天是什么日子？为什么谁都不在呢\n"))
        answer = search(index, "现在备份归谁管？", mode="fts")
        # the whole run is in no note; its particles (现在 谁) and lone characters (归 管) match nothing
        assert [r["path"] for r in answer.results] == ["memory/a.md"] and answer.relaxed
        assert parse_query("缓存服务那次挂掉是因为什么？").any_term == '"缓 存" OR "存 服" OR "服 务" OR "挂 掉"'
        # stems, as the index stores them
        assert parse_query("redis-01 的 IP 是多少？").all_terms == '"redi 01" AND "ip"'


def test_heading_matches_rank_above_body_matches_and_results_carry_location(tmp_path):
    with LocalIndex(tmp_path / "i.sqlite", Identity()) as index:
        index.update_document(_doc("memory/a.md", "# misc\n\nwe talked about tailscale once\n" + "filler words\n" * 5))
        index.update_document(_doc("memory/b.md", "# notes\n\n## Tailscale\n\nsetup steps\n" + "filler words\n" * 5))
        answer = search(index, "tailscale", mode="fts")
        assert [r["path"] for r in answer.results] == ["memory/b.md", "memory/a.md"]
        top = answer.results[0]
        # the bare "# notes" above it joins it
        assert top["heading"] == "notes > Tailscale" and top["lines"] == [1, 10] and top["source"] == "local"
        assert "**Tailscale**" in top["snippet"]


def test_filters_by_layer_path_and_date(tmp_path):
    with LocalIndex(tmp_path / "i.sqlite", Identity()) as index:
        index.update_document(_doc("SOUL.md", "always check memory\n", "core"))
        index.update_document(_doc("memory/2026-01-05.md", "check memory daily\n", "daily", "2026-01-05"))
        index.update_document(_doc("memory/2026-03-09.md", "check memory again\n", "daily", "2026-03-09"))

        def paths(**f):
            return {r["path"] for r in search(index, "memory", mode="fts", filters=Filters(**f)).results}

        assert paths(layer="core") == {"SOUL.md"}
        assert paths(layer="daily") == {"memory/2026-01-05.md", "memory/2026-03-09.md"}
        assert paths(path_glob="memory/2026-03-*") == {"memory/2026-03-09.md"}
        assert paths(since="2026-02-01") == {"memory/2026-03-09.md"}
        assert paths(until="2026-02-01") == {"memory/2026-01-05.md"}


def test_identity_mismatch_and_damage_make_the_index_stale(tmp_path):
    path = tmp_path / "i.sqlite"
    LocalIndex(path, Identity(embed_model="model-a")).close()
    with pytest.raises(IndexStale, match="embed_model"):
        LocalIndex(path, Identity(embed_model="model-b"))
    with pytest.raises(IndexStale, match="tokenizer_version"):
        LocalIndex(path, Identity(embed_model="model-a", tokenizer=99))
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ForeignFile, match="not an SQLite database"):
        LocalIndex(path, Identity())  # nothing says it is ours: never opened for writing
    with pytest.raises(IndexStale, match="damaged"):
        LocalIndex(path, Identity(), owned=True)  # the caller created it: damaged, rebuilt


def _with_vectors(path, model: str, docs: list[Document], items_later: bool = False) -> list[tuple[str, str]]:
    """Index ``docs`` at ``path`` and give each chunk a vector (whole only, its items still owed, with
    ``items_later``); returns the chunks that were waiting for one."""
    with LocalIndex(path, Identity(embed_model=model)) as index:
        for d in docs:
            index.update_document(d)
        pending = index.take_pending(100)
        owed = [h for h, _ in pending] if items_later else []
        index.store_vectors(model, [(h, np.ones(4, dtype=np.float32) / 2) for h, _ in pending], owed)
    return pending


def test_a_rebuild_keeps_the_items_a_carried_over_whole_vector_still_owes(tmp_path):
    """Whole vectors come first and items later (daemon/local/embedding.py): a rebuild between the two
    passes carries the owed items over for the chunks it keeps, and forgets those of chunks it drops."""
    path = tmp_path / "i.sqlite"
    model = "test-model"
    docs = [_doc(f"memory/{i}.md", f"# t{i}\n\n- item one {i}\n- item two {i}\n") for i in range(4)]
    _with_vectors(path, model, docs, items_later=True)
    with LocalIndex(path, Identity(embed_model=model)) as index:
        assert index.pending_items_count() == 4 and index.pending_count() == 4
        assert index.take_pending(100) == [] and len(index.take_pending(100, items=True)) == 4
    rebuild(path, Identity(embed_model=model), docs[:3])
    with LocalIndex(path, Identity(embed_model=model)) as fresh:
        assert fresh.pending_items_count() == 3 and fresh.pending_count() == 3 and fresh.vector_count() == 3
        h, _ = fresh.take_pending(1, items=True)[0]
        fresh.store_vectors(model, [(h, np.ones((3, 4), dtype=np.float32) / 2)])
        assert fresh.pending_items_count() == 2 and fresh.stored_vector(h).shape == (3, 4)


def test_rebuild_replaces_the_file_atomically_keeps_old_answers_and_reuses_vectors(tmp_path):
    path = tmp_path / "i.sqlite"
    model = "test-model"
    docs = [_doc(f"memory/{i}.md", f"# t{i}\n\nshared words 共享 {i}\n") for i in range(20)]
    pending = _with_vectors(path, model, docs)
    assert len(pending) == 20
    old_reader = LocalIndex(path, Identity(embed_model=model), readonly=True, verify=False)
    assert old_reader.pending_count() == 0
    answered_during_build = []

    def before_swap():
        answered_during_build.append(len(_found(old_reader, "共享")) and len(old_reader.documents()))

    stats = rebuild(path, Identity(embed_model=model), docs[:10], before_swap=before_swap)
    assert answered_during_build == [20], "the old index answered until the swap"
    assert stats["files"] == 10 and stats["vectors_reused"] == 20
    old_reader.close()
    with LocalIndex(path, Identity(embed_model=model)) as fresh:
        assert fresh.pending_count() == 0, "identical chunks are never embedded twice"
        assert fresh.vector_count() == 10
    assert not (tmp_path / "i.sqlite.rebuild").exists()


def _held(index: LocalIndex) -> dict[str, int]:
    """Rows of the tables kept by chunk hash, and how many of them no chunk holds."""
    one = lambda sql: index.db.execute(sql).get  # noqa: E731
    out = {}
    for table in ("vectors", "codes", "pending", "pending_items"):
        out[table] = one(f"SELECT count(*) FROM {table}")
        out[f"{table}_unheld"] = one(f"SELECT count(*) FROM {table} WHERE hash NOT IN (SELECT hash FROM chunks)")
    return out


def test_a_replaced_or_removed_chunk_takes_its_vector_and_jobs_and_a_renamed_one_keeps_them(tmp_path):
    model = "test-model"
    path = tmp_path / "i.sqlite"
    one = _doc("memory/a.md", "# a\n\n- the first item of note a\n- the second item of note a\n")
    (taken,) = _with_vectors(path, model, [one], items_later=True)
    with LocalIndex(path, Identity(embed_model=model)) as index:
        assert _held(index)["vectors"] == _held(index)["pending_items"] == 1
        index.update_document(_doc("memory/a.md", "# a\n\nrewritten\n"))  # replaced
        held = _held(index)
        assert held["vectors"] == held["codes"] == held["pending_items"] == 0 and held["pending"] == 1, held
        # the worker brings back the vector of the chunk it took before the edit: dropped, its items never queued
        assert index.store_vectors(model, [(taken[0], np.ones(4, dtype=np.float32) / 2)], [taken[0]]) == 0
        held = _held(index)
        assert held["vectors"] == held["pending_items"] == 0 and index.pending_count() == 1, held
        (fresh,) = index.take_pending(10)
        assert index.store_vectors(model, [(fresh[0], np.ones(4, dtype=np.float32) / 2)]) == 1
        # a rename in one transaction (a flush, a sync) keeps the vector: nothing is embedded again
        with index.bulk():
            index.remove_document("memory/a.md")
            index.update_document(_doc("memory/b.md", "# a\n\nrewritten\n"))
        assert _held(index)["vectors"] == 1 and index.pending_count() == 0 and index.vector_count() == 1
        index.remove_document("memory/b.md")
        assert not any(_held(index).values()), _held(index)


def test_an_index_an_earlier_version_left_is_passed_over_once_and_given_back_its_space(tmp_path):
    model = "test-model"
    path = tmp_path / "i.sqlite"
    _with_vectors(path, model, [_doc("memory/a.md", "# a\n\nkept\n")])
    with LocalIndex(path, Identity(embed_model=model)) as index:
        assert index.forget_unheld_everywhere() == {}, "a new file holds nothing stale"
        vec = np.ones((8, 256), dtype=np.float32).tobytes()  # 8 KB a row, as passages with items are
        with index.bulk():
            for n in range(500):
                index.db.execute("INSERT INTO vectors VALUES(?, ?, 256, ?)", (f"{n:064x}", model, vec))
                index.db.execute("INSERT INTO codes VALUES(?, ?, ?)", (f"{n:064x}", model, b"\x01" * 2048))
                index.db.execute("INSERT INTO pending_items VALUES(?, 0)", (f"{n:064x}",))
            index.db.execute("DELETE FROM meta WHERE key = 'held_only'")
        index.checkpoint()
    leaked = path.stat().st_size
    reader = LocalIndex(path, Identity(embed_model=model), readonly=True, verify=False)
    try:
        assert reader.pending_count() == 500
        with LocalIndex(path, Identity(embed_model=model)) as index:
            removed = index.forget_unheld_everywhere()
            assert removed == {"pending": 0, "pending_items": 500, "vectors": 500, "codes": 500}
            assert index.forget_unheld_everywhere() == {}, "once"
            assert index.pending_count() == 0 and index.vector_count() == 1
        assert reader.pending_count() == 0 and len(_found(reader, "kept")) == 1, "a reader open meanwhile follows"
    finally:
        reader.close()
    assert path.stat().st_size * 4 < leaked, (path.stat().st_size, leaked)


def test_a_rebuild_keeps_no_vector_of_a_chunk_it_dropped(tmp_path):
    path = tmp_path / "i.sqlite"
    model = "test-model"
    docs = [_doc(f"memory/{i}.md", f"# t{i}\n\nwords {i}\n") for i in range(20)]
    _with_vectors(path, model, docs)
    rebuild(path, Identity(embed_model=model), docs[:5])
    with LocalIndex(path, Identity(embed_model=model)) as fresh:
        held = _held(fresh)
        assert held["vectors"] == held["codes"] == 5 and not held["vectors_unheld"] and not held["codes_unheld"]
        assert fresh.pending_count() == 0


def test_rebuild_from_a_damaged_file(tmp_path):
    path = tmp_path / "i.sqlite"
    path.write_bytes(b"\0garbage" * 500)
    with pytest.raises(ForeignFile):
        rebuild(path, Identity(), [_doc("memory/a.md", "recovered text\n")])
    assert path.read_bytes() == b"\0garbage" * 500, "a file nobody said is ours stays as it was"
    rebuild(path, Identity(), [_doc("memory/a.md", "recovered text\n")], owned=True)
    with LocalIndex(path, Identity()) as index:
        assert _found(index, "recovered") == {"memory/a.md"}


def test_hybrid_fusion_reports_contributing_lists(tmp_path):
    """Fusion arithmetic with hand-made vectors (the real model is exercised in test_vectors)."""
    model = "hand-made"
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=model)) as index:
        index.update_document(_doc("memory/a.md", "tailscale network notes\n"))
        index.update_document(_doc("memory/b.md", "vpn mesh between servers\n"))
        pending = dict((text.split("\n")[1], h) for h, text in index.take_pending(10))
        index.store_vectors(
            model,
            [
                (pending["tailscale network notes"], np.array([1, 0], dtype=np.float32)),
                (pending["vpn mesh between servers"], np.array([0.8, 0.6], dtype=np.float32)),
            ],
        )
        answer = search(index, "tailscale", embed_query=lambda q: np.array([0.6, 0.8], dtype=np.float32), explain=True)
        assert answer.vectors == "used" and answer.lists == ["vector", "fts"]
        assert answer.results[0]["path"] == "memory/a.md"  # in both lists
        assert answer.results[0]["ranks"] == {"vector": 2, "fts": 1}
        assert answer.results[1]["ranks"] == {"vector": 1}
        lexical = search(index, "tailscale", embed_query=None, no_embedder_reason="memory gate closed: test")
        assert lexical.vectors == "unavailable: memory gate closed: test" and lexical.lists == ["fts"]


def test_a_query_encode_that_fails_while_the_lexical_side_runs_is_reported_not_lost(tmp_path):
    """The query's vector is made on another thread beside the lexical lists: its failure still reaches
    the answer (auto mode: full text alone, saying why) and an explicit vector search (raised)."""
    model = "hand-made"
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=model)) as index:
        index.update_document(_doc("memory/a.md", "tailscale network notes\n"))
        ((chunk_hash, _),) = index.take_pending(10)
        index.store_vectors(model, [(chunk_hash, np.array([1, 0], dtype=np.float32))])
        threads = []

        def failing(query: str) -> np.ndarray:
            threads.append(threading.current_thread())
            raise VectorsUnavailableError("the model is loading")

        answer = search(index, "tailscale", embed_query=failing)
        assert answer.vectors == "unavailable: the model is loading" and answer.lists == ["fts"]
        assert [r["path"] for r in answer.results] == ["memory/a.md"]
        assert threads and threads[0] is not threading.current_thread()  # it did run beside the caller
        with pytest.raises(VectorsUnavailableError, match="the model is loading"):
            search(index, "tailscale", mode="vector", embed_query=failing)


def _qmd_like(path):
    """A database shaped like QMD's own index.sqlite, in WAL mode as QMD keeps it."""
    import apsw

    db = apsw.Connection(str(path))
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        "CREATE TABLE documents(id INTEGER PRIMARY KEY, path TEXT); CREATE TABLE content(hash TEXT, doc TEXT);"
        "CREATE VIRTUAL TABLE documents_fts USING fts5(body); INSERT INTO documents(path) VALUES('MEMORY.md');"
    )
    db.close()


def test_another_programs_database_is_never_opened_for_writing_or_replaced(tmp_path):
    path = tmp_path / "index.sqlite"
    _qmd_like(path)
    before = path.read_bytes()
    for attempt in (
        lambda: LocalIndex(path, Identity()),
        lambda: LocalIndex(path, Identity(), owned=True),
        lambda: LocalIndex(path, Identity(), readonly=True),
        lambda: rebuild(path, Identity(), [_doc("memory/a.md", "x\n")], owned=True),
    ):
        with pytest.raises(ForeignFile, match=r"tables: content, documents, documents_fts\)"):
            attempt()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.sqlite"], "no -wal, -shm or staging file left"


def test_a_relaxed_lexical_list_counts_half_in_the_fusion(tmp_path):
    model = "hand-made"
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=model)) as index:
        index.update_document(_doc("memory/a.md", "tailscale network notes\n"))
        index.update_document(_doc("memory/b.md", "vpn mesh between servers\n"))
        pending = dict((text.split("\n")[1], h) for h, text in index.take_pending(10))
        index.store_vectors(model, [(pending["vpn mesh between servers"], np.array([1, 0], dtype=np.float32))])
        embed = lambda q: np.array([1, 0], dtype=np.float32)  # noqa: E731
        # a.md is first in the lexical list only, b.md in the vector list only; a.md has every term and
        # waits for its vector, so its lexical rank stands for the vector list's too (counted twice)
        strict = search(index, "tailscale network", embed_query=embed, explain=True)
        scores = {r["path"]: r["score"] for r in strict.results}
        assert not strict.relaxed and scores["memory/a.md"] == pytest.approx(2 * scores["memory/b.md"], abs=1e-6)
        # only one of the words matches anything: the relaxed list's first place is worth half
        relaxed = search(index, "tailscale overlay", embed_query=embed, explain=True)
        scores = {r["path"]: r["score"] for r in relaxed.results}
        assert relaxed.relaxed and scores["memory/a.md"] == pytest.approx(scores["memory/b.md"] / 2, abs=1e-6)


def test_a_relaxed_hit_sharing_under_half_the_terms_is_left_to_the_vectors(tmp_path):
    model = "hand-made"
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=model)) as index:
        index.update_document(_doc("memory/a.md", "证书过期，用户看到安全提示\n"))  # three of the four terms
        index.update_document(_doc("memory/b.md", "磁盘扩容后服务恢复\n"))  # one: 恢复
        index.update_document(_doc("memory/c.md", "周会改到周一\n"))  # none
        pending = {text.split("\n")[1]: h for h, text in index.take_pending(10)}
        index.store_vectors(
            model,
            [(h, np.array([1.0, 0.0] if "周会" in t else [0.0, 1.0], dtype=np.float32)) for t, h in pending.items()],
        )
        embed = lambda q: np.array([1.0, 0.0], dtype=np.float32)  # noqa: E731  the vectors prefer c.md
        question = "证书过期那次用户看到了什么提示多久才恢复"  # no chunk has every term: relaxed
        lexical_only = search(index, question, mode="fts", explain=True)
        assert lexical_only.relaxed
        assert [r["path"] for r in lexical_only.results] == ["memory/a.md", "memory/b.md"], "fts keeps every match"
        hybrid = search(index, question, mode="hybrid", embed_query=embed, explain=True)
        ranks = {r["path"]: r["ranks"] for r in hybrid.results}
        assert "fts" in ranks["memory/a.md"] and "fts" not in ranks["memory/b.md"], ranks
        assert [r["path"] for r in hybrid.results][:2] == ["memory/a.md", "memory/c.md"]


def test_the_list_ends_where_the_matches_end_and_says_when_nothing_matched(tmp_path):
    model = "hand-made"
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=model)) as index:
        index.update_document(_doc("memory/a.md", "Qdrant 部署在 6333 端口\n"))
        for i in range(9):
            index.update_document(_doc(f"T{i}.md", f"template file {i}\n"))
        pending = index.take_pending(20)
        rng = np.random.default_rng(0)
        index.store_vectors(model, [(h, rng.normal(size=8).astype(np.float32)) for h, _ in pending])
        embed = lambda q: rng.normal(size=8).astype(np.float32)  # noqa: E731  the model ranks at random
        answer = search(index, "6333端口", embed_query=embed, explain=True)
        assert answer.matched == "all" and answer.results[0]["path"] == "memory/a.md"
        vector_only = [r for r in answer.results if "fts" not in r["ranks"]]
        assert vector_only and len(answer.results) < 10, "a full page of filler after the one match"
        keep = max(answer.results[0]["ranks"].get("vector", 0), 3)
        assert all(r["ranks"]["vector"] <= keep for r in vector_only)
        nothing = search(index, "zebra giraffe", embed_query=embed)
        assert nothing.matched == "none" and len(nothing.results) == 10  # still answered, and said so


def test_chunks_wait_for_vectors_core_first_then_the_newest_days(tmp_path):
    """A first index of years of notes is embedded from the present backwards: useful after minutes, not hours."""
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model="m")) as index:
        for day in ("2024-01-05", "2026-11-30", "2025-06-01"):
            index.update_document(_doc(f"memory/{day}.md", f"# {day}\n\nnote of {day}\n", day=day))
        index.update_document(_doc("notes/undated.md", "# undated\n\nno day\n", layer="other"))
        index.update_document(_doc("MEMORY.md", "# core\n\nthe core note\n", layer="core"))
        order = [text.strip().split("\n")[-1] for _, text in index.take_pending(10)]
    assert order == ["the core note", "note of 2026-11-30", "note of 2025-06-01", "note of 2024-01-05", "no day"]


def test_a_quoted_literal_keeps_the_chunk_that_holds_it_when_no_chunk_has_every_word(tmp_path):
    """`gpu_memory_utilization` in backticks: the note holding it (in a Chinese line that has none of the
    question's other words) is found lexically, not left to a vector ranking that puts it last."""
    model = "hand-made"
    notes = {
        "memory/2026-08-25.md": "## 最终压测\n- vLLM 参数：`max_num_seqs=64`，`gpu_memory_utilization=0.90`。\n",
        **{
            f"memory/2026-08-{day:02d}.md": f"## launch {day}\n- the launch build was set up on box {day}\n"
            for day in range(1, 13)
        },
    }
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=model)) as index:
        for path, text in notes.items():
            index.update_document(_doc(path, text, day=path[7:17]))
        rows = []
        for chunk_hash, text in index.take_pending(100):
            far = "gpu_memory_utilization" in text  # the model ranks the answer last
            rows.append((chunk_hash, np.array([0.0, 1.0] if far else [1.0, 0.0], dtype=np.float32)))
        index.store_vectors(model, rows)
        question = "What is `gpu_memory_utilization` set to for the launch build?"
        assert parse_query(question).quoted == ("gpu memori util",)
        answer = search(index, question, limit=5, embed_query=lambda q: np.array([1.0, 0.0], dtype=np.float32))
        assert answer.relaxed and "fts:quoted" in answer.lists
        assert "memory/2026-08-25.md" in [r["path"] for r in answer.results]
        unquoted = search(
            index, question.replace("`", ""), limit=5, embed_query=lambda q: np.array([1.0, 0.0], dtype=np.float32)
        )
        # without quotes too: the relaxed list keeps a hit holding half the question's terms by weight, and the
        # three rare terms (one note of thirteen) outweigh "set", "launch" and "build" (twelve of them)
        assert "memory/2026-08-25.md" in [r["path"] for r in unquoted.results]
        assert "fts:quoted" not in unquoted.lists


def test_a_question_about_the_present_puts_the_newer_statement_first_and_marks_the_older(tmp_path):
    """Qdrant's port changed on 09-20: asked what it is now, the 09-20 line comes first and the 09-01 line
    says it was superseded there; MEMORY.md (curated, undated) and another subject's line are not marked."""
    notes = {
        "MEMORY.md": "# MEMORY\n## Services\n- Qdrant — the vector store, its port is in the daily notes.\n",
        "memory/2026-09-01.md": "## 部署\n- Qdrant 部署在 6333 端口\n- 备份每晚 03:00\n",
        "memory/2026-09-10.md": "## 其他\n- Grafana 在 3000 端口\n",
        "memory/2026-09-20.md": "## 迁移\n- Qdrant 迁移到 6334 端口\n- 监控照旧\n",
    }
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model="")) as index:
        for path, text in notes.items():
            day = path[7:17] if path.startswith("memory/") else None
            index.update_document(_doc(path, text, layer="daily" if day else "core", day=day))
        now = search(index, "Qdrant 现在用哪个端口", mode="fts").to_dict()["results"]
        paths = [r["path"] for r in now]
        assert paths.index("memory/2026-09-20.md") < paths.index("memory/2026-09-01.md")
        marks = {r["path"]: r.get("superseded_by") for r in now}
        assert marks["memory/2026-09-01.md"] == "memory/2026-09-20.md:2"
        assert marks["memory/2026-09-20.md"] is None and marks.get("MEMORY.md") is None
        assert marks.get("memory/2026-09-10.md") is None, "Grafana's port is another subject"
        plain = search(index, "Qdrant 端口", mode="fts").to_dict()["results"]
        assert all("superseded_by" not in r for r in plain), "only a question about the present is answered so"


def test_a_curated_statement_that_gives_its_day_is_superseded_by_a_newer_note(tmp_path):
    """MEMORY.md still says Redis is on redis01 "since 2026-08-02"; the 09-15 note moved it: asked where it is
    now, the note's line comes first and MEMORY.md's says it was superseded there (issue 50 item 3)."""
    notes = {
        "MEMORY.md": "# MEMORY\n## Services\n- 2026-08-02 起 Redis 主节点在 redis01\n- 备份在 minio\n",
        "memory/2026-09-15.md": "## 切换\n- Redis 主节点切到 redis02\n",
    }
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model="")) as index:
        for path, text in notes.items():
            day = path[7:17] if path.startswith("memory/") else None
            index.update_document(_doc(path, text, layer="daily", day=day))
        now = search(index, "Redis 主节点现在在哪", mode="fts").to_dict()["results"]
        assert [r["path"] for r in now][:2] == ["memory/2026-09-15.md", "MEMORY.md"]
        assert now[1]["superseded_by"] == "memory/2026-09-15.md:2"


def test_curated_chunks_are_read_through_the_path_index_not_a_scan_of_every_chunk(tmp_path):
    """Every search reads MEMORY.md's and the core files' chunks (the glossary): at 100,000 chunks a scan
    of the chunks table was most of an fts search's time."""
    with LocalIndex(tmp_path / "i.sqlite", Identity()) as index:
        index.update_document(_doc("memory/2026-01-05.md", "## a\n\n- moth — the A100 box\n", "daily", "2026-01-05"))
        index.update_document(_doc("SOUL.md", "## soul\n\n- be brief\n", "core"))
        index.update_document(_doc("MEMORY.md", "## hosts\n\n- moth — the A100 box\n\n## people\n\n- Ana — Lisbon\n"))
        assert [(path, line) for path, line, _ in index.curated_chunks()] == [
            ("MEMORY.md", 1),
            ("MEMORY.md", 5),
            ("SOUL.md", 1),
        ]
        plan = [row[3] for row in index.db.execute("EXPLAIN QUERY PLAN " + CURATED_CHUNKS_SQL, (10,))]
        assert any("SEARCH c USING INDEX chunks_by_path" in step for step in plan), plan
        assert not any(step.startswith("SCAN c") for step in plan), plan
        assert not any(step.startswith("SCAN f") for step in plan), plan  # 0.25-0.5 ms at 5,000 files


def test_an_index_written_before_files_by_layer_gets_it_from_its_writer(tmp_path):
    """The curated files are found through files_by_layer; an older file gains it when the daemon's
    writer opens it, and its readers meanwhile still answer (by a scan)."""
    path = tmp_path / "i.sqlite"
    with LocalIndex(path, Identity()) as index:
        index.update_document(_doc("MEMORY.md", "## hosts\n\n- moth — the A100 box\n", "curated"))
        index.db.execute("DROP INDEX files_by_layer")
    with LocalIndex(path, Identity(), readonly=True) as reader:
        assert [row[0] for row in reader.curated_chunks()] == ["MEMORY.md"]
    with LocalIndex(path, Identity()) as writer:
        names = {r[0] for r in writer.db.execute("SELECT name FROM sqlite_schema WHERE type = 'index'")}
        assert "files_by_layer" in names


def _sections(count: int, body: str, start: int = 0) -> str:
    return "\n".join(f"## note {start + n}\n\n{body} filler{n % 7} words{n % 5}\n" for n in range(count))


@pytest.fixture(scope="module")
def crowded_index(tmp_path_factory):
    """More chunks holding "alpha beta" than RANK_NEWEST: an old file where they say it three times (what BM25
    likes best), one old chunk that also says "gamma", then newer files where they say it once."""
    old = _sections(300, "alpha beta alpha beta alpha beta") + "\n## the old one\n\nalpha beta gamma\n"
    newer = [_sections(1_000, "alpha beta and some other words around them", start=1_000 * (k + 1)) for k in range(3)]
    docs = [_doc("memory/2020-01-01.md", old, day="2020-01-01")] + [
        _doc(f"memory/2026-0{k + 1}-01.md", text, day=f"2026-0{k + 1}-01") for k, text in enumerate(newer)
    ]
    path = tmp_path_factory.mktemp("crowded") / "index.sqlite"
    rebuild(path, Identity(), docs)
    with LocalIndex(path, Identity(), readonly=True) as index:
        yield index


def test_past_rank_newest_full_matches_bm25_ranks_the_newest_and_the_answer_says_so(crowded_index):
    """3,301 chunks hold both words: the newest RANK_NEWEST are ranked, so the old file's chunks (three times
    each, BM25's favourites) are not; the answer says the ranking stopped there."""
    from layers.local.storage.index import RANK_NEWEST

    hits, relaxed, newest_only = crowded_index.search_query(parse_query("alpha beta"), 20, Filters())
    assert newest_only and not relaxed
    assert len(hits) == 20 and all(h.path.startswith("memory/2026-") for h in hits)
    unbounded = crowded_index.search_text(parse_query("alpha beta").all_terms, 20, Filters())
    assert all(h.path == "memory/2020-01-01.md" for h in unbounded)  # what full ranking would have given
    answer = search(crowded_index, "alpha beta", mode="fts").to_dict()
    assert answer["ranked_newest"] == RANK_NEWEST
    assert search(crowded_index, "alpha beta gamma", mode="fts").to_dict()["ranked_newest"] is None
    # with a filter every match in it is ranked (finding the floor would cost what ranking them does)
    until = crowded_index.search_query(parse_query("alpha beta"), 20, Filters(until="2021-01-01"))
    assert not until.newest_only and {h.path for h in until.hits} == {"memory/2020-01-01.md"}


def test_a_rarer_word_is_searched_in_every_chunk_whatever_its_age(crowded_index):
    """A question with one word few chunks hold has few full matches: all of them are ranked, the old one too."""
    hits, _, newest_only = crowded_index.search_query(parse_query("alpha gamma"), 10, Filters())
    assert not newest_only
    assert [h.heading for h in hits] == ["the old one"]


def test_term_shares_are_counted_below_the_sample_and_read_off_the_newest_above_it(crowded_index):
    """ "gamma" is in one chunk (counted); "alpha" in every chunk and "filler3" in every seventh section
    (both read off the newest SHARE_SAMPLE chunks that hold them)."""
    total, shares = crowded_index.term_shares(["gamma", "alpha", "filler3", "absent"])
    assert total == 3_301
    assert shares["gamma"] == pytest.approx(1 / 3_301)
    assert shares["alpha"] == pytest.approx(1.0)
    assert shares["filler3"] == pytest.approx(1 / 7, abs=0.01)
    assert shares["absent"] == 0.0


def test_the_counts_every_search_reads_follow_writes_of_this_connection_and_of_another(tmp_path):
    """chunk_count and newest_day are kept between searches: a write on either side is seen at once."""
    path = tmp_path / "index.sqlite"
    with LocalIndex(path, Identity()) as writer:
        writer.update_document(_doc("memory/2026-01-01.md", "## a\n\none\n", day="2026-01-01"))
        with LocalIndex(path, Identity(), readonly=True) as reader:
            assert (reader.chunk_count(), reader.newest_day()) == (1, "2026-01-01")
            assert (writer.chunk_count(), writer.newest_day()) == (1, "2026-01-01")
            writer.update_document(_doc("memory/2026-02-01.md", "## b\n\ntwo\n\n## c\n\nthree\n", day="2026-02-01"))
            assert (writer.chunk_count(), writer.newest_day()) == (3, "2026-02-01")
            assert (reader.chunk_count(), reader.newest_day()) == (3, "2026-02-01")
            writer.remove_document("memory/2026-02-01.md")
            assert (reader.chunk_count(), reader.newest_day()) == (1, "2026-01-01")


def test_the_writer_keeps_the_count_and_newest_day_for_readers_and_an_older_index_is_summed(tmp_path):
    """A search opens its own connection; it reads the chunk count and newest day the writer kept in meta
    (summing the files table was 0.55 ms a search at 100,000 chunks).  Without them it sums."""
    path = tmp_path / "index.sqlite"

    def kept(index: LocalIndex) -> dict[str, str]:
        return dict(index.db.execute("SELECT key, value FROM meta WHERE key IN ('chunk_total', 'newest_day')"))

    with LocalIndex(path, Identity()) as writer:
        writer.update_document(_doc("memory/2026-01-01.md", "## a\n\none\n\n## b\n\ntwo\n", day="2026-01-01"))
        assert kept(writer) == {"chunk_total": "2", "newest_day": "2026-01-01"}
        writer.update_document(_doc("SOUL.md", "## soul\n\nbe brief\n", "core"))
        writer.remove_document("memory/2026-01-01.md")
        assert kept(writer) == {"chunk_total": "1", "newest_day": ""}
        with LocalIndex(path, Identity(), readonly=True) as reader:
            assert (reader.chunk_count(), reader.newest_day()) == (1, None)
        writer.db.execute("DELETE FROM meta WHERE key IN ('chunk_total', 'newest_day')")  # as an older index
        writer.update_document(_doc("memory/2026-03-01.md", "## c\n\nthree\n", day="2026-03-01"))
        writer.db.execute("DELETE FROM meta WHERE key IN ('chunk_total', 'newest_day')")
        with LocalIndex(path, Identity(), readonly=True) as reader:
            assert (reader.chunk_count(), reader.newest_day()) == (2, "2026-03-01")
    rebuilt = tmp_path / "rebuilt.sqlite"
    rebuild(rebuilt, Identity(), [_doc(f"memory/2026-02-0{d}.md", "## x\n\ny\n", day=f"2026-02-0{d}") for d in (1, 2)])
    with LocalIndex(rebuilt, Identity(), readonly=True) as reader:
        assert kept(reader) == {"chunk_total": "2", "newest_day": "2026-02-02"}


def test_newest_only_ranking_gives_bm25s_order_without_walking_the_posting_lists(crowded_index):
    """Above the newest floor the ranking is sampled_bm25 (layers/local/storage/bm25.py) with counted or
    sampled IDFs: over the crowded index its order is the C bm25()'s over the same rows."""
    from layers.local.storage.index import HEADING_WEIGHT

    expression = parse_query("alpha beta").all_terms
    floor = crowded_index.newest_floor(expression)
    assert floor > 0
    ours = crowded_index.search_text(expression, 50, Filters(), after=floor)
    theirs = crowded_index.db.execute(
        f"SELECT rowid, bm25(chunks_fts, {HEADING_WEIGHT}, 1.0) AS r FROM chunks_fts "
        "WHERE chunks_fts MATCH ? AND rowid > ? ORDER BY r LIMIT 50",
        (expression, floor),
    ).fetchall()
    assert len(ours) == 50 and all(h.chunk_id > floor for h in ours)
    # many rows tie (same words, same length): the 50 best scores, not which of the tied ids, are compared
    assert [-h.score for h in ours] == pytest.approx([r for _, r in theirs], rel=1e-9)


def test_the_write_ahead_log_stays_near_its_limit_under_steady_edits(tmp_path):
    """Issue 51: every index kept a 4 MB -wal beside it (SQLite reuses the log, never shrinks it)."""
    from layers.common.sqlite_wal import WAL_SIZE_LIMIT

    corpus = Corpus(seed=5)
    path = tmp_path / "index.sqlite"
    index = LocalIndex(path, Identity())
    wal = path.with_name(path.name + "-wal")
    biggest = 0
    try:
        for n in range(600):  # ~10 MB of log written: many checkpoints
            index.update_document(_doc(f"memory/2026-11-{n % 5 + 1:02d}.md", corpus.chunk(400)))
            biggest = max(biggest, wal.stat().st_size)
        assert wal.stat().st_size <= 2 * WAL_SIZE_LIMIT, "cut back when the log starts over"
        assert biggest <= 3 * WAL_SIZE_LIMIT, f"the log reached {biggest / 2**20:.1f} MB"
    finally:
        index.close()
