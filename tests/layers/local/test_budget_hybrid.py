"""A budgeted hybrid answer (layers/local/ranking/hybrid_search.py, issue 50): the lexical first place survives
the cut, and a chunk only the vectors found is handed out as its item nearest the question.

Real apsw indexes; the vectors are chosen here, stored as the embedding worker stores them (the whole
chunk's, then each item's).
"""

from __future__ import annotations

import numpy as np

from layers.local.ranking.hybrid_search import search
from layers.local.storage.index import Document, Identity, LocalIndex
from layers.local.text.units import item_spans

MODEL = "gguf:m+units1"
DIM = 8


def _unit(i: int) -> np.ndarray:
    v = np.zeros(DIM, np.float32)
    v[i % DIM] = 1.0
    return v


def _note(index: LocalIndex, name: str, body: str) -> None:
    index.update_document(Document(f"memory/{name}.md", f"# {name}\n\n{body}\n", name, "daily", name[:10]))


def _embed(index: LocalIndex, vectors) -> None:
    """Every pending chunk's passages: ``vectors(text, item index or None for the whole)``."""
    rows = []
    for h, text in index.take_pending(1000):
        items = item_spans(text.partition("\n")[2])
        passages = [vectors(text, None)] + ([vectors(text, i) for i in range(len(items))] if len(items) > 1 else [])
        rows.append((h, np.vstack(passages)))
    index.store_vectors(MODEL, rows)


def test_the_lexical_first_place_is_handed_out_under_a_budget(tmp_path):
    """Notes the vectors put first and that share most of the words outrank, fused, the one note holding
    every word (far from the query's vector); cut to a budget of two or three passages it was left out."""
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=MODEL)) as index:
        for i in range(10):  # longer and further from the query: both lists rank them in this order
            _note(index, f"2026-10-{i + 1:02d}", f"- the firmware of switch {i} was flashed" + " and the fans" * i)
        for i in range(35):  # more notes than the vector list's pool of 40: the far note is in none of its places
            _note(index, f"2026-09-{i % 28 + 1:02d}-{i}", f"- cabling note {i} for the east hall")
        _note(index, "2026-11-05", "- the quokka firmware was flashed on switch 7 before the move")
        near, far = _unit(0), _unit(1)

        def vectors(text: str, _item: int | None) -> np.ndarray:
            if "quokka" in text:
                return far
            v = near + _unit(2) * (text.count("fans") / 50 if "firmware" in text else 1)
            return v / np.linalg.norm(v)

        _embed(index, vectors)

        question = "quokka firmware flashed switch"
        free = search(index, question, embed_query=lambda _q: near, explain=True)
        paths = [r["path"] for r in free.results]
        assert free.matched == "all" and paths.index("memory/2026-11-05.md") >= 2, paths  # the fusion outvotes it
        cut = search(index, question, embed_query=lambda _q: near, max_tokens=60).to_dict()
        given = [r["path"] for r in cut["results"]]
        assert "memory/2026-11-05.md" in given[:2], given
        assert [r["path"] for r in search(index, question, embed_query=lambda _q: near).results] == paths, (
            "unbudgeted answers keep the fused order"
        )


def test_a_chunk_only_the_vectors_found_is_handed_out_as_its_nearest_item(tmp_path):
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=MODEL)) as index:
        body = "\n".join(f"- item {i}: the rack row was relabelled and photographed for the record" for i in range(6))
        _note(index, "2026-10-01", body)
        _embed(index, lambda _text, item: _unit(2) if item is None else _unit(3 + item))
        answer = search(index, "where did the kayak go", embed_query=lambda _q: _unit(7), explain=True).to_dict()
        (hit,) = [r for r in answer["results"] if r["path"] == "memory/2026-10-01.md"]
        assert hit["focus"] is None and hit["passage"] == [7, 7], hit  # item 4: the file's line 3 + 4
        assert hit["passage_why"] == "the item nearest the question (vectors)"
