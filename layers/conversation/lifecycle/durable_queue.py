"""The durable write queue, and the L4 write-ahead log: no acknowledged write lives only in memory.

Engram lost queued writes on a lock timeout; here a write is committed to SQLite
(``synchronous=FULL``) before the caller hears anything, so neither SIGKILL nor
a power cut loses it.  Every ``add`` is logged here first (issue 45), whether the
store takes it at once or later: the Edge shard and mem0's history are flushed
seldom (a flush costs 9-40 ms holding the GIL), so this log is what makes an
answered write durable.  A row is in one of three states:

- ``pending`` (0): to be applied by the replay, in write order (a write queued while the
  store was down, or left over by a crash);
- ``claimed`` (1): a live request is applying it itself (the replay leaves it alone);
- ``applied`` (2): in the store, not yet flushed there: removed by the next checkpoint
  (daemon/conversation/checkpoint.py), only once the store has flushed past it.  A row a request
  applied itself stays ``claimed`` on disk and is noted applied in memory (no commit on the
  request's way); a crash turns it pending again like any other.

Opening the log turns every row back to ``pending``: whatever a crash left (applied but not
flushed, claimed but never answered) is applied again, idempotently (deterministic point ids,
layers/conversation/lifecycle/write_ids.py, and a lookup by write_id), before the queue counts as drained.
Every commit is synced (``synchronous=FULL``); a request's own rows change state in memory only,
so an add costs one group-committed sync.

Appends are group-committed (layers/conversation/lifecycle/group_commit.py): concurrent writers share one
fdatasync.  Each entry carries a ``write_id``, its owner's (layers/conversation/lifecycle/write_ids.py).

A write the store refuses (a 4xx, mem0's validation: the request's fault, not
the link's) would block every write behind it for ever; it is moved aside into
a table of its own, kept with the reason, and the queue goes on.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from layers.common.fsutil import create_private_file, private_dirs, tighten_sqlite
from layers.common.sqlite_wal import keep_wal_small
from layers.conversation.lifecycle.group_commit import GroupCommit

PENDING, CLAIMED, APPLIED = 0, 1, 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS writes (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    write_id    TEXT NOT NULL,
    agent_id    TEXT NOT NULL,
    request     TEXT NOT NULL,
    enqueued_at REAL NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    last_error  TEXT NOT NULL DEFAULT '',
    state       INTEGER NOT NULL DEFAULT 0,
    UNIQUE (agent_id, write_id)
);
CREATE TABLE IF NOT EXISTS set_aside (
    seq         INTEGER PRIMARY KEY,
    write_id    TEXT NOT NULL,
    agent_id    TEXT NOT NULL,
    request     TEXT NOT NULL,
    enqueued_at REAL NOT NULL,
    set_aside_at REAL NOT NULL,
    reason      TEXT NOT NULL,
    UNIQUE (agent_id, write_id)
);
"""
_TABLES = ("writes", "set_aside")


def _unique_on_write_id_alone(db: apsw.Connection, table: str) -> bool:
    """True for a table of the first schema, where ``write_id`` was unique across every agent."""
    for _, name, unique, *_ in db.execute(f"PRAGMA index_list({table})").fetchall():
        columns = [row[2] for row in db.execute(f"PRAGMA index_info({name})").fetchall()]
        if unique and columns == ["write_id"]:
            return True
    return False


def _with_states(db: apsw.Connection) -> None:
    """A queue of a version before the write-ahead log: every row it holds is pending (the default)."""
    exists = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'writes'").fetchone()
    columns = [row[1] for row in db.execute("PRAGMA table_info(writes)").fetchall()]
    if exists and "state" not in columns:
        db.execute("ALTER TABLE writes ADD COLUMN state INTEGER NOT NULL DEFAULT 0")


