"""A budgeted hybrid answer (layers/local/ranking/hybrid_search.py, issue 50): the lexical first place survives
the cut, and a chunk only the vectors found is handed out as its item nearest the question.

Real apsw indexes; the vectors are chosen here, stored as the embedding worker stores them (the whole
chunk's, then each item's).
"""

from __future__ import annotations

import numpy as np

from layers.common.textcost import estimate_tokens
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


CONVERSATION = """- **Ana:** Did the quokka enclosure ever get finished?
- **Ben:** Not yet, sadly.
- **Ana:** What held it up?
- **Ben:** The council wanted a permit first.
- **Ana:** And after that?
- **Ben:** It finally opened on a rainy Tuesday in May.
""" + "".join(
    f"- **{'Ana' if i % 2 else 'Ben'}:** and then we talked about lunch plans, round {i}\n" for i in range(12)
)


def test_results_only_the_vectors_found_wait_for_the_room_the_matches_leave(tmp_path):
    """Where every term matched, the budget grows the match's passage (the turn that answers is a few turns
    below the one repeating the question) before it hands out results only the vectors found (issue 50)."""
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=MODEL)) as index:
        _note(index, "2026-05-20", CONVERSATION)
        for i in range(6):
            _note(index, f"2026-04-{i + 1:02d}", f"- the reptile house got a fresh coat of green paint, wall {i}")
        near = _unit(0)

        def vectors(text: str, _item: int | None) -> np.ndarray:
            if "quokka" in text:
                return near
            v = near + _unit(2) * (0.2 + int(text.split("wall ")[1][0]) / 50)  # the walls in order, below the match
            return v / np.linalg.norm(v)

        _embed(index, vectors)
        question = "quokka enclosure"
        free = search(index, question, embed_query=lambda _q: near, explain=True).to_dict()
        paths = [r["path"] for r in free["results"]]
        assert free["matched"] == "all" and paths[0] == "memory/2026-05-20.md" and len(paths) == 3, paths
        match = free["results"][0]
        assert match["passage"] == [3, 5], "the turn, the reply and Ana's next turn"

        header = f"{match['path']}:{match['lines'][0]} {match['heading']}\n"
        answer = CONVERSATION.split("\n")[:6]
        room = estimate_tokens(header + "\n".join(answer)) + 8  # the match down to its answer, not every wall too
        cut = search(index, question, embed_query=lambda _q: near, max_tokens=room).to_dict()
        first = cut["results"][0]
        assert first["path"] == "memory/2026-05-20.md" and "opened on a rainy Tuesday" in first["text"], cut
        assert cut["budget"]["used"] <= room

        roomy = search(index, question, embed_query=lambda _q: near, max_tokens=2000).to_dict()
        assert [r["path"] for r in roomy["results"]] == paths, "with room for all, every result, in the fused order"
        assert roomy["results"][0]["whole"], "the match given whole before the walls' passages"


def test_a_relaxed_lexical_first_place_goes_in_with_the_vectors_first_places(tmp_path):
    """A question with a word no note uses matches only some terms: the relaxed list weighs half, and notes
    the vectors put first outvote its first place.  A budget of two passages holds the fusion's first and
    the lexical first (issue 50)."""
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=MODEL)) as index:
        _note(index, "2026-03-05", "- the cat knocked my monstera off the shelf again")
        for i in range(30):
            _note(
                index, f"2026-02-{i % 28 + 1:02d}-{i}", f"- a walk along the river, the ducks were out, number {i:02d}"
            )
        near = _unit(0)

        def vectors(text: str, _item: int | None) -> np.ndarray:
            weight = 1.0 if "monstera" in text else int(text.split("number ")[1][:2]) / 50
            v = near + _unit(2) * weight  # the walks in order, the note about the cat below them all
            return v / np.linalg.norm(v)

        _embed(index, vectors)
        question = "which houseplant did the cat knock off the shelf"
        free = search(index, question, embed_query=lambda _q: near, explain=True).to_dict()
        paths = [r["path"] for r in free["results"]]
        assert free["matched"] == "some" and "memory/2026-03-05.md" in paths[2:], paths  # the vectors outvote it
        two = max(estimate_tokens(f"{r['path']}:{r['lines'][0]} {r['heading']}\n{r['text']}") for r in free["results"])
        cut = search(index, question, embed_query=lambda _q: near, max_tokens=2 * two + 2).to_dict()
        given = [r["path"] for r in cut["results"]]
        assert given[:2] == [paths[0], "memory/2026-03-05.md"], given
        assert [r["path"] for r in search(index, question, embed_query=lambda _q: near).results] == paths, (
            "unbudgeted answers keep the fused order"
        )


