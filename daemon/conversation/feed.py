"""The hub's change feed (issue 48): which memory ids changed, in order, so that each spoke keeps a replica.

A durable SQLite file (``state_dir/fleet/feed.sqlite``, 0600) with one row per memory id a change
touches: ``seq`` (monotonic), ``memory_id``, ``at``.  It holds ids only: a spoke is served each id's
*current* state (daemon/api/peer_feed.py), so a row says "look at this memory again", never what
changed, and a state read after its row is the truth for every change before it.

Never missing a change rests on two rules:

- a row is written (synced) *before* its change can become visible: the store calls :meth:`begin`
  with the ids it is about to change (an add's point id is derived in advance) and :meth:`end` once
  the change is done or failed (layers/conversation/adapters/store.py's ``feed``);
- a spoke is served rows only up to :meth:`settled`: the highest seq below which every change has
  ended.  A row still in flight holds back every row after it, so a spoke can never move past a change
  whose state it did not read after the change.  At start nothing is in flight: a change recorded
  before a crash either happened or not, and the state served is what the store holds.

A change whose ids are known only once it is made (an inferred add: mem0 and its LLM pick them) cannot
be recorded before it: :meth:`begin_unknown` records (synced) that such a change is under way, and
:meth:`end` with its ids appends their rows and clears that record in one transaction.  A record still
there at open means a crash came between the two, with a change the rows never named: a new epoch is
drawn, so every spoke rebuilds from a snapshot rather than miss it.

Whole-collection events (a restore from a backup, an offline maintenance run on the store) draw a new
random ``epoch``: a spoke whose epoch differs rebuilds its replica from a snapshot.  The epoch a spoke
sees also carries a fingerprint of what its host's agents may read (their enrolment and their projects),
computed by the peer route, so a change of either rebuilds that spoke's replica too.

Rows older than ``fleet.feed_retention_days`` or beyond the newest ``fleet.feed_max_entries`` are
compacted; ``horizon`` is the highest seq removed: a spoke asking from before it is told to rebuild.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import apsw

log = logging.getLogger(__name__)

COMPACT_EVERY = 1000  # rows appended between two compactions (and one at open)


def feed_path(state_dir: Path) -> Path:
    return state_dir / "fleet" / "feed.sqlite"


class ChangeFeed:
    """The feed file, appended to from the store's thread, read from the peer API's threads."""

    def __init__(self, path: Path, retention_s: float = 7 * 86400, max_entries: int = 100_000) -> None:
        self.path = path
        self.retention_s = retention_s
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._in_flight: dict[int, int] = {}  # token → the lowest seq of its rows
        self._unknown: dict[int, int] = {}  # token → its row in ``unknown`` (a change whose ids come after it)
        self._tokens = 0
        self._appended = 0
        self.fed: dict[str, tuple[int, float]] = {}  # host → (the seq its replica asked after, when): status
        try:
            self._open()
        except apsw.Error as exc:  # the daemon says L4 cannot start, naming the file
            raise OSError(f"the change feed {path} cannot be opened: {exc}") from None

    def _open(self) -> None:
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
        os.chmod(path, 0o600)
        self._db = apsw.Connection(str(path))
        self._db.setbusytimeout(5000)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # a row is on disk before its change can be seen
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, memory_id TEXT NOT NULL, "
            "at REAL NOT NULL)"
        )
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self._db.execute("CREATE TABLE IF NOT EXISTS unknown (id INTEGER PRIMARY KEY, at REAL NOT NULL)")
        if self._meta("epoch") is None:
            self._set_meta("epoch", secrets.token_hex(8))
        row = self._db.execute("SELECT COUNT(*) FROM unknown").fetchone()
        unnamed = int(str(row[0])) if row is not None else 0
        if unnamed:  # a crash between an inferred add and its rows: its memories may be on no spoke
            log.warning(
                "%d change(s) of the store (inferred adds) were under way at a crash with their ids not yet in "
                "the change feed: a new epoch, so every spoke rebuilds its replica from a snapshot",
                unnamed,
            )
            with self._db:
                self._set_meta("epoch", secrets.token_hex(8))
                self._db.execute("DELETE FROM unknown")
        self._seq = self._max_seq()
        self.compact()

    # ------------------------------------------------------------ writing (the store's thread)

    def begin(self, ids: Sequence[str]) -> int:
        """Record ``ids`` (synced) before their change; the token to give :meth:`end` once it is done."""
        now = time.time()
        with self._lock:
            self._tokens += 1
            token = self._tokens
            if not ids:
                return token
            with self._db:
                for memory_id in ids:
                    self._db.execute("INSERT INTO changes (memory_id, at) VALUES (?, ?)", (str(memory_id), now))
            first = self._seq + 1
            self._seq = self._max_seq()
            self._in_flight[token] = first
            self._appended += len(ids)
            due = self._appended >= COMPACT_EVERY
        if due:
            self.compact()
        return token

    def begin_unknown(self) -> int:
        """Record (synced) that a change whose ids are not known yet is under way; :meth:`end` names them."""
        with self._lock:
            self._tokens += 1
            token = self._tokens
            with self._db:
                self._db.execute("INSERT INTO unknown (at) VALUES (?)", (time.time(),))
            self._unknown[token] = self._db.last_insert_rowid()
            return token

    def end(self, token: int, ids: Sequence[str] | None = ()) -> None:
        """The change of ``token`` is done (or failed: the state served is the store's either way).

        ``ids``: the ids a change begun by :meth:`begin_unknown` touched, recorded now (after the change:
        a spoke reads their state after these rows), with the record of it under way cleared in the same
        transaction.  None: it failed, and what it touched is not known (an inferred add can fail between
        two of its writes): the record stays, and the next open draws a new epoch."""
        with self._lock:
            self._in_flight.pop(token, None)
            unknown = self._unknown.pop(token, None)
            if unknown is None or ids is None:
                return
            now = time.time()
            with self._db:
                for memory_id in ids:
                    self._db.execute("INSERT INTO changes (memory_id, at) VALUES (?, ?)", (str(memory_id), now))
                self._db.execute("DELETE FROM unknown WHERE id = ?", (unknown,))
            self._seq = self._max_seq()
            self._appended += len(ids)

    def new_epoch(self) -> str:
        """The whole collection changed (a restore): every spoke rebuilds its replica."""
        epoch = secrets.token_hex(8)
        with self._lock:
            self._set_meta("epoch", epoch)
        return epoch

    def compact(self) -> None:
        """Drop rows older than the retention or beyond ``max_entries`` (the horizon moves up to them)."""
        with self._lock:
            self._appended = 0
            cut = self._seq - self.max_entries
            row = self._db.execute(
                "SELECT MAX(seq) FROM changes WHERE at < ?", (time.time() - self.retention_s,)
            ).fetchone()
            old = int(row[0]) if row is not None and row[0] is not None else 0
            limit = max(cut, old)
            if self._in_flight:
                limit = min(limit, min(self._in_flight.values()) - 1)
            if limit > self.horizon_locked():
                with self._db:
                    self._db.execute("DELETE FROM changes WHERE seq <= ?", (limit,))
                    self._set_meta("horizon", str(limit))

    # ------------------------------------------------------------ reading (the peer API's threads)

    @property
    def epoch(self) -> str:
        with self._lock:
            return self._meta("epoch") or ""

    @property
    def seq(self) -> int:
        """The highest seq recorded (settled or not)."""
        return self._seq

    def settled(self) -> int:
        """The highest seq whose change, and every change before it, has ended: what may be served."""
        with self._lock:
            if self._in_flight:
                return min(self._in_flight.values()) - 1
            return self._seq

    @property
    def horizon(self) -> int:
        with self._lock:
            return self.horizon_locked()

    def horizon_locked(self) -> int:
        return int(self._meta("horizon") or 0)

    def since(self, after: int, limit: int) -> tuple[list[tuple[int, str]], int]:
        """Rows (seq, id) after ``after`` up to the settled seq, at most ``limit``; and the settled seq."""
        upto = self.settled()
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, memory_id FROM changes WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
                (after, upto, limit),
            ).fetchall()
        return [(int(str(s)), str(m)) for s, m in rows], upto

    def status(self) -> dict:
        """The feed in the hub's status: its seq, horizon, and each spoke's replica as of its last request."""
        settled, now = self.settled(), time.time()
        return {
            "seq": settled,
            "horizon": self.horizon,
            "spokes": {
                host: {"seq": seq, "lag": max(0, settled - seq), "asked_s_ago": round(now - at, 1)}
                for host, (seq, at) in sorted(self.fed.items())
            },
        }

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------ the file

    def _max_seq(self) -> int:
        row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'changes'").fetchone()
        return int(str(row[0])) if row else 0

    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set_meta(self, key: str, value: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))


def bump_epoch(state_dir: Path) -> None:
    """A maintenance command changed the store with the daemon stopped (nothing recorded): spokes rebuild."""
    path = feed_path(state_dir)
    if path.exists():
        feed = ChangeFeed(path)
        try:
            feed.new_epoch()
        finally:
            feed.close()