def _owner_scoped(db: apsw.Connection) -> None:
    """Rebuild the tables of a queue whose write ids were global, keeping every row, its order and its seq.

    One transaction (a crash leaves the old file as it was); the AUTOINCREMENT counter is carried
    over so a seq is never handed out twice (``set_aside`` rows keep the seq they had in ``writes``).
    """
    old = [
        t
        for t in _TABLES
        if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (t,)).fetchone()
        and _unique_on_write_id_alone(db, t)
    ]
    if not old:
        return
    with db:
        counter = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'writes'").fetchone()
        for table in old:
            db.execute(f"ALTER TABLE {table} RENAME TO {table}_global_ids")
        db.execute(_SCHEMA)
        for table in old:
            columns = ", ".join(str(row[1]) for row in db.execute(f"PRAGMA table_info({table}_global_ids)").fetchall())
            db.execute(f"INSERT INTO {table}({columns}) SELECT {columns} FROM {table}_global_ids")
            db.execute(f"DROP TABLE {table}_global_ids")
        if counter is not None:
            db.execute("DELETE FROM sqlite_sequence WHERE name = 'writes'")
            db.execute("INSERT INTO sqlite_sequence(name, seq) VALUES ('writes', ?)", (counter[0],))


@dataclass(frozen=True)
class QueuedWrite:
    seq: int
    write_id: str
    agent_id: str
    request: dict
    enqueued_at: float
    attempts: int
    last_error: str


