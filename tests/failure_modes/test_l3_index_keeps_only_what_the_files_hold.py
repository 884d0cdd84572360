"""Under steady edits the L3 index grew with every save and counted work that would never be done.

Before (issue 51): after 25 minutes of a fleet's load, ``status`` said 349 chunks were "waiting for
vectors", a number that only grew and survived a restart, and the index stored 2,195 vectors for
270 live chunks.  A chunk replaced while the worker embedded it got its vector stored anyway, and
its items queued: a job no chunk would ever take.  A replaced chunk's vector was never deleted.
Now the vectors and jobs of a text leave with its last chunk, and a vector brought back for a
chunk that is gone is dropped: after 200 edits of three files under a running daemon the index
holds one vector per live chunk text and no job, also after a restart.

Real daemon; the embedder is the labelled stand-in (tests/stand_in_embedder.py), slowed so that
files change while their chunks are being embedded.
"""

from __future__ import annotations

import time

import apsw
import pytest

from tests.helpers import FAST, init_root, wait_for
from tests.stand_in_embedder import StandInEmbedder

pytestmark = pytest.mark.slow

EDITS = 200
FILES = ("MEMORY.md", "memory/2026-12-01.md", "memory/2026-12-02.md")


def _note(rel: str, n: int) -> str:
    """A section with items (each embedded after the whole chunk), and one that changes every third edit."""
    return (
        f"# {rel}\n\nnotes, edit {n}\n\n"
        f"- the water pump number {n} was moved to the north shed last week\n"
        f"- the rain tank number {n} needs a new filter before the rains come\n\n"
        f"## standing\n\nthe valve was checked {n // 3} times\n"
    )


def _rows(index_path: str) -> dict[str, int]:
    with apsw.Connection(index_path, flags=apsw.SQLITE_OPEN_READONLY) as db:
        one = lambda sql: db.execute(sql).fetchone()[0]  # noqa: E731
        return {
            "live": one("SELECT count(DISTINCT hash) FROM chunks"),
            "vectors": one("SELECT count(*) FROM vectors"),
            "codes": one("SELECT count(*) FROM codes"),
            "jobs": one("SELECT count(*) FROM pending") + one("SELECT count(*) FROM pending_items"),
        }


def test_200_edits_leave_one_vector_per_live_chunk_and_no_job(tmp_path, daemons):
    embedder = StandInEmbedder(delay_s=0.3)
    try:
        config = init_root(tmp_path, **FAST, conversation={"enabled": False})
        env = embedder.configure(config)
        workspace = tmp_path / "workspace"
        d = daemons(config, env=env)
        for n in range(EDITS):
            rel = FILES[n % len(FILES)]
            (workspace / rel).write_text(_note(rel, n), encoding="utf-8")
            time.sleep(0.25)  # past the watcher's debounce: each save indexed, many while a chunk is embedded

        def settled() -> dict | None:
            index = d.agent("main")["index"]
            written = all(
                f"edit {EDITS - 1 - i}" in (workspace / FILES[(EDITS - 1 - i) % 3]).read_text() for i in range(3)
            )
            done = written and index.get("queued_updates") == 0 and index.get("pending_embeddings") == 0
            return index if done and index.get("vectors") == index.get("chunks") else None

        index = wait_for(settled, timeout=300, interval=0.5, what=f"every edit indexed and embedded\n{d.log()}")
        rows = _rows(index["path"])
        print(
            f"\nafter {EDITS} edits: {rows['vectors']} vectors stored for {rows['live']} live chunk texts "
            f"(ratio {rows['vectors'] / rows['live']:.2f}), {rows['jobs']} embedding jobs; "
            f"{embedder.calls} embedding calls"
        )
        assert rows == {"live": rows["live"], "vectors": rows["live"], "codes": rows["live"], "jobs": 0}, rows
        assert embedder.calls > 20, "the worker embedded while the files changed"
        assert d.stop() == 0
        again = daemons(config, env=env)
        index = again.agent("main")["index"]
        assert index["pending_embeddings"] == 0, index
        assert _rows(index["path"]) == rows
    finally:
        embedder.close()
