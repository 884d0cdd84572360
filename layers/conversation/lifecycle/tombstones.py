"""Whose a deleted memory was, so its history stays as private as the memory itself.

mem0's history store keeps a memory's ADD/UPDATE/DELETE events after the memory
is gone, but nothing in them says who owned it or where it was placed.  Without
that, a deleted private memory's history (old text included) could only be
shown to everyone or to no one.  On every delete the broker records the
memory's owner and placement here; a later ``history`` is then checked against
the same visibility rule the memory had while it existed.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path


class Tombstones:
    """A small SQLite table: memory id → owner, visibility, project (stdlib sqlite3, one file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
            db.execute(
                "CREATE TABLE IF NOT EXISTS deleted (memory_id TEXT PRIMARY KEY, agent_id TEXT, "
                "visibility TEXT, project_id TEXT, deleted_at TEXT)"
            )
            self._db = db
        return self._db

    def record(self, memory: dict, deleted_at: str) -> None:
        with self._lock:
            self._connection().execute(
                "INSERT OR REPLACE INTO deleted VALUES (?, ?, ?, ?, ?)",
                (memory["id"], memory.get("agent_id"), memory.get("visibility"), memory.get("project_id"), deleted_at),
            )

    def lookup(self, memory_id: str) -> dict | None:
        """The deleted memory's owner and placement, in a memory's shape (for ``may_read``); None if unknown."""
        with self._lock:
            row = (
                self._connection()
                .execute("SELECT agent_id, visibility, project_id FROM deleted WHERE memory_id = ?", (memory_id,))
                .fetchone()
            )
        if row is None:
            return None
        return {"id": memory_id, "agent_id": row[0], "visibility": row[1], "project_id": row[2]}

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
