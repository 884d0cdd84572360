"""SQLite's write-ahead log kept near 1 MB: checkpointed often, cut back when it starts over.

SQLite checkpoints a WAL every 1,000 pages and then reuses it from its start, but never shrinks
the file: every database the daemon writes kept a ~4 MB ``-wal`` beside it for good (measured in
the soak benchmark, issue 51: ten agents' L3 indexes of ~0.17 MB each took 41 MB on disk, 25x a
rebuild; the L4 write queue's 53 KB file had a 4 MB log).  Checkpointed every 256 pages and
truncated to 1 MB whenever it starts over, the log stays near 1 MB; a checkpoint copies at most
1 MB at a time, so the writer's pauses get shorter, not longer.
"""

from __future__ import annotations

from typing import Any

WAL_CHECKPOINT_PAGES = 256
WAL_SIZE_LIMIT = 1024 * 1024


def keep_wal_small(db: Any) -> None:
    """For a connection that writes (apsw or sqlite3): the settings are the connection's own."""
    db.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
    db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
