"""layers/local/ranking/budget.py: each hit's passage, and answers cut to max_tokens (passages first, whole sections
where room is left), through a real index and search."""

from __future__ import annotations

import hashlib

from layers.common.textcost import estimate_tokens
from layers.local.ranking.budget import passage_span
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
        assert only["text"] == "- 13:40 moth up on 10.88.1.11,\n  NFS mounts checked by hand" and only["whole"] is False
        assert "snippet" not in only and tight["budget"]["used"] <= 40

        some = search(index, "moth", mode="fts", max_tokens=200).to_dict()
        given = {r["path"]: r["whole"] for r in some["results"]}
        assert len(given) == 8 and some["budget"]["left_out"] == 0 and some["budget"]["used"] <= 200
        assert given.pop("memory/2026-08-08.md") is False, "the long section: its passage, the room left too small"
        assert all(given.values()), "the short sections fit whole"
        roomy = search(index, "moth", mode="fts", max_tokens=600).to_dict()
        assert all(r["whole"] for r in roomy["results"]) and roomy["budget"]["whole"] == 8
        assert sum(estimate_tokens(r["text"]) for r in roomy["results"]) <= roomy["budget"]["used"] <= 600
