"""A result's confidence: one 0-1 scale for full-text, vector and fused results, and ``min_score`` cutting on it.

The coefficients are measured (bench/bench_calibration.py); these tests pin what the
scale must do whatever they are, and that every path of the search gives it.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from layers.local.ranking import calibration
from layers.local.ranking.hybrid_search import search
from layers.local.storage.index import Document, Identity, LocalIndex


def _doc(path: str, text: str) -> Document:
    return Document(path, text, hashlib.sha256(text.encode()).hexdigest(), "daily", None)


def test_confidence_falls_with_the_rank_and_rises_with_a_full_match_and_the_cosine():
    c = calibration.confidence
    for cosine in (None, 0.8):
        assert 0 < c(10, False, cosine, False) < c(2, False, cosine, False) < c(1, False, cosine, False) < 1
        assert c(3, True, cosine, False) > c(3, False, cosine, False)
    assert c(1, False, 0.9, False) > c(1, False, 0.8, False) > c(1, False, 0.7, False)
    # Chinese questions sit higher on e5's cosine whatever they ask: the same cosine is worth less there
    assert c(1, False, 0.8, True) < c(1, False, 0.8, False)
    assert calibration.is_chinese("显卡服务器在哪") and not calibration.is_chinese("where is the GPU box")


@pytest.fixture
def index(tmp_path):
    model = "hand-made"
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=model)) as index:
        texts = {
            "memory/a.md": "qdrant listens on port 6334 since the move\n",
            "memory/b.md": "the qdrant dashboard is slow\n",
            "memory/c.md": "lunch at the ramen place near the port\n",
            "memory/d.md": "vector database notes, nothing about ports\n",
        }
        for path, text in texts.items():
            index.update_document(_doc(path, text))
        vectors = {
            "qdrant listens": [1.0, 0.0],
            "the qdrant": [0.9, 0.44],
            "lunch at": [0.0, 1.0],
            "vector data": [0.8, 0.6],
        }
        rows = []
        for chunk_hash, text in index.take_pending(10):
            body = text.split("\n")[1]
            (vec,) = [v for start, v in vectors.items() if body.startswith(start)]
            rows.append((chunk_hash, np.array(vec, dtype=np.float32) / np.linalg.norm(vec)))
        index.store_vectors(model, rows)
        yield index


def _query(_text: str) -> np.ndarray:
    return np.array([1.0, 0.0], dtype=np.float32)


@pytest.mark.parametrize("mode", ["fts", "hybrid"])
def test_every_result_has_a_confidence_and_min_score_keeps_those_at_or_above_it(index, mode):
    answer = search(index, "qdrant port", mode=mode, embed_query=_query, calibrated=True)
    scores = [r["confidence"] for r in answer.results]
    assert answer.results and all(0 < s < 1 for s in scores)
    assert answer.results[0]["path"] == "memory/a.md" and scores[0] == max(scores), "the full match, first"
    assert answer.min_score is None
    cut = sorted(scores)[len(scores) // 2]
    kept = search(index, "qdrant port", mode=mode, embed_query=_query, calibrated=True, min_score=cut)
    assert [r["path"] for r in kept.results] == [r["path"] for r in answer.results if r["confidence"] >= cut]
    assert kept.min_score == {"value": cut, "dropped": sum(s < cut for s in scores)}
    assert kept.to_dict()["min_score"] == kept.min_score


def test_the_cosine_counts_only_for_the_model_the_scale_was_measured_on(index):
    """With the measured model (``calibrated``) a result's cosine moves its confidence and is shown with
    ``explain``; with another embedder the same answer has the lexical scale's confidences."""
    measured = search(index, "qdrant port", mode="hybrid", embed_query=_query, calibrated=True, explain=True)
    other = search(index, "qdrant port", mode="hybrid", embed_query=_query, explain=True)
    assert [r["path"] for r in measured.results] == [r["path"] for r in other.results]
    assert all("cosine" in r for r in measured.results)
    by_path = {r["path"]: r for r in measured.results}
    assert by_path["memory/a.md"]["cosine"] == pytest.approx(1.0, abs=1e-4)
    for m, o in zip(measured.results, other.results, strict=True):
        rank = measured.results.index(m) + 1
        full = "fts" in (m.get("ranks") or {}) and measured.matched == "all"
        assert m["confidence"] == round(calibration.confidence(rank, full, m["cosine"], False), 3)
        assert o["confidence"] == round(calibration.confidence(rank, full, None, False), 3)
