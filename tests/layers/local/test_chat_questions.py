"""English questions over chat notes (issue 29): word forms, names in every turn, the turn that answers.

Real apsw indexes of notes shaped as the chat set's (bench/recall_set_chat): one list item per turn,
``- **Name:** text``, the two speakers' names in every note.
"""

from __future__ import annotations

from layers.local.ranking.hybrid_search import search
from layers.local.storage.index import Document, Identity, LocalIndex

FILLER = [
    "- **Theo:** Hey Maya! How was your week?",
    "- **Maya:** Hi Theo! Busy, the usual. How is work?",
    "- **Theo:** Fine, lots of meetings. Talk soon, Maya.",
]


def _chat(index: LocalIndex, day: str, turns: list[str]) -> None:
    text = f"# {day} — chat between Maya and Theo\n\n" + "\n".join(turns) + "\n"
    index.update_document(Document(f"memory/{day}.md", text, day, "daily", day))


def _memory(index: LocalIndex) -> None:
    for i in range(24):
        _chat(index, f"2025-{1 + i // 2:02d}-{1 + 14 * (i % 2):02d}", FILLER)
    _chat(index, "2026-01-10", [*FILLER[:2], "- **Maya:** I signed up for a pottery class at Clay Commons!", FILLER[2]])
    _chat(index, "2026-01-20", [*FILLER[:2], "- **Theo:** We adopted a greyhound and named him Rocket.", FILLER[2]])


def test_a_speakers_name_in_every_note_decides_nothing_and_the_answer_is_the_turn_that_holds_it(tmp_path):
    with LocalIndex(tmp_path / "i.sqlite", Identity()) as index:
        _memory(index)
        answer = search(index, "Where did Maya sign up for pottery classes?", mode="fts")
        first = answer.results[0]
        assert first["path"] == "memory/2026-01-10.md"
        assert first["focus"] == [5, 5]  # the turn, not the greeting that names Maya
        assert answer.matched == "all"  # "maya" (in every note) was not required


def test_word_forms_match_name_named_adopt_adopted(tmp_path):
    with LocalIndex(tmp_path / "i.sqlite", Identity()) as index:
        _memory(index)
        answer = search(index, "What did Theo name the greyhound they adopt?", mode="fts")
        assert answer.results[0]["path"] == "memory/2026-01-20.md" and answer.matched == "all"
        assert answer.results[0]["focus"] == [5, 5]
        assert "**adopted**" in answer.results[0]["snippet"] and "**named**" in answer.results[0]["snippet"]