class WriteQueue:
    """A FIFO of pending writes in one SQLite file; safe to share between threads (one lock)."""

    def __init__(self, path: Path) -> None:
        """Nothing is opened yet: a full disk at start must not stop the caller (see :meth:`open`)."""
        self.path = path
        self._db: apsw.Connection | None = None
        self._lock = threading.Lock()
        self._appends: GroupCommit[tuple[str, str, dict, int], tuple[int | None, int]] = GroupCommit(self._append_batch)
        # rows a request applied itself (still claimed on disk): kept here, not written, until the checkpoint
        # trims them; lost in a crash they are only claimed rows, which the next start applies again
        self._applied_here: set[int] = set()
        self.recovered = 0  # rows a crash left applied or claimed, made pending again at open
        self.recovered_upto = 0  # the last of them (seq): the log up to it is applied again before serving

    @property
    def opened(self) -> bool:
        return self._db is not None

    def open(self) -> None:
        """Open (creating) the queue file; every other method does this on first use.

        On failure (a full or read-only disk: ``apsw.FullError``, ``apsw.IOError``,
        ``OSError``) nothing stays half-open and the next call tries again.
        """
        with self._lock:
            self._connection()

    def _connection(self) -> apsw.Connection:
        if self._db is not None:
            return self._db
        # Queued memories may be private: a 0700 directory, and the file made 0600 before
        # SQLite opens it, so the -wal/-shm it creates (with the file's mode) are 0600 too.
        private_dirs(self.path.parent)
        create_private_file(self.path)
        tighten_sqlite(self.path)
        db = apsw.Connection(str(self.path))
        try:
            db.setbusytimeout(5000)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            keep_wal_small(db)  # its -wal stayed at 4 MB beside a 53 KB queue (layers/common/sqlite_wal.py)
            _owner_scoped(db)
            _with_states(db)
            db.execute(_SCHEMA)
            with db:  # what a crash left applied-but-unflushed or claimed is applied again, looked up first
                last = db.execute("SELECT max(seq) FROM writes WHERE state != ?", (PENDING,)).get
                db.execute("UPDATE writes SET state = ?, attempts = attempts + 1 WHERE state != ?", (PENDING, PENDING))
                self.recovered = db.changes()
                self.recovered_upto = last if isinstance(last, int) else 0
            tighten_sqlite(self.path)  # side files an older version left 0644
        except BaseException:
            db.close()
            raise
        self._db = db
        return db

    def put(self, write_id: str, agent_id: str, request: dict) -> bool:
        """Store a write durably, pending; False when ``agent_id``'s ``write_id`` is already logged (a retry)."""
        return self._appends.submit((write_id, agent_id, request, PENDING))[0] is not None

    def log(self, write_id: str, agent_id: str, request: dict) -> tuple[int | None, int]:
        """Log a write durably, claimed by the caller who applies it: ``(seq, pending writes before it)``.

        ``seq`` is None when the write was logged already (a retry).  Returns only once the row is
        synced (group commit: concurrent callers share one fdatasync).
        """
        return self._appends.submit((write_id, agent_id, request, CLAIMED))

    def _append_batch(self, items: Sequence[tuple[str, str, dict, int]]) -> list[tuple[int | None, int]]:
        """One transaction (one sync) for a group of appends: each row's seq (None where it was there
        already) and how many pending rows go before it, read in the same transaction."""
        now = time.time()
        rows: list[tuple[int | None, int]] = []
        with self._lock, self._connection() as db:
            for write_id, agent_id, request, state in items:
                db.execute(
                    "INSERT OR IGNORE INTO writes(write_id, agent_id, request, enqueued_at, state) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (write_id, agent_id, json.dumps(request, ensure_ascii=False), now, state),
                )
                seq = db.last_insert_rowid() if db.changes() > 0 else None
                ahead = db.execute("SELECT count(*) FROM writes WHERE state = 0 AND seq < ?", (seq or 0,)).get
                rows.append((seq, int(ahead) if isinstance(ahead, int) else 0))
        return rows

    def _commit(self, sql: str, rows: list[tuple]) -> None:
        """A change of state, synced like every commit here.

        Never ``synchronous=OFF``, even for a mark a crash could lose safely: a WAL checkpoint run under
        it leaves the database file unsynced, and the WAL restarted after it no longer holds the synced
        rows (an acknowledged write gone in a power cut).  A replayed row's ``applied`` must survive a
        cut anyway: that row is then re-applied before the store serves, as a visible write must be.
        """
        with self._lock, self._connection() as db:
            db.executemany(sql, rows)

    def release(self, seq: int) -> None:
        """A claimed row its caller could not apply (the store is down): pending, for the replay."""
        self._commit("UPDATE writes SET state = ? WHERE seq = ? AND state = ?", [(PENDING, seq, CLAIMED)])

    def applied(self, seqs: list[int], claimed: bool = False) -> None:
        """Rows now in the store, not yet flushed there: the next checkpoint removes them.

        ``claimed``: rows a request applied itself; nothing else would pick them up, so they are only
        noted in memory (no commit on the request's way; after a crash a claimed row is re-applied before
        the store serves).  Pending rows (the replay's) are marked on disk, synced (one commit per replay
        batch): the replay never takes them again, and after a cut they too are re-applied before serving.
        """
        if claimed:
            with self._lock:
                self._applied_here.update(seqs)
            return
        self._commit("UPDATE writes SET state = ? WHERE seq = ?", [(APPLIED, s) for s in seqs])

    def forget(self, seq: int) -> None:
        """Remove a row at once, synced: its write changed nothing to keep (a NOOP: the memory existed)."""
        with self._lock, self._connection() as db:
            db.execute("DELETE FROM writes WHERE seq = ?", (seq,))

    def applied_seqs(self) -> list[int]:
        """Rows applied and waiting for a store flush (a checkpoint takes them before it flushes)."""
        with self._lock:
            rows = self._connection().execute("SELECT seq FROM writes WHERE state = ?", (APPLIED,)).fetchall()
            here = sorted(self._applied_here)
        return [r[0] for r in rows if isinstance(r[0], int)] + here

    def trim(self, seqs: list[int]) -> None:
        """After the store flushed past them: remove these applied rows, synced (once per checkpoint).

        A removal lost to a cut would only replay them (found at their ids), but would hold the start."""
        with self._lock, self._connection() as db:
            db.executemany("DELETE FROM writes WHERE seq = ? AND state != ?", [(s, PENDING) for s in seqs])
            self._applied_here.difference_update(seqs)

    def unflushed(self) -> int:
        """Rows applied or claimed, not yet covered by a store flush (0 after a checkpoint with no request
        in flight)."""
        with self._lock:
            return self._connection().execute("SELECT count(*) FROM writes WHERE state != ?", (PENDING,)).get

    def put_many(self, writes: list[tuple[str, str, dict]]) -> int:
        """Store many ``(write_id, agent_id, request)`` in one commit (an import); how many were new."""
        now = time.time()
        rows = [(w, a, json.dumps(r, ensure_ascii=False), now) for w, a, r in writes]
        with self._lock, self._connection() as db:
            before = db.total_changes()
            db.executemany(
                "INSERT OR IGNORE INTO writes(write_id, agent_id, request, enqueued_at) VALUES (?, ?, ?, ?)", rows
            )
            added = db.total_changes() - before
        return added

    def peek(self, limit: int = 100) -> list[QueuedWrite]:
        """The oldest ``limit`` writes, in the order they were made."""
        with self._lock:
            rows: list[Any] = (
                self._connection()
                .execute(
                    "SELECT seq, write_id, agent_id, request, enqueued_at, attempts, last_error FROM writes "
                    "WHERE state = 0 ORDER BY seq LIMIT ?",
                    (limit,),
                )
                .fetchall()
            )
        return [QueuedWrite(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], r[6]) for r in rows]

    def done(self, write_id: str, agent_id: str) -> None:
        """Remove a row at once (synced): only for a write the store holds flushed (see :meth:`applied`)."""
        with self._lock, self._connection() as db:
            db.execute("DELETE FROM writes WHERE write_id = ? AND agent_id = ?", (write_id, agent_id))

    def done_many(self, writes: list[tuple[str, str]]) -> None:
        """Forget a replayed batch of ``(write_id, agent_id)`` in one commit."""
        with self._lock, self._connection() as db:
            db.executemany("DELETE FROM writes WHERE write_id = ? AND agent_id = ?", writes)

    def set_aside(self, write_id: str, agent_id: str, reason: str) -> bool:
        """Move a write the store refused out of the way, kept with ``reason``; False when it is not queued."""
        with self._lock, self._connection() as db:
            db.execute(
                "INSERT OR REPLACE INTO set_aside(seq, write_id, agent_id, request, enqueued_at, set_aside_at, reason) "
                "SELECT seq, write_id, agent_id, request, enqueued_at, ?, ? FROM writes "
                "WHERE write_id = ? AND agent_id = ?",
                (time.time(), reason, write_id, agent_id),
            )
            moved = db.changes() > 0
            db.execute("DELETE FROM writes WHERE write_id = ? AND agent_id = ?", (write_id, agent_id))
        return moved

    def set_aside_writes(self, limit: int = 100) -> list[dict]:
        """The writes most recently set aside, newest first: which they were (not their text) and why."""
        with self._lock:
            rows = (
                self._connection()
                .execute(
                    "SELECT write_id, agent_id, enqueued_at, set_aside_at, reason FROM set_aside "
                    "ORDER BY set_aside_at DESC, seq DESC LIMIT ?",
                    (limit,),
                )
                .fetchall()
            )
        keys = ("write_id", "agent_id", "enqueued_at", "set_aside_at", "reason")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def set_aside_count(self) -> int:
        with self._lock:
            return self._connection().execute("SELECT count(*) FROM set_aside").get

    def failed(self, write_id: str, agent_id: str, error: str) -> None:
        with self._lock, self._connection() as db:
            db.execute(
                "UPDATE writes SET attempts = attempts + 1, last_error = ? WHERE write_id = ? AND agent_id = ?",
                (error, write_id, agent_id),
            )

    def check_writable(self) -> None:
        """One small real write (the file header's user_version): raises while the disk refuses writes."""
        with self._lock, self._connection() as db:
            version = db.execute("PRAGMA user_version").get
            db.execute(f"PRAGMA user_version = {(version + 1) % 1_000_000}")

    def contains(self, write_id: str, agent_id: str) -> bool:
        """Whether ``agent_id``'s ``write_id`` is queued (another agent's equal write_id is another write)."""
        with self._lock:
            row = (
                self._connection()
                .execute("SELECT 1 FROM writes WHERE write_id = ? AND agent_id = ? AND state = 0", (write_id, agent_id))
                .fetchone()
            )
        return row is not None

    def depth(self) -> int:
        with self._lock:
            return self._connection().execute("SELECT count(*) FROM writes WHERE state = 0").get

    def ahead_of(self, write_id: str, agent_id: str) -> int:
        """How many queued writes go before ``agent_id``'s ``write_id``."""
        with self._lock:
            return (
                self._connection()
                .execute(
                    "SELECT count(*) FROM writes WHERE state = 0 AND seq < "
                    "(SELECT seq FROM writes WHERE write_id = ? AND agent_id = ?)",
                    (write_id, agent_id),
                )
                .get
            )

    def oldest_age_s(self, now: float | None = None) -> float | None:
        with self._lock:
            oldest = self._connection().execute("SELECT min(enqueued_at) FROM writes WHERE state = 0").get
        if oldest is None:
            return None
        return round((time.time() if now is None else now) - oldest, 1)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
