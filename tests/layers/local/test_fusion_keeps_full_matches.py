"""Hybrid fusion never drops a chunk that has every query term (layers/local/ranking/hybrid_search.py).

Real apsw indexes; the primary model's vectors are chosen here, the companion's are
the real USE model's, as the daemon stores them side by side.
"""

from __future__ import annotations

import numpy as np

from layers.local.models import companion
from layers.local.ranking.hybrid_search import search
from layers.local.storage.index import Document, Identity, LocalIndex

PRIMARY = "gguf:m+units1"
JOINED = f"{PRIMARY}+{companion.COMPANION_ID}"
DIM = 8


def _note(index: LocalIndex, name: str, body: str) -> None:
    index.update_document(Document(f"memory/{name}.md", f"# {name}\n\n{body}\n", name, "daily"))


def _unit(i: int) -> np.ndarray:
    v = np.zeros(DIM, np.float32)
    v[i % DIM] = 1.0
    return v


def _embed_all_but(index: LocalIndex, model: str, skip: str, primary) -> None:
    """Give every pending chunk but those whose text holds ``skip`` its vector(s), as the worker would."""
    pending = [(h, text) for h, text in index.take_pending(1000) if skip not in text]
    use = companion.shared().embed([t for _, t in pending]) if model == JOINED else None
    rows = []
    for i, (h, text) in enumerate(pending):
        vec = primary(text)[None, :]
        rows.append((h, companion.joined(vec, use[i : i + 1]) if use is not None else vec))
    index.store_vectors(model, rows)


def test_the_one_note_with_a_rare_word_is_found_while_its_vector_is_still_being_built(tmp_path):
    """Before: e5 and the companion each ranked every embedded note, so a note both lists hold
    outscored the only note with every term (in the lexical list alone: it had no vector yet),
    and a page of 10 left it out although the answer said ``matched: all``."""
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=JOINED)) as index:
        for i in range(14):
            _note(index, f"2026-10-{i + 1:02d}", f"the sensor in rack {i} reports its temperature every minute")
        _note(index, "2026-11-05", "Rack 7 holds the zephyrine sensor now.")
        _embed_all_but(index, JOINED, "zephyrine", lambda text: _unit(len(text)))
        assert index.pending_count() == 1  # the new note waits for its vector

        answer = search(index, "which rack holds the zephyrine sensor", embed_query=lambda _q: _unit(3), explain=True)
        assert answer.vectors == "used" and {"vector", "vector:use", "fts"} <= set(answer.lists)
        assert answer.matched == "all"
        paths = [r["path"] for r in answer.results]
        assert paths[0] == "memory/2026-11-05.md", answer.results  # the only note with every term, first
        assert answer.results[0]["ranks"] == {"fts": 1}

        fts = search(index, "which rack holds the zephyrine sensor", mode="fts")
        # the full match first; below it, the notes with half the terms or more (issue 29: "fts:any")
        assert fts.results[0]["path"] == "memory/2026-11-05.md" and fts.matched == "all"
        assert all("rack" in r["text"] and "sensor" in r["text"] for r in fts.results[1:])


def test_a_full_match_is_not_pushed_off_the_page_by_results_only_the_vectors_found(tmp_path):
    """Every chunk has its vector, but the matches' are far from the query: beyond the vector
    list's pool, so each is in the lexical list only, behind as many vector-only results."""
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=PRIMARY)) as index:
        for i in range(45):
            _note(index, f"2026-09-{i % 28 + 1:02d}-{i}", f"cabling note {i} for the east hall")
        for i in range(4):
            _note(index, f"2026-10-{i + 1:02d}", f"the quokka firmware was flashed on switch {i}")
        near, far = _unit(0), _unit(1)
        _embed_all_but(index, PRIMARY, "never skip", lambda text: far if "quokka" in text else near)
        assert index.pending_count() == 0

        answer = search(index, "quokka firmware flashed", limit=4, embed_query=lambda _q: near, explain=True)
        assert answer.matched == "all" and answer.vectors == "used"
        paths = [r["path"] for r in answer.results]
        assert sorted(paths) == [f"memory/2026-10-{i + 1:02d}.md" for i in range(4)], answer.results
