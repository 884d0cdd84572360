"""layers/local/ranking/budget.py: each hit's passage, and answers cut to max_tokens (passages first, whole sections
where room is left), through a real index and search."""

from __future__ import annotations

import hashlib

from layers.common.textcost import estimate_tokens
from layers.local.ranking.budget import answer_span, passage_span
from layers.local.ranking.hybrid_search import search
from layers.local.storage.index import Document, Identity, LocalIndex

NOTE = """## 迁移 2026-08-08
- 08:00 moth powered down, racks unbolted
- 13:40 moth up on 10.88.1.11,
  NFS mounts checked by hand
- 19:30 all green: Slurm, MLflow, Grafana, restic.
""" + "".join(f"- filler line {i} about cables and labels and the van\n" for i in range(30))


def test_a_passage_is_the_item_with_its_continuation_lines():
    lines = NOTE.split("\n")
    assert passage_span(NOTE, 3) == (2, 3), "the continuation line belongs to the item"
    assert passage_span(NOTE, 2) == (2, 3)
    assert passage_span(NOTE, None) == (1, 1), "no focus: the first item under the heading"
    assert lines[4].startswith("- 19:30") and passage_span(NOTE, 4) == (4, 4)


def _index(tmp_path) -> LocalIndex:
    index = LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=""))
    for day in range(1, 9):
        text = NOTE if day == 8 else f"## day {day}\n- moth ran the nightly eval, round {day}\n"
        path = f"memory/2026-08-0{day}.md"
        index.update_document(Document(path, text, hashlib.sha256(text.encode()).hexdigest(), "daily", path[7:17]))
    return index


def test_every_hit_names_its_passage_and_a_budget_gives_passages_first_then_whole_sections(tmp_path):
    with _index(tmp_path) as index:
        free = search(index, "moth 10.88.1.11", mode="fts").to_dict()
        top = free["results"][0]
        assert top["path"] == "memory/2026-08-08.md" and top["passage"] == [3, 4]
        assert free["budget"] is None

        tight = search(index, "moth 10.88.1.11", mode="fts", max_tokens=40).to_dict()
        (only,) = tight["results"]
        assert only["text"].startswith("- 13:40 moth up on 10.88.1.11,\n  NFS mounts checked by hand\n")
        assert only["whole"] is False and only["passage"] == [3, 5], "room left grows the passage by the next line"
        assert "snippet" not in only and tight["budget"]["used"] <= 40

        some = search(index, "moth", mode="fts", max_tokens=200).to_dict()
        given = {r["path"]: r["whole"] for r in some["results"]}
        assert len(given) == 8 and some["budget"]["left_out"] == 0 and some["budget"]["used"] <= 200
        assert given.pop("memory/2026-08-08.md") is False, "the long section: its passage, the room left too small"
        assert all(given.values()), "the short sections fit whole"
        roomy = search(index, "moth", mode="fts", max_tokens=600).to_dict()
        assert all(r["whole"] for r in roomy["results"]) and roomy["budget"]["whole"] == 8
        assert sum(estimate_tokens(r["text"]) for r in roomy["results"]) <= roomy["budget"]["used"] <= 600


CHAT = """# 2022-03-05 — chat between Maya and Theo

- **Theo:** How's Portland treating you?
- **Maya:** I signed up for a pottery class at a little studio called Clay Commons.
- **Theo:** That's awesome. Have you made anything yet?
- **Maya:** One very lopsided mug.
- **Theo:** I'd drink out of a leaning mug.
"""


def test_in_a_conversation_the_passage_runs_on_to_the_reply():
    """The turn that repeats the question's words is not the answer: the reply after it is (issue 50)."""
    first, last, why = answer_span(CHAT, 3, "What was the first thing Maya made in her pottery class?")
    assert (first, last) == (3, 5) and "Maya's next turn" in why, "the named speaker's own next turn"
    first, last, why = answer_span(CHAT, 4, "Has Maya made anything yet?")
    assert (first, last) == (4, 5) and "reply of Maya" in why, "another's turn: on to the named speaker's reply"
    assert answer_span(CHAT, 0, "pottery")[:2] == (2, 4), "a heading is no passage: the first turn, then on"
    assert answer_span(NOTE, 2, "moth")[:2] == (2, 3), "no conversation: the item"


def test_under_a_budget_the_best_passages_take_in_the_item_after_them(tmp_path):
    """In notes the answer is often the item after the one repeating the question's words: the best
    NEXT_ITEM_TOP results take it in from the start, before lower results' passages use the room."""
    from layers.local.ranking.budget import NEXT_ITEM_TOP, with_next_item

    note = "## dns\n- 09:00 the DNS server moved racks\n- 09:05 now at 10.0.0.{day}\n- 12:00 lunch with the team\n"
    assert with_next_item(note, (1, 1)) == (1, 2) and with_next_item(note, (3, 3)) == (3, 3)
    assert with_next_item(CHAT, (2, 2)) == (2, 2), "a turn: the reply is answer_span's to choose"
    index = LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=""))
    with index:
        for day in range(1, 8):
            text, path = note.format(day=day), f"memory/2026-08-0{day}.md"
            index.update_document(Document(path, text, hashlib.sha256(text.encode()).hexdigest(), "daily", path[7:17]))
        free = search(index, "DNS server moved", mode="fts").to_dict()["results"]
        assert len(free) == 7
        # room for every result's focus line and a few tokens more: too little to grow the best one by its next
        # item once all seven are in
        one_line = sum(
            estimate_tokens(f"{r['path']}:{r['lines'][0]} {r['heading']}\n{r['text'].split(chr(10))[1]}") for r in free
        )
        tight = search(index, "DNS server moved", mode="fts", max_tokens=one_line + 4, explain=True).to_dict()
        given = tight["results"]
        for result in given[:NEXT_ITEM_TOP]:
            assert "now at 10.0.0." in result["text"], result
            assert result["passage_why"].endswith("and the item after it"), result["passage_why"]
        assert all("now at" not in r["text"] for r in given[NEXT_ITEM_TOP:]), "only the best take it in"
        assert tight["budget"]["used"] <= one_line + 4
