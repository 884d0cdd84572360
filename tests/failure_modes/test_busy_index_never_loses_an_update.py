"""A busy index (another connection holds, or keeps taking, its write lock) never loses an update.

Before: an edit written while another connection held the index's write lock
failed with ``apsw.BusyError: database is locked`` ("listener failed") and the
edit stayed unsearchable until the next reconcile, minutes later.  Two ways
there: a lock held longer than the busy timeout, and a writer (the embedding
worker storing vectors) committing between the read and the write of an
update, which SQLite answers with SQLITE_BUSY at once, without waiting.

Here a real second apsw connection does both to the main agent's index while
edits go through the real daemon; reconcile is pushed out of reach, so only the
edit flow itself can make them searchable.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import apsw

from layers.local.storage.index import Filters, open_for_reading
from tests.helpers import FAST, init_root, wait_for

EDITS = 6


def _index_path(root: Path) -> Path:
    return root / "agents" / "main" / "memstrata" / "index.sqlite"


def _searchable(index_path: Path, markers: list[str]) -> list[str]:
    """The markers not (yet) found in the index file itself."""
    with open_for_reading(index_path) as index:
        return [m for m in markers if not index.search_text(f'"{m}"', 1, Filters())]


def _write_edits(ws: Path, tag: str) -> list[str]:
    markers = []
    for i in range(EDITS):
        marker = f"zq{tag}{i:02d}marker"
        (ws / "memory" / f"2026-03-{i + 1:02d}-{tag}.md").write_text(f"# {tag} {i}\n\n{marker} 忙碌的索引\n")
        markers.append(marker)
        time.sleep(0.25)  # separate settles, so each lands in its own loop turn
    return markers


def _churn(index_path: Path, stop: threading.Event) -> int:
    """Commit small writes back to back, as the embedding worker does between an update's read and write."""
    db = apsw.Connection(str(index_path))
    db.setbusytimeout(5000)
    commits = 0
    try:
        while not stop.is_set():
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT OR REPLACE INTO meta VALUES('test-churn', ?)", (str(commits),))
            db.execute("COMMIT")
            commits += 1
            time.sleep(0.001)
    finally:
        db.close()
    return commits


def test_edits_under_a_held_and_a_churning_write_lock_all_become_searchable(tmp_path, daemons):
    config = init_root(
        tmp_path,
        watch={**FAST["watch"], "reconcile_interval_s": 3600},
        git=FAST["git"],
        vectors={"backend": "off"},
    )
    ws = tmp_path / "workspace"
    index_path = _index_path(tmp_path)
    d = daemons(config)
    wait_for(index_path.exists, what="main index")

    # 1. A write lock held well past the daemon's busy timeout.
    holder = apsw.Connection(str(index_path))
    holder.execute("BEGIN IMMEDIATE")
    try:
        held = _write_edits(ws, "held")
        time.sleep(7)  # longer than any busy timeout: several attempts meet the lock
        assert _searchable(index_path, held) == held, "nothing can be written while the lock is held"
        index = d.agent("main")["index"]
        assert index["queued_updates"] == EDITS and "database is locked" in (index["error"] or ""), index
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    wait_for(lambda: not _searchable(index_path, held), timeout=30, what="held-back edits searchable after release")

    # 2. Another writer committing back to back while edits are written.
    stop = threading.Event()
    churner = threading.Thread(target=_churn, args=(index_path, stop))
    churner.start()
    try:
        churned = _write_edits(ws, "churn")
        wait_for(lambda: not _searchable(index_path, churned), timeout=30, what="edits searchable under churn")
    finally:
        stop.set()
        churner.join()

    log = d.log()
    assert "listener failed" not in log, log
    assert "kept queued" in log, "the held lock was met and retried"
    index = d.agent("main")["index"]
    assert index["queued_updates"] == 0 and index["error"] is None, index
