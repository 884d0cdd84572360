"""While vectors were still being built, hybrid search left out the one note holding the query's rare word.

Before: a note written while the embedding worker was busy is in the full-text index at
once but waits for its vector behind the notes of newer days.  Reciprocal-rank fusion
then had it in the lexical list only, while e5 and the companion model each ranked every
embedded note: any note both vector lists held outscored it, the page of 10 filled with
them, and the answer left out the only note with every query word although it said
``matched: all`` (``--mode fts`` found it).  Now a note still waiting for its vector
competes as if the vector lists had ranked it as the lexical one did, and no note that
has every query word is pushed off the page by results only the vectors found.

Real daemon, real llama.cpp model and companion, the note written while 150 others wait
for their vectors.
"""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from daemon.front.daemon_client import DaemonClient
from tests.helpers import FAST, init_root, wait_for

pytestmark = pytest.mark.slow

RARE = "memory/2025-08-05.md"  # older than the 150 notes: embedded after them (newest days go first)
QUESTION = "which rack holds the zephyrine sensor"
TOPICS = (
    "the sensor in rack {n} reports its temperature every minute",
    "the backup of rack {n} finished overnight",
    "the network switch in rack {n} was replaced",
)


def test_the_note_with_the_rare_word_is_in_the_hybrid_answer_before_it_has_its_vector(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, conversation={"enabled": False})
    memory = tmp_path / "workspace" / "memory"
    for day in range(1, 13):
        body = "\n\n".join(topic.format(n=day * 3 + i) for i, topic in enumerate(TOPICS))
        (memory / f"2026-10-{day:02d}.md").write_text(f"# 2026-10-{day:02d}\n\n{body}\n", encoding="utf-8")
    d = daemons(config)
    client = DaemonClient(d.socket, timeout=120, token=d.admin_token())

    def index() -> dict:
        return d.agent("main")["index"]

    def embedded() -> bool:
        now = index()
        return now.get("pending_embeddings", 1) == 0 and now.get("vectors") == now.get("chunks")

    wait_for(embedded, timeout=900, interval=1.0, what=f"every chunk embedded\n{d.log()}")

    # 150 notes queue for their vectors first; the rare word's note, of an older day, comes after them.
    for i in range(150):
        day = date(2026, 3, 1) + timedelta(days=i)
        (memory / f"{day}.md").write_text(f"# cabling {i}\n\nrack {i} sensor cabling checked\n", encoding="utf-8")
    wait_for(lambda: index().get("pending_embeddings", 0) >= 100, timeout=120, what="the new notes queued")
    (memory / "2025-08-05.md").write_text("# 2025-08-05\n\nRack 7 holds the zephyrine sensor now.\n", encoding="utf-8")

    def in_full_text() -> bool:
        return [r["path"] for r in client.search("main", QUESTION, mode="fts")["results"]] == [RARE]

    wait_for(in_full_text, timeout=120, interval=0.2, what="the rare word's note in the full-text index")
    answer = client.search("main", QUESTION, explain=True)  # the default: hybrid when vectors exist
    assert index()["pending_embeddings"] > 0, "every vector was built before the search: nothing was reproduced"

    assert answer["vectors"] == "used" and answer["matched"] == "all", answer
    assert {"vector", "vector:use", "fts"} <= set(answer["lists"]), answer["lists"]
    found = {r["path"]: r["ranks"] for r in answer["results"]}
    assert RARE in found, [(r["path"], r["ranks"]) for r in answer["results"]]
    assert not any(name.startswith("vector") for name in found[RARE]), found[RARE]  # it had no vector yet
    assert answer["results"][0]["path"] == RARE, [(r["path"], r["ranks"]) for r in answer["results"]]
