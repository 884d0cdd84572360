"""Passages a chunk is embedded as (layers/local/text/units.py), and chunks scored as their best passage."""

from __future__ import annotations

import numpy as np

from layers.local.storage.index import Document, Filters, Identity, LocalIndex
from layers.local.text.units import MIN_ITEM_CHARS, index_model_id, passages


def test_a_chunk_of_several_items_is_embedded_whole_and_item_by_item_each_with_its_heading():
    heading = "2026-10-06 星期二 > 事故：redis-01 内存打满"
    body = (
        "## 事故：redis-01 内存打满\n"
        "- 19:47 api 开始大量返回 500，错误日志里全是 OOM command not allowed。\n"
        "  续行：maxmemory 是 2gb，策略 noeviction。\n"
        "- 永久修复：maxmemory 改为 4gb，策略改为 allkeys-lru，匿名 session 的 TTL 改成 1 天。\n"
        "- 无\n"
    )
    text = f"{heading}\n{body}"
    out = passages(text)
    assert out[0] == text
    assert len(out) == 3 and all(p.startswith(heading + "\n") for p in out[1:])
    assert "续行" in out[1] and "4gb" in out[2] and out[2].endswith("- 无"), "a tiny item joins its neighbour"
    assert "## " not in "".join(out[1:]), "heading lines are carried by the heading path, not repeated"
    assert passages(text, items=False) == [text], "a large index embeds whole chunks only"


def test_a_chunk_of_one_item_is_one_passage():
    assert passages("Deploy\n# Deploy\nQdrant 部署在 6333 端口\n") == ["Deploy\n# Deploy\nQdrant 部署在 6333 端口\n"]
    assert passages("\n- " + "x" * MIN_ITEM_CHARS + "\n") == ["\n- " + "x" * MIN_ITEM_CHARS + "\n"]


def test_the_index_identity_names_the_passage_version():
    assert index_model_id("gguf:e5.gguf:1:e5").startswith("gguf:e5.gguf:1:e5+units")
    assert index_model_id("") == ""


def test_a_chunk_stored_with_several_passage_vectors_scores_as_its_best(tmp_path):
    model = "m"
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=model)) as index:
        for name in ("a", "b"):
            index.update_document(Document(f"memory/{name}.md", f"# {name}\n\nnote {name}\n", name, "daily"))
        pending = {text.split("\n")[-2]: h for h, text in index.take_pending(10)}
        index.store_vectors(
            model,
            [
                (pending["note a"], np.array([[0.6, 0.8], [0.0, 1.0]], dtype=np.float32)),  # whole, one item
                (pending["note b"], np.array([0.8, 0.6], dtype=np.float32)),
            ],
        )
        hits = index.search_vectors(np.array([0.0, 1.0], dtype=np.float32), 10, Filters())
        assert [(h.path, round(h.score, 3)) for h in hits] == [("memory/a.md", 1.0), ("memory/b.md", 0.6)]