def test_a_relaxed_match_of_the_rare_words_is_not_thinned_out(tmp_path):
    """No note has every word of the question; the one holding its two rare words ("severance", "Ledgerly")
    is BM25's first.  The relaxed list keeps the hits that hold half of the question's terms, weighed as
    BM25 weighs them: counted, that note (two of five) was left to the vectors, which rank it last."""
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=MODEL)) as index:
        _note(index, "2026-09-03", "- Ledgerly gave everyone eight weeks of severance")
        for i in range(10):  # the common words, three of the five: they held half by count
            _note(index, f"2026-08-{i + 1:02d}", f"- how much did the parking pay get us, lot {i}")
        for i in range(20):
            _note(index, f"2026-07-{i + 1:02d}", f"- a walk by the river, the ducks were out, number {i:02d}")
        near = _unit(0)

        def vectors(text: str, _item: int | None) -> np.ndarray:
            v = near + _unit(2) * (2.0 if "severance" in text else 0.5)
            return v / np.linalg.norm(v)

        _embed(index, vectors)
        question = "how much severance pay did we get from Ledgerly"
        answer = search(index, question, embed_query=lambda _q: near, explain=True).to_dict()
        paths = [r["path"] for r in answer["results"]]
        assert answer["matched"] == "some" and "memory/2026-09-03.md" in paths[:5], paths  # of ten
        (hit,) = [r for r in answer["results"] if r["path"] == "memory/2026-09-03.md"]
        assert hit["ranks"].get("fts") == 1, hit["ranks"]
        lexical = search(index, question, mode="fts").to_dict()
        assert lexical["results"][0]["path"] == "memory/2026-09-03.md", "BM25 ranks it first"


def test_a_question_about_a_named_day_is_answered_by_that_day_s_note_from_its_first_item(tmp_path):
    """A question like "What happened on 2026-10-03?" names a day and nothing the day's note says: the note
    answers from its first item, as full-text answers it, not from the item the vectors guess nearest to
    "what happened" (bench/recall_set q095, q096, q104: hybrid gave another item of the right note)."""
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=MODEL)) as index:
        items = [f"the core switch rebooted at 03:10, {i} of four, and the rack row was photographed" for i in range(4)]
        _note(index, "2026-10-03", "\n".join(f"- {item}" for item in items))
        for day in ("2026-10-01", "2026-10-02", "2026-10-04"):
            _note(index, day, "- the east hall cabling was checked\n- nothing else happened")
        _embed(index, lambda text, item: _unit(2) if item is None else _unit(3 + item) if "03:10" in text else _unit(1))
        question = "What happened on 2026-10-03?"
        for budget in (None, 60):
            answer = search(index, question, embed_query=lambda _q: _unit(5), max_tokens=budget, explain=True).to_dict()
            (hit,) = [r for r in answer["results"] if r["path"] == "memory/2026-10-03.md"]
            assert hit["passage"][0] <= 3 <= hit["passage"][1] and hit["passage_why"].startswith("the first item"), hit
            assert "date" in answer["lists"] and "vector@date" in answer["lists"], answer["lists"]
        undated = search(index, "where did the kayak go", embed_query=lambda _q: _unit(5), explain=True).to_dict()
        (hit,) = [r for r in undated["results"] if r["path"] == "memory/2026-10-03.md"]
        assert hit["passage"] == [5, 5] and hit["passage_why"] == "the item nearest the question (vectors)", hit
