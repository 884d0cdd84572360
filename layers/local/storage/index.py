"""One agent's L3 index: an SQLite file (apsw, WAL) that markdown can always rebuild.

Layout: ``chunks`` holds the text with its file, heading path and line range;
``chunks_fts`` is a contentless FTS5 table of pre-tokenized heading and body
(see :mod:`layers.local.text.tokenizer` for why); ``vectors`` holds embeddings by
chunk hash and model, so identical text is embedded once (however many chunks hold it) and a rebuild
reuses them; ``pending`` is the persistent "to embed" set.

The index keeps only what the files hold: a vector, its code and an embedding
job live while some chunk has their hash.  The transaction that removes a
file's last chunk of a text removes them too (:meth:`LocalIndex._forget_unheld`),
and a vector the worker brings back for a text no chunk has any more is dropped
in the transaction that would have stored it (:meth:`LocalIndex.store_vectors`).
Their pages go to SQLite's freelist and the next rows written reuse them.

The file records its identity (schema, tokenizer, chunker, embedding model).
Opening a file whose identity differs, or which is damaged, raises
:class:`IndexStale`; :func:`rebuild` then builds a replacement beside it while
the old file keeps answering, and swaps it in atomically.

A file that is not an index of ours (QMD keeps its own ``index.sqlite`` on an
OpenClaw host) is never opened for writing, replaced or deleted: :func:`inspect_file`
looks at it without writing a byte and :class:`ForeignFile` refuses it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import stat
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import apsw
import numpy as np

from layers.common import malloc
from layers.common.fsutil import create_private_file, private_dirs, tighten_sqlite
from layers.common.sqlite_wal import keep_wal_small
from layers.local.shapes import IndexStats, RebuildStats
from layers.local.storage import bm25 as ranking
from layers.local.storage import vector_codes
from layers.local.storage.build_helper import PreparedChunk, prepared_documents
from layers.local.storage.vector_codes import quantize
from layers.local.text.chunker import CHUNKER_VERSION, chunk_markdown
from layers.local.text.query import Query
from layers.local.text.tokenizer import TOKENIZER_VERSION, token_string
from layers.local.text.units import ITEMS_UP_TO_CHUNKS

LOAD_BATCH = 4096  # rows of codes read into a cache at a time: a full load never holds every row's bytes twice
SCHEMA_VERSION = 2  # 2: quantized codes and the change log (layers/local/storage/vector_codes.py)
# FTS5 writes its in-memory terms out as a new segment each time they pass this many bytes (1 MB by
# default), and merges segments as they pile up: a fresh build at 8 MB wrote its FTS rows in half the
# time (20,000 chunks: 0.29 against 0.56 s; docs/facts.md, "Index build").  Kept in the table's config.
FTS_BUILD_HASH_BYTES = 8 * 1024 * 1024
HEADING_WEIGHT = 3.0  # bm25 weight of the heading column against 1.0 for the body
# Past this many chunks holding every word of a question, BM25 ranks the newest of them (newest_floor).
RANK_NEWEST = 1_000
# A term's share of the chunks is read off its newest this many (LocalIndex._share).
SHARE_SAMPLE = 500

# chunks whose whole vector is stored and whose items' vectors are still to be made (LocalIndex.store_vectors)
_PENDING_ITEMS = (
    "CREATE TABLE IF NOT EXISTS pending_items(hash TEXT PRIMARY KEY, queued_at REAL NOT NULL) WITHOUT ROWID;"
)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files(
    path TEXT PRIMARY KEY, sha256 TEXT NOT NULL, layer TEXT NOT NULL, day TEXT,
    chunks INTEGER NOT NULL, indexed_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS files_by_layer ON files(layer);
CREATE TABLE IF NOT EXISTS chunks(
    id INTEGER PRIMARY KEY, path TEXT NOT NULL, seq INTEGER NOT NULL, heading TEXT NOT NULL,
    line_start INTEGER NOT NULL, line_end INTEGER NOT NULL, hash TEXT NOT NULL, text TEXT NOT NULL,
    layer TEXT NOT NULL, day TEXT);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    heading, body, content='', contentless_delete=1, tokenize='ascii');
CREATE TABLE IF NOT EXISTS vectors(
    hash TEXT NOT NULL, model TEXT NOT NULL, dim INTEGER NOT NULL, vec BLOB NOT NULL,
    PRIMARY KEY(hash, model)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pending(hash TEXT PRIMARY KEY, queued_at REAL NOT NULL) WITHOUT ROWID;
{_PENDING_ITEMS}
CREATE TABLE IF NOT EXISTS codes(
    hash TEXT NOT NULL, model TEXT NOT NULL, code BLOB NOT NULL, PRIMARY KEY(hash, model)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS changes(seq INTEGER PRIMARY KEY AUTOINCREMENT, chunk INTEGER NOT NULL);
"""
# The curated files are picked from the files table through its primary key and files_by_layer (a scan of
# it was 0.25-0.5 ms a search at 5,000 files), their chunks read through chunks_by_path; CROSS JOIN keeps
# that order.  The same condition on the chunks table, or a plain JOIN the planner turned round, walked
# every chunk: at 100,000 chunks fts through the API took p50 52 / p95 87 ms with it, 9 / 40 ms without
# (bench/bench_scale.py).
CURATED_CHUNKS_SQL = (
    "SELECT c.path, c.line_start, c.text FROM files f CROSS JOIN chunks c ON c.path = f.path "
    "WHERE f.path = 'MEMORY.md' OR f.layer = 'core' ORDER BY c.path = 'MEMORY.md' DESC, c.path, c.seq LIMIT ?"
)
_PHRASE = re.compile(r'"([^"]*)"')  # a phrase of an expression layers.local.text.query wrote (never holds a quote)
#: The tables kept by chunk hash: a row whose hash no chunk holds is work or space for nothing.
_BY_HASH = ("pending", "pending_items", "vectors", "codes")
#: meta key: every row of _BY_HASH has its chunk (a new file, or one :meth:`LocalIndex.forget_unheld_everywhere`
#: has passed over); an index of an earlier version lacks it.
HELD_ONLY_KEY = "held_only"
VACUUM_MIN_FREE_PAGES = 256  # 1 MB of 4 KB pages: less is not worth rewriting the file for
_INDEXES = """
CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks(path, seq);
CREATE INDEX IF NOT EXISTS chunks_by_hash ON chunks(hash);
"""


@dataclass(frozen=True)
class Identity:
    """What an index was built with; any difference means a rebuild."""

    embed_model: str = ""  # "" when vectors are off
    schema: int = SCHEMA_VERSION
    tokenizer: int = TOKENIZER_VERSION
    chunker: int = CHUNKER_VERSION

    def as_meta(self) -> dict[str, str]:
        return {
            "schema_version": str(self.schema),
            "tokenizer_version": str(self.tokenizer),
            "chunker_version": str(self.chunker),
            "embed_model": self.embed_model,
        }

    def describe(self) -> str:
        model = self.embed_model or "none"
        return f"schema {self.schema}, tokenizer {self.tokenizer}, chunker {self.chunker}, embeddings {model}"


class IndexStale(Exception):
    """The file cannot be used as is (other identity, or damaged); rebuild it from markdown."""


SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True)
class FileKind:
    """What a path holds, as :func:`inspect_file` found it."""

    # missing | empty | index | sqlite (another program's) | unreadable (SQLite, damaged) | other | not a file
    kind: str
    tables: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.kind == "sqlite":
            shown_tables = ", ".join(self.tables[:12]) + (", …" if len(self.tables) > 12 else "")
            return f"an SQLite database of another program (tables: {shown_tables or 'none'})"
        return {
            "empty": "an empty file",
            "unreadable": "an SQLite file whose schema cannot be read",
            "other": "not an SQLite database",
            "not a file": "not a regular file",
        }.get(self.kind, self.kind)


class ForeignFile(Exception):
    """The path holds a file memstrata did not create: it is never written, replaced or deleted."""

    def __init__(self, path: Path, found: FileKind) -> None:
        self.path = path
        self.found = found
        super().__init__(
            f"{path} is not a memstrata index: it is {found.describe()}; memstrata never writes, replaces or "
            "deletes a file it did not create. Point paths.index at a file of its own "
            "(the default is {root}/agents/{agent}/memstrata/index.sqlite)"
        )


def _user_tables(db: apsw.Connection) -> tuple[str, ...]:
    """Table names, without SQLite's own and without the shadow tables of virtual tables."""
    sql = "SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    rows: list[tuple[str, str | None]] = list(db.execute(sql))
    virtual = [name for name, sql in rows if (sql or "").upper().startswith("CREATE VIRTUAL TABLE")]
    return tuple(sorted(name for name, _ in rows if not any(name.startswith(v + "_") and name != v for v in virtual)))


def _is_ours(db: apsw.Connection, tables: tuple[str, ...]) -> bool:
    if "meta" not in tables:
        return False
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return row is not None


def inspect_file(path: Path) -> FileKind:
    """What ``path`` holds, found without writing anything.

    A read-only SQLite connection is not enough: on a WAL database it creates
    ``-wal`` and ``-shm`` beside the file.  The file is read ``immutable`` (no
    locks, no side files); only when that shows no table at all and a ``-wal``
    already exists (a writer is or was there) is it read through that WAL: a
    fresh index of ours may have its schema only there.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return FileKind("missing")
    if not stat.S_ISREG(st.st_mode):
        return FileKind("not a file")
    if st.st_size == 0:
        return FileKind("empty")
    with open(path, "rb") as fh:
        if fh.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
            return FileKind("other")
    uri = "file:" + urllib.parse.quote(str(path), safe="/")
    modes = ["immutable=1"]
    if os.path.exists(f"{path}-wal"):
        modes.append("mode=ro")
    found = FileKind("unreadable")
    for mode in modes:
        try:
            db = apsw.Connection(f"{uri}?{mode}", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        except apsw.Error:
            continue
        try:
            tables = _user_tables(db)
            if _is_ours(db, tables):
                return FileKind("index", tables)
            found = FileKind("sqlite", tables)
            if tables:
                break  # another program's tables: looked at enough
        except apsw.Error:
            pass
        finally:
            db.close()
    return found


def check_replaceable(path: Path, owned: bool = False) -> FileKind:
    """What is at ``path``, when :func:`rebuild` may replace it; :class:`ForeignFile` otherwise."""
    found = inspect_file(path)
    if found.kind in ("sqlite", "not a file") or not (owned or _claimable(found, path)):
        raise ForeignFile(path, found)
    return found


def _claimable(found: FileKind, path: Path) -> bool:
    """A file a writer may open: an index of ours, or the empty 0600 file :func:`create_private_file` left."""
    if found.kind in ("missing", "index"):
        return True
    if found.kind == "empty":
        st = os.lstat(path)
        return st.st_uid == os.geteuid() and not st.st_mode & 0o077
    return False


@dataclass(frozen=True)
class Document:
    """One markdown file as the index sees it."""

    path: str  # workspace-relative ("memory/2026-11-29.md"; "shared/X.md" for the shared core)
    text: str
    sha256: str
    layer: str  # "core" | "daily"
    day: str | None = None  # YYYY-MM-DD for daily files


@dataclass(frozen=True)
class Filters:
    layer: str | None = None
    path_glob: str | None = None
    since: str | None = None  # YYYY-MM-DD, daily files only
    until: str | None = None

    def sql(self) -> tuple[str, list]:
        """`` AND …`` clauses over the chunks table (alias ``c``) and their arguments."""
        conditions = (
            ("c.layer = ?", self.layer),
            ("c.path GLOB ?", self.path_glob),
            ("c.day >= ?", self.since),
            ("c.day <= ?", self.until),
        )
        used = [(clause, value) for clause, value in conditions if value]
        return "".join(f" AND {clause}" for clause, _ in used), [value for _, value in used]


#: A chunk as a query reads it for a :class:`Hit`: id, path, heading, line_start, line_end, text.
ChunkRow = tuple[int, str, str, int, int, str]


@dataclass
class Hit:
    chunk_id: int
    path: str
    heading: str
    line_start: int
    line_end: int
    text: str
    score: float


class _Summary(NamedTuple):
    chunks: int
    newest_day: str | None


class RankedMatches(NamedTuple):
    """The lexical list of a question (:meth:`LocalIndex.search_query`)."""

    hits: list[Hit]
    relaxed: bool  # no chunk had every term: any of them
    newest_only: bool  # more than RANK_NEWEST chunks had every term: the newest of them were ranked


@dataclass(frozen=True)
class UpdateStats:
    added: int
    removed: int
    kept: int


BUSY_TIMEOUT_MS = 5000


def _connect(path: Path, readonly: bool, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> apsw.Connection:
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    flags |= apsw.SQLITE_OPEN_URI  # for ATTACH 'file:…?mode=ro' during a rebuild
    db = apsw.Connection(str(path), flags=flags)
    db.setbusytimeout(busy_timeout_ms)
    return db


@contextlib.contextmanager
def write_transaction(db: apsw.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``: take the write lock first, waiting up to the busy timeout.

    apsw's ``with db:`` opens a deferred transaction.  One that reads first and
    then writes cannot wait for a writer on another connection (the embedding
    worker storing vectors, a tool): to avoid a deadlock SQLite answers
    ``SQLITE_BUSY`` at once, without calling the busy handler, and the update
    was lost.  Taking the lock up front lets the busy timeout do its work.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            with contextlib.suppress(apsw.Error):
                db.execute("ROLLBACK")
        raise


class LocalIndex:
    """A connection to one index file. Not shared between threads: open one per thread."""

    def __init__(
        self,
        path: Path,
        identity: Identity,
        *,
        readonly: bool = False,
        verify: bool | None = None,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
        owned: bool = False,
    ) -> None:
        """Open (creating when writable) and check the identity; :class:`IndexStale` when unusable.

        ``verify`` runs SQLite's quick_check (default: for writers, which open
        rarely; a search opens a reader per request and skips it).
        ``busy_timeout_ms`` is how long a write waits for another connection's
        write lock before :class:`apsw.BusyError` (the caller retries later).
        A file that is not recognisably an index of ours raises :class:`ForeignFile`
        before any connection is made, unless the caller knows it created it
        (``owned``: a damaged index of ours is then :class:`IndexStale`, and rebuilt).
        Another program's SQLite database is refused either way.
        """
        self.verify = (not readonly) if verify is None else verify
        self._width: int | None = None  # the stored vectors' width, once read
        #: Chunks with a vector, as the last vector search of this connection saw them (its code cache's rows).
        self.embedded_chunks = 0
        self._created_at: str | None = None  # meta "created": which file this is, for the code caches
        #: hashes whose chunk this transaction removed: their vectors and jobs go at its end if no chunk has them
        self._maybe_unheld: set[str] = set()
        self._bulk = False
        self._next_id: int | None = None  # set while a fresh bulk build assigns ids
        self._summary: tuple[tuple[int, int], _Summary] | None = None  # (database state, what it said then)
        self._matches: dict[str, float] = {}  # phrase -> chunks holding it, counted or sampled, until a write
        self.path = path
        self.identity = identity
        self.readonly = readonly
        found = inspect_file(path)
        if found.kind == "missing" and readonly:
            raise FileNotFoundError(f"no index at {path}")
        if found.kind in ("sqlite", "not a file") or not (owned or readonly or _claimable(found, path)):
            raise ForeignFile(path, found)
        if readonly and found.kind != "index":  # a reader would leave -wal/-shm beside it
            raise IndexStale(f"{path} is damaged or not yet an index ({found.describe()})")
        if not readonly:
            # The index holds the agent's memory as text: 0600 files in 0700 directories,
            # from the first byte (SQLite gives -wal/-shm the database file's mode).
            private_dirs(path.parent)
            create_private_file(path)
        try:
            self.db = _connect(path, readonly, busy_timeout_ms)
            self._check()
        except (apsw.FullError, apsw.ReadOnlyError, apsw.IOError):
            with contextlib.suppress(Exception):
                self.db.close()
            raise  # a full or read-only disk is not damage: a rebuild would meet the same disk
        except apsw.Error as exc:
            with contextlib.suppress(Exception):
                self.db.close()
            raise IndexStale(f"{path} is damaged ({exc.__class__.__name__}: {exc})") from exc
        ranking.register(self.db, HEADING_WEIGHT)
        if not readonly:
            tighten_sqlite(path)  # ours (checked above): an index of an older version was 0644

    def _check(self) -> None:
        db = self.db
        if not self.readonly:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            keep_wal_small(db)  # a 4 MB -wal stayed beside every index (layers/common/sqlite_wal.py)
        if self.verify:
            check = db.execute("PRAGMA quick_check").fetchall()
            if check != [("ok",)]:
                raise apsw.CorruptError(f"quick_check: {check[0][0]}")
        schema = dict(db.execute("SELECT name, type FROM sqlite_schema WHERE type IN ('table', 'view', 'index')"))
        tables = {name for name, kind in schema.items() if kind != "index"}
        if "meta" not in tables:
            if self.readonly or tables - {"meta"}:
                raise IndexStale(f"{self.path} is not a memstrata index (no meta table)")
            with write_transaction(db):
                db.execute(_SCHEMA + _INDEXES)
                db.executemany("INSERT INTO meta VALUES(?, ?)", self.identity.as_meta().items())
                db.execute("INSERT INTO meta VALUES('created', ?)", (str(time.time()),))
                db.execute("INSERT INTO meta VALUES(?, '1')", (HELD_ONLY_KEY,))
            return
        if not self.readonly and "files_by_layer" not in schema:  # an index written before it was made
            db.execute("CREATE INDEX IF NOT EXISTS files_by_layer ON files(layer)")
        if not self.readonly and "pending_items" not in schema:  # an index written before items came second
            db.execute(_PENDING_ITEMS)
        meta = dict(db.execute("SELECT key, value FROM meta"))
        wanted = self.identity.as_meta()
        differs = [f"{k} {meta.get(k)!r} ≠ {v!r}" for k, v in wanted.items() if meta.get(k) != v]
        if differs:
            self.db.close()
            raise IndexStale(f"{self.path} was built differently ({'; '.join(differs)})")

    def close(self) -> None:
        self.db.close()

    @contextlib.contextmanager
    def bulk(self, *, fresh: bool = False) -> Iterator[None]:
        """One transaction around many updates (rebuild, reindex).

        Each update otherwise runs in its own transaction, and FTS5 flushes its
        in-memory terms at every commit: measured, that was ~1 ms per file,
        more than all the rest of a build.  ``fresh`` (an empty new file, each
        document added once) also skips the per-file lookups and builds the
        secondary indexes once at the end, sorted, instead of row by row.
        """
        if self._bulk:
            yield
            return
        self._bulk = True
        try:
            with write_transaction(self.db):
                if fresh:
                    self.db.execute("DROP INDEX IF EXISTS chunks_by_path; DROP INDEX IF EXISTS chunks_by_hash")
                    hashsize = "INSERT INTO chunks_fts(chunks_fts, rank) VALUES('hashsize', ?)"
                    self.db.execute(hashsize, (FTS_BUILD_HASH_BYTES,))
                    self._next_id = self.db.execute("SELECT coalesce(max(id), 0) + 1 FROM chunks").get
                yield
                self._forget_unheld()
                self._note_summary()
                if fresh:
                    self.db.execute(_INDEXES)
        finally:
            self._bulk = False
            self._next_id = None
            self._maybe_unheld.clear()

    def _transaction(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext() if self._bulk else write_transaction(self.db)

    def __enter__(self) -> LocalIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ writing

    def update_document(self, doc: Document, prepared: list[PreparedChunk] | None = None) -> UpdateStats:
        """Re-chunk one file; only chunks whose hash changed are written (and re-embedded).
        ``prepared``: its chunks and their terms, made elsewhere (:mod:`layers.local.storage.build_helper`)."""
        chunks = chunk_markdown(doc.text) if prepared is None else [p.chunk for p in prepared]
        db = self.db
        with self._transaction():
            existing: dict[str, list[int]] = defaultdict(list)
            for chunk_id, chunk_hash in (
                ()
                if self._next_id
                else db.execute("SELECT id, hash FROM chunks WHERE path = ? ORDER BY seq", (doc.path,))
            ):
                existing[chunk_hash].append(chunk_id)
            # Rows are gathered and written with executemany: per-statement overhead
            # was a large share of a full build.  Ids are assigned here (single writer).
            next_id = self._next_id or db.execute("SELECT coalesce(max(id), 0) + 1 FROM chunks").get
            kept_rows, new_rows, fts_rows, new_hashes = [], [], [], []
            headings: dict[str, str] = {}
            for seq, chunk in enumerate(chunks):
                chunk_hash = chunk.hash
                if existing.get(chunk_hash):
                    kept_rows.append(
                        (seq, chunk.line_start, chunk.line_end, doc.layer, doc.day, existing[chunk_hash].pop(0))
                    )
                    continue
                if prepared is not None:
                    headings[chunk.heading] = prepared[seq].heading_terms
                elif chunk.heading not in headings:
                    headings[chunk.heading] = token_string(chunk.heading)
                new_rows.append(
                    (
                        next_id,
                        doc.path,
                        seq,
                        chunk.heading,
                        chunk.line_start,
                        chunk.line_end,
                        chunk_hash,
                        chunk.text,
                        doc.layer,
                        doc.day,
                    )
                )
                body = token_string(chunk.text) if prepared is None else prepared[seq].body_terms
                fts_rows.append((next_id, headings[chunk.heading], body))
                new_hashes.append(chunk_hash)
                next_id += 1
            stale = [chunk_id for ids in existing.values() for chunk_id in ids]
            self._delete_chunks(stale)  # first: a kept row may take a freed seq
            if not self._next_id:  # a fresh file has no code cache to tell yet: its first search loads it whole
                self._log_changes([*stale, *(row[-1] for row in kept_rows), *(row[0] for row in new_rows)])
            if kept_rows:
                db.executemany(
                    "UPDATE chunks SET seq = ?, line_start = ?, line_end = ?, layer = ?, day = ? WHERE id = ?",
                    kept_rows,
                )
            if new_rows:
                db.executemany("INSERT INTO chunks VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", new_rows)
                db.executemany("INSERT INTO chunks_fts(rowid, heading, body) VALUES(?, ?, ?)", fts_rows)
                self._queue_embeddings(new_hashes)
            added, kept = len(new_rows), len(kept_rows)
            if self._next_id:
                self._next_id = next_id
            db.execute(
                "INSERT OR REPLACE INTO files VALUES(?, ?, ?, ?, ?, ?)",
                (doc.path, doc.sha256, doc.layer, doc.day, len(chunks), time.time()),
            )
            if not self._bulk:
                self._forget_unheld()
                self._note_summary()
        return UpdateStats(added, len(stale), kept)

    def remove_document(self, path: str) -> int:
        """Forget a file that was deleted or moved away; returns the chunks removed."""
        with self._transaction():
            ids = [r[0] for r in self.db.execute("SELECT id FROM chunks WHERE path = ?", (path,))]
            self._delete_chunks(ids)
            self._log_changes(ids)
            self.db.execute("DELETE FROM files WHERE path = ?", (path,))
            if not self._bulk:
                self._forget_unheld()
                self._note_summary()
        return len(ids)

    def scrub(self, paths: Iterable[str]) -> int:
        """Remove files that turned out to hold a secret so that no byte of it stays on disk.

        A plain delete leaves the text in freed page space, in FTS5 segments (a
        contentless delete only records a tombstone) and in the WAL.  Here the
        deletes run with ``secure_delete`` (freed space is zeroed), FTS5 merges
        every segment into one (tombstoned terms are dropped), cached vectors of
        the removed chunks go, and the WAL is checkpointed and truncated.
        Returns the chunks removed.
        """
        db = self.db
        paths = [p for p in paths if db.execute("SELECT 1 FROM chunks WHERE path = ? LIMIT 1", (p,)).fetchone()]
        if not paths:
            return 0  # nothing of it was ever stored here
        db.execute("PRAGMA secure_delete=ON")
        try:
            with self.bulk():
                removed = 0
                hashes: set[str] = set()
                for path in paths:
                    hashes.update(r[0] for r in db.execute("SELECT hash FROM chunks WHERE path = ?", (path,)))
                    removed += self.remove_document(path)
                for table in ("vectors", "codes"):
                    db.executemany(
                        f"DELETE FROM {table} WHERE hash = ? AND NOT EXISTS (SELECT 1 FROM chunks WHERE hash = ?)",
                        [(h, h) for h in hashes],
                    )
                db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES('optimize')")
        finally:
            db.execute("PRAGMA secure_delete=OFF")
        self.checkpoint()
        return removed

    def checkpoint(self, attempts: int = 5) -> bool:
        """Copy the WAL into the file and truncate it to zero bytes; False while readers keep it."""
        for attempt in range(attempts):
            busy, _log, _done = self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").get
            if not busy:
                return True
            time.sleep(0.05 * (attempt + 1))
        return False

    def _delete_chunks(self, ids: list[int]) -> None:
        db = self.db
        for chunk_id in ids:
            chunk_hash = db.execute("SELECT hash FROM chunks WHERE id = ?", (chunk_id,)).get
            db.execute("DELETE FROM chunks WHERE id = ?", (chunk_id,))
            db.execute("DELETE FROM chunks_fts WHERE rowid = ?", (chunk_id,))
            if chunk_hash is not None:
                self._maybe_unheld.add(chunk_hash)

    def _forget_unheld(self) -> None:
        """At the end of the transaction that removed chunks: the vectors, codes and embedding jobs of
        those texts no chunk holds any more.  Not at each removal: a text that moves to another file in
        the same transaction (a rename, a sync) keeps its vector and is not embedded again."""
        gone = [(h, h) for h in self._maybe_unheld]
        self._maybe_unheld.clear()
        for table in _BY_HASH:
            self.db.executemany(
                f"DELETE FROM {table} WHERE hash = ? AND NOT EXISTS (SELECT 1 FROM chunks WHERE hash = ?)", gone
            )

    def forget_unheld_everywhere(self) -> dict[str, int]:
        """Once per index file: remove every embedding job and vector that no chunk holds (an earlier
        version left them: a vector stored for a chunk replaced while it was embedded, with its items
        queued for ever, and every replaced chunk's vector).  Returns what went, per table ({} when the
        pass had been made); the file is vacuumed when most of it was left free."""
        if self.db.execute("SELECT value FROM meta WHERE key = ?", (HELD_ONLY_KEY,)).get:
            return {}
        removed: dict[str, int] = {}
        with write_transaction(self.db):
            for table in _BY_HASH:
                self.db.execute(
                    f"DELETE FROM {table} WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.hash = {table}.hash)"
                )
                removed[table] = self.db.changes()
            self.db.execute("INSERT OR REPLACE INTO meta VALUES(?, '1')", (HELD_ONLY_KEY,))
        if _vacuum_when_mostly_free(self.db):  # a leak of months: the disk given back once
            self.checkpoint()
        return removed

    def _log_changes(self, chunk_ids: Iterable[int]) -> None:
        """Tell code caches (layers/local/storage/vector_codes.py) which chunks to look at again; the log
        keeps its last KEEP_CHANGES entries (a reader further behind loads its cache anew)."""
        rows = [(chunk_id,) for chunk_id in chunk_ids]
        if not rows:
            return
        self.db.executemany("INSERT INTO changes(chunk) VALUES(?)", rows)
        last = self.db.last_insert_rowid()
        if last % 1024 < len(rows) or len(rows) >= 1024:
            self.db.execute("DELETE FROM changes WHERE seq <= ?", (last - vector_codes.KEEP_CHANGES,))

    def _queue_embeddings(self, chunk_hashes: list[str]) -> None:
        model = self.identity.embed_model
        if model and chunk_hashes:
            now = time.time()
            self.db.executemany(
                "INSERT OR IGNORE INTO pending SELECT ?, ? WHERE NOT EXISTS "
                "(SELECT 1 FROM vectors WHERE hash = ? AND model = ?)",
                [(chunk_hash, now, chunk_hash, model) for chunk_hash in chunk_hashes],
            )

    def documents(self) -> dict[str, str]:
        """path → sha256 of every indexed file."""
        return dict(self.db.execute("SELECT path, sha256 FROM files"))

    # ------------------------------------------------------------ vectors

    def pending_count(self) -> int:
        """Chunks with embedding work left: no vector yet, or their items still to come (:meth:`store_vectors`)."""
        return self.db.execute("SELECT count(*) FROM pending").get + self.pending_items_count()

    def pending_items_count(self) -> int:
        """Chunks whose whole vector is stored and whose items' vectors are still to come."""
        try:
            return self.db.execute("SELECT count(*) FROM pending_items").get
        except apsw.SQLError:  # a read-only look at an index no writer has opened since items came second
            return 0

    def take_pending(self, limit: int, items: bool = False) -> list[tuple[str, str]]:
        """Up to ``limit`` (hash, passage text) pairs waiting for an embedding: MEMORY.md's first, then the
        newest days' (a first index of two years of notes is useful after its first minutes, not its last),
        then the most recently queued.  ``items``: the chunks whose whole vector is stored and whose items
        wait (taken once no chunk waits for its whole vector)."""
        queue = "pending_items" if items else "pending"
        return list(
            self.db.execute(
                f"SELECT p.hash, c.heading || char(10) || c.text FROM {queue} p "
                "JOIN chunks c ON c.id = (SELECT id FROM chunks WHERE hash = p.hash LIMIT 1) "
                "ORDER BY c.layer = 'core' DESC, c.day IS NULL, c.day DESC, p.queued_at DESC LIMIT ?",
                (limit,),
            )
        )

    def drop_pending_items(self) -> None:
        """Forget the items still to embed (the index has grown past the size whose chunks get them)."""
        with write_transaction(self.db):
            self.db.execute("DELETE FROM pending_items")

    def stored_vector(self, chunk_hash: str) -> np.ndarray | None:
        """The rows stored for ``chunk_hash`` under the index's model, ``(n, dim)``; None when there are none."""
        row = self.db.execute(
            "SELECT vec, dim FROM vectors WHERE hash = ? AND model = ?", (chunk_hash, self.identity.embed_model)
        ).fetchone()
        return None if row is None else np.frombuffer(row[0], dtype=np.float32).reshape(-1, row[1])

    def store_vectors(
        self, model: str, items: Iterable[tuple[str, np.ndarray]], items_later: Iterable[str] = ()
    ) -> int:
        """Store each chunk's vector, or its passages' vectors as one ``(n, dim)`` array (it scores as the best),
        with their codes (layers/local/storage/vector_codes.py).  ``items_later``: of these chunks, those whose
        whole vector this is and whose items are to be embedded once every chunk has its whole vector
        (a first index is searchable over all of it sooner: whole chunks are ~2× faster than with items).

        A hash no chunk holds any more (its file changed while it was embedded) is dropped, in the same
        transaction that would have stored it: never stored, its items never queued.  Returns how many
        were stored.  (The hash is of the chunk's heading and text, the very passage embedded.)"""
        later = set(items_later)
        count = 0
        with write_transaction(self.db):
            for chunk_hash, vec in items:
                if not self.db.execute("SELECT 1 FROM chunks WHERE hash = ? LIMIT 1", (chunk_hash,)).get:
                    # replaced or removed while it was being embedded: the job is dropped, never stored or
                    # queued again (its removal already took the chunk's jobs; this takes any left)
                    for queue in ("pending", "pending_items"):
                        self.db.execute(f"DELETE FROM {queue} WHERE hash = ?", (chunk_hash,))
                    continue
                vec = np.asarray(vec, dtype=np.float32)
                self.db.execute(
                    "INSERT OR REPLACE INTO vectors VALUES(?, ?, ?, ?)",
                    (chunk_hash, model, vec.shape[-1], vec.tobytes()),
                )
                self.db.execute("INSERT OR REPLACE INTO codes VALUES(?, ?, ?)", (chunk_hash, model, quantize(vec)))
                self.db.execute("DELETE FROM pending WHERE hash = ?", (chunk_hash,))
                if chunk_hash in later:
                    self.db.execute("INSERT OR IGNORE INTO pending_items VALUES(?, ?)", (chunk_hash, time.time()))
                else:
                    self.db.execute("DELETE FROM pending_items WHERE hash = ?", (chunk_hash,))
                ids = [r[0] for r in self.db.execute("SELECT id FROM chunks WHERE hash = ?", (chunk_hash,))]
                self._log_changes(ids)
                count += 1
        return count

    def chunk_count(self) -> int:
        """How many chunks the index holds, as the writer keeps it (:meth:`_summarised`): ``count(*)``
        of the chunks reads every row (0.5 ms at 20,000 chunks, on each search)."""
        return self._summarised().chunks

    def _summarised(self) -> _Summary:
        """The chunk count and newest day, read once until a write: a search asks for them three times.
        ``data_version`` moves when another connection commits, ``total_changes`` when this one writes.

        The writer keeps both in meta (:meth:`_note_summary`): summing the files table (a row per
        file: 5,000 at 100,000 chunks) took 0.55 ms, on every search, as each opens its own
        connection.  An index written before they were kept is summed.
        """
        state = (self.db.execute("PRAGMA data_version").get, self.db.total_changes())
        if self._summary is None or self._summary[0] != state:
            kept = dict(self.db.execute("SELECT key, value FROM meta WHERE key IN ('chunk_total', 'newest_day')"))
            if len(kept) == 2:
                summary = _Summary(int(kept["chunk_total"]), kept["newest_day"] or None)
            else:
                summary = _Summary(*next(self.db.execute("SELECT coalesce(sum(chunks), 0), max(day) FROM files")))
            self._summary = (state, summary)
            self._matches.clear()
        return self._summary[1]

    def _note_summary(self) -> None:
        """Keep the chunk count and newest day in meta for readers (:meth:`_summarised`), in the
        transaction that changed the files table."""
        chunks, newest = next(self.db.execute("SELECT coalesce(sum(chunks), 0), max(day) FROM files"))
        self.db.executemany(
            "INSERT OR REPLACE INTO meta VALUES(?, ?)", [("chunk_total", str(chunks)), ("newest_day", newest or "")]
        )

    def has_vectors(self) -> bool:
        """Whether any chunk has a vector of the index's model (cheap: no count of them)."""
        return bool(self.identity.embed_model) and self._vector_width(self.identity.embed_model) is not None

    def vector_width(self) -> int | None:
        """How wide the stored rows are (the model parts side by side); None while nothing has a vector."""
        return self._vector_width(self.identity.embed_model) if self.identity.embed_model else None

    def vector_count(self) -> int:
        model = self.identity.embed_model
        return self.db.execute(
            "SELECT count(*) FROM chunks c JOIN vectors v ON v.hash = c.hash AND v.model = ?", (model,)
        ).get

    def without_vectors(self, chunk_ids: Iterable[int]) -> set[int]:
        """Those of ``chunk_ids`` that have no vector of the index's model yet (still waiting for one)."""
        ids = list(chunk_ids)
        if not ids:
            return set()
        rows = self.db.execute(
            "SELECT c.id FROM chunks c LEFT JOIN vectors v ON v.hash = c.hash AND v.model = ? "
            "WHERE v.hash IS NULL AND c.id IN (SELECT value FROM json_each(?))",
            (self.identity.embed_model, json.dumps(ids)),
        )
        return {row[0] for row in rows}

    # ------------------------------------------------------------ search

    def search_text(self, expression: str, limit: int, filters: Filters, after: int = 0) -> list[Hit]:
        """BM25-ranked chunks for an FTS5 expression built by :mod:`layers.local.text.query` (those with an id
        over ``after`` only: :meth:`newest_floor`)."""
        where, args = filters.sql()
        # Above a newest floor few rows are ranked, and FTS5's bm25() would still walk every
        # phrase's whole posting list for its IDF: the same formula with counted or sampled IDFs
        # (layers/local/storage/bm25.py) ranks them in less than the walks took.
        rank = f"bm25(chunks_fts, {HEADING_WEIGHT}, 1.0)"
        rank_args: tuple[str, ...] = ()
        if after:
            total = self.chunk_count()
            counts = [self.phrase_matches(phrase) for phrase in _PHRASE.findall(expression)]
            rank, rank_args = f"{ranking.FUNCTION}(chunks_fts, ?)", (ranking.idf_argument(total, counts),)
        # Rank inside FTS5 first and fetch text only for the winners: joining the
        # chunk rows of every match before sorting cost more than bm25 itself.
        ranked = (
            f"SELECT rowid, {rank} AS rank FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid > ? ORDER BY rank LIMIT ?"
            if not where
            else f"SELECT f.rowid, {rank} AS rank FROM chunks_fts f "
            f"JOIN chunks c ON c.id = f.rowid WHERE chunks_fts MATCH ? AND f.rowid > ?{where} ORDER BY rank LIMIT ?"
        )
        rows = self.db.execute(
            f"WITH top AS ({ranked}) SELECT c.id, c.path, c.heading, c.line_start, c.line_end, c.text, top.rank "
            "FROM top JOIN chunks c ON c.id = top.rowid ORDER BY top.rank",
            (*rank_args, expression, after, *args, limit),
        )
        return [Hit(r[0], r[1], r[2], r[3], r[4], r[5], -r[6]) for r in rows]

    def newest_floor(self, expression: str, newest: int = RANK_NEWEST) -> int:
        """The id under the ``newest`` newest chunks that match ``expression``, 0 when fewer match.

        FTS5's bm25() scores every matching row (~0.5 µs each here): at 100,000 chunks a
        question whose every word is in most of them was 30-40 ms of scoring.  FTS5 walks its
        matches in id order and seeks on an id bound, so finding the floor costs ``newest``
        steps, and ranking above it ``newest`` scores.  Ids follow writing order (a file's
        changed chunks get new ones), so these are the most recently written.
        """
        sql = "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rowid DESC LIMIT 1 OFFSET ?"
        row = self.db.execute(sql, (expression, newest)).fetchone()
        return row[0] if row else 0

    def term_shares(self, terms: Iterable[str]) -> tuple[int, dict[str, float]]:
        """How many chunks there are, and the share of them holding each index term (in heading or body)."""
        wanted = sorted(set(terms))
        total = self.chunk_count()
        if not wanted or not total:
            return total, {}
        return total, {term: self._share(term, total) for term in wanted}

    def _share(self, term: str, total: int) -> float:
        """The share of the chunks holding ``term`` (:meth:`phrase_matches`)."""
        return min(1.0, self.phrase_matches(term) / total)

    def phrase_matches(self, phrase: str) -> float:
        """How many chunks hold ``phrase`` (index terms joined by spaces): counted when fewer than
        :data:`SHARE_SAMPLE` do, else read off the newest :data:`SHARE_SAMPLE` of them (over the ids
        they span, at the index's mean density of ids: a rewritten chunk leaves its old id unused).
        Kept until the index changes.

        fts5vocab counts a term's chunks by walking its whole posting list: at 100,000 chunks a word
        in most of them took ~2 ms, on every search.  The sample's walk is bounded.
        """
        total = self.chunk_count()  # first: it forgets the kept counts when the index has changed
        if phrase in self._matches:
            return self._matches[phrase]
        count, oldest = next(
            self.db.execute(
                "SELECT count(*), min(rowid) FROM "
                "(SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rowid DESC LIMIT ?)",
                (f'"{phrase}"', SHARE_SAMPLE),
            )
        )
        matches = float(count)
        if count >= SHARE_SAMPLE:
            # min() and max() each read one end of the id b-tree; both in one statement would scan every chunk
            first = self.db.execute("SELECT min(id) FROM chunks").get
            last = self.db.execute("SELECT max(id) FROM chunks").get
            density = total / max(1, last - first + 1)
            above = (last - oldest + 1) * density  # chunks in the span the sample covers
            matches = total * count / max(above, count)  # the sample's share, over the whole index
        self._matches[phrase] = matches
        return matches

    def search_query(self, query: Query, limit: int, filters: Filters) -> RankedMatches:
        """All terms first; if that finds nothing and there are several, any term (``relaxed``).

        When more than :data:`RANK_NEWEST` chunks hold every term, every term is in more chunks
        than that, and BM25 ranks the newest :data:`RANK_NEWEST` of them (``newest_only``).  Not
        with filters: the floor would be looked for through a join with every match's chunk row,
        which is what ranking them costs already.
        """
        floor = 0 if filters.sql()[0] else self.newest_floor(query.all_terms)
        hits = self.search_text(query.all_terms, limit, filters, after=floor)
        if hits or not query.can_relax:
            return RankedMatches(hits, relaxed=False, newest_only=floor > 0)
        return RankedMatches(self.search_text(query.any_term, limit, filters), relaxed=True, newest_only=False)

    def search_vectors(self, query_vec: np.ndarray, limit: int, filters: Filters, offset: int = 0) -> list[Hit]:
        """The ``limit`` chunks nearest ``query_vec`` within ``filters`` (see :meth:`vector_lists`)."""
        return self.vector_lists(query_vec, limit, {"": filters}, offset)[""]

    def vector_lists(
        self, query_vec: np.ndarray, limit: int, lists: dict[str, Filters], offset: int = 0
    ) -> dict[str, list[Hit]]:
        """For each named filter, the ``limit`` chunks nearest ``query_vec`` (cosine: vectors are normalised).

        A chunk stored with several passage vectors scores as its best passage.
        A stored row may hold two models' vectors side by side (the e5 vector,
        then the companion's, see :mod:`layers.local.models.companion`): ``query_vec``
        is compared with the columns from ``offset`` on.  The pass over the codes
        (:mod:`layers.local.storage.vector_codes`) picks the candidates once for every
        list, and only they are scored exactly.
        """
        query_vec = np.asarray(query_vec, dtype=np.float32)
        model = self.identity.embed_model
        width = self._vector_width(model)
        if width is None:
            return {name: [] for name in lists}
        if width < offset + query_vec.shape[0]:
            raise ValueError(
                f"stored vectors are {width}-d, a {query_vec.shape[0]}-d query at column {offset} does not fit"
            )
        cache = vector_codes.cache_for((str(self.path), self._created(), model), width)
        masks = [self._mask(f) for f in lists.values()]
        with cache.lock:
            cache.want(offset, query_vec.shape[0])
            self._follow(cache, model)
            self.embedded_chunks = len(cache)
            near = cache.nearest(query_vec, offset, masks, max(vector_codes.RESCORE_CHUNKS, limit))
        with vector_codes.one_blas_thread():
            return {name: self._rescore(ids, query_vec, limit, offset) for name, ids in zip(lists, near, strict=True)}

    def exact_vectors(self, query_vec: np.ndarray, limit: int, filters: Filters, offset: int = 0) -> list[Hit]:
        """:meth:`search_vectors` by scoring every stored vector (what the codes stand in for; the
        benchmark's reference for their recall)."""
        where, args = filters.sql()
        cursor = self.db.execute(
            f"SELECT c.id, v.vec, v.dim FROM chunks c JOIN vectors v ON v.hash = c.hash AND v.model = ? WHERE 1{where}",
            (self.identity.embed_model, *args),
        )
        return self._hits(_best_scores(cursor, np.asarray(query_vec, dtype=np.float32), limit, offset))

    def cosines(self, ids: list[int], query_vec: np.ndarray, offset: int = 0) -> dict[int, float]:
        """Each of ``ids`` that has a vector: its best passage's cosine with ``query_vec`` (exact)."""
        query_vec = np.asarray(query_vec, dtype=np.float32)
        with vector_codes.one_blas_thread():
            return {hit.chunk_id: hit.score for hit in self._rescore(list(ids), query_vec, len(ids), offset)}

    def passage_cosines(self, ids: list[int], query_vec: np.ndarray, offset: int = 0) -> dict[int, np.ndarray]:
        """Each of ``ids`` that has a vector: ``query_vec``'s cosine with each of its stored passages, the
        whole chunk first, then its items (:func:`layers.local.text.units.passages`): which item is nearest."""
        if not ids:
            return {}
        query_vec = np.asarray(query_vec, dtype=np.float32)
        dim = query_vec.shape[0]
        rows = self.db.execute(
            "SELECT c.id, v.vec, v.dim FROM chunks c JOIN vectors v ON v.hash = c.hash AND v.model = ? "
            "WHERE c.id IN (SELECT value FROM json_each(?))",
            (self.identity.embed_model, json.dumps(list(ids))),
        )
        found = {}
        for chunk_id, blob, width in rows:
            if width < offset + dim:
                continue
            matrix = np.frombuffer(blob, dtype=np.float32).reshape(-1, width)[:, offset : offset + dim]
            found[chunk_id] = np.dot(np.ascontiguousarray(matrix), query_vec)
        return found

    def _rescore(self, ids: list[int], query_vec: np.ndarray, limit: int, offset: int) -> list[Hit]:
        if not ids:
            return []
        cursor = self.db.execute(
            "SELECT c.id, v.vec, v.dim FROM chunks c JOIN vectors v ON v.hash = c.hash AND v.model = ? "
            "WHERE c.id IN (SELECT value FROM json_each(?))",
            (self.identity.embed_model, json.dumps(ids)),
        )
        return self._hits(_best_scores(cursor, query_vec, limit, offset))

    def _hits(self, best: list[tuple[float, int]]) -> list[Hit]:
        if not best:
            return []
        found: Iterable[ChunkRow] = self.db.execute(
            "SELECT id, path, heading, line_start, line_end, text FROM chunks "
            f"WHERE id IN ({','.join('?' * len(best))})",
            [i for _, i in best],
        )
        by_id = {r[0]: r for r in found}
        return [Hit(*by_id[i], score) for score, i in best if i in by_id]

    def _vector_width(self, model: str) -> int | None:
        """The stored rows' width (one identity, one width); None while nothing has a vector."""
        if self._width is None:
            self._width = self.db.execute("SELECT dim FROM vectors WHERE model = ? LIMIT 1", (model,)).get
        return self._width

    def _created(self) -> str:
        """When this file was made: a rebuilt index is another file, with caches of its own."""
        if self._created_at is None:
            self._created_at = self.db.execute("SELECT value FROM meta WHERE key = 'created'").get or ""
        return self._created_at

    def _mask(self, filters: Filters) -> vector_codes.Mask:
        chunk_ids = None
        if filters.path_glob:
            rows = self.db.execute("SELECT id FROM chunks WHERE path GLOB ?", (filters.path_glob,))
            chunk_ids = frozenset(r[0] for r in rows)
        return vector_codes.Mask(filters.layer, filters.since, filters.until, chunk_ids)

    def _follow(self, cache: vector_codes.CodeCache, model: str) -> None:
        """Bring ``cache`` up to this connection's view of the index, in one read transaction."""
        db = self.db
        own = not db.in_transaction
        if own:
            db.execute("BEGIN")
        try:
            # two subqueries: SQLite answers a lone max() or min() from the key's ends, both in one
            # SELECT by reading the whole log (0.7 ms at 20,000 entries, twice per hybrid search)
            top, low = db.execute(
                "SELECT coalesce((SELECT max(seq) FROM changes), 0), coalesce((SELECT min(seq) FROM changes), 0)"
            ).get
            if cache.seq == top:
                return
            rows = "SELECT c.id, c.day, c.layer, k.code FROM chunks c JOIN codes k ON k.hash = c.hash AND k.model = ?"
            whole_only = self.chunk_count() > ITEMS_UP_TO_CHUNKS  # a large index searches whole chunks only
            if cache.seq < 0 or low > cache.seq + 1 or top < cache.seq or whole_only != cache.whole_only:
                cache.reset(whole_only=whole_only)
                cursor = db.execute(rows + " ORDER BY c.id", (model,))
                while batch := list(itertools.islice(cursor, LOAD_BATCH)):  # never every row's bytes at once
                    cache.add(batch)
                # the load read every row's code through Python objects, freed now but kept by malloc's
                # arenas: 155 MB added at 100k chunks, 67 MB (the cache itself) after this
                malloc.trim()
            else:
                ids = [r[0] for r in db.execute("SELECT DISTINCT chunk FROM changes WHERE seq > ?", (cache.seq,))]
                for chunk_id in ids:
                    cache.remove(chunk_id)
                cache.add(
                    db.execute(rows + " WHERE c.id IN (SELECT value FROM json_each(?))", (model, json.dumps(ids)))
                )
                cache.compact()
            cache.seq = top
        finally:
            if own:
                db.execute("COMMIT")

    def newest_day(self, until: str | None = None) -> str | None:
        """The day of the newest daily file (YYYY-MM-DD), the reference for "yesterday" and "last Tuesday";
        with ``until``, the newest on or before it (a note whose name claims a day years ahead is no "today")."""
        newest = self._summarised().newest_day
        if until is None or newest is None or newest <= until:
            return newest
        return next(self.db.execute("SELECT max(day) FROM files WHERE day <= ?", (until,)))[0]

    def days_of(self, chunk_ids: Iterable[int]) -> dict[int, str]:
        """chunk id → its daily file's day, for the chunks that are in a daily file."""
        ids = list(chunk_ids)
        if not ids:
            return {}
        rows = self.db.execute(
            f"SELECT id, day FROM chunks WHERE day IS NOT NULL AND id IN ({','.join('?' * len(ids))})", ids
        )
        return dict(rows)

    def curated_chunks(self, limit: int = 2000) -> list[tuple[str, int, str]]:
        """(path, first line, text) of the chunks an agent curates (MEMORY.md and the core files): where a
        memory defines its names (:mod:`layers.local.text.glossary`).  Every search asks, so it reads only those
        files' chunks (:data:`CURATED_CHUNKS_SQL`)."""
        return list(self.db.execute(CURATED_CHUNKS_SQL, (limit,)))

    def chunks_of_days(self, limit: int, filters: Filters) -> list[Hit]:
        """Chunks of daily files in ``filters``' day range, newest day first, each file in order."""
        where, args = filters.sql()
        rows: Iterable[ChunkRow] = self.db.execute(
            "SELECT c.id, c.path, c.heading, c.line_start, c.line_end, c.text FROM chunks c "
            f"WHERE c.day IS NOT NULL{where} ORDER BY c.day DESC, c.path, c.seq LIMIT ?",
            (*args, limit),
        )
        return [Hit(*r, 0.0) for r in rows]

    # ------------------------------------------------------------ status

    def stats(self) -> IndexStats:
        db = self.db
        files, chunks = db.execute("SELECT count(*), coalesce(sum(chunks), 0) FROM files").get
        last = db.execute("SELECT max(indexed_at) FROM files").get
        return {
            "files": files,
            "chunks": chunks,
            "last_indexed": last,
            "pending_embeddings": self.pending_count(),
            "pending_items": self.pending_items_count(),
            "vectors": self.vector_count() if self.identity.embed_model else 0,
            "identity": self.identity.describe(),
        }


def _best_scores(
    rows: Iterable[tuple[int, bytes, int]], query_vec: np.ndarray, limit: int, offset: int, batch: int = 4096
) -> list[tuple[float, int]]:
    """(score, chunk id) of the ``limit`` best rows (id, vector blob, width): a row scores as its best passage."""
    best: list[tuple[float, int]] = []
    dim = query_vec.shape[0]
    cursor = iter(rows)
    while chunk := list(itertools.islice(cursor, batch)):
        ids = [r[0] for r in chunk]
        width = chunk[0][2]  # one identity, one row width
        if width < offset + dim:
            raise ValueError(f"stored vectors are {width}-d, a {dim}-d query at column {offset} does not fit")
        matrix = np.frombuffer(b"".join(r[1] for r in chunk), dtype=np.float32).reshape(-1, width)
        matrix = np.ascontiguousarray(matrix[:, offset : offset + dim])
        counts = np.fromiter((len(r[1]) // (4 * width) for r in chunk), dtype=np.int64, count=len(chunk))
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        scores = np.maximum.reduceat(np.dot(matrix, query_vec), starts)  # np.dot: BLAS; `@` was far slower
        top = np.argsort(-scores)[:limit]
        best.extend((float(scores[i]), ids[i]) for i in top)
        best = sorted(best, reverse=True)[:limit]
    return best


def open_for_reading(path: Path) -> LocalIndex:
    """Open an index read-only whatever embedding model built it (full-text search only needs
    the tokenizer and chunker to match)."""
    found = inspect_file(path)
    if found.kind == "missing":
        raise FileNotFoundError(f"no index at {path}")
    if found.kind in ("sqlite", "not a file"):
        raise ForeignFile(path, found)
    if found.kind != "index":
        raise IndexStale(f"{path} is not a readable memstrata index ({found.describe()})")
    db = _connect(path, readonly=True)
    try:
        meta = dict(db.execute("SELECT key, value FROM meta"))
    except apsw.Error as exc:
        raise IndexStale(f"{path} is not a readable memstrata index ({exc})") from None
    finally:
        db.close()
    return LocalIndex(path, Identity(embed_model=meta.get("embed_model", "")), readonly=True, verify=False)


def _remove_sidecars(path: Path) -> None:
    for suffix in ("-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def rebuild(
    path: Path,
    identity: Identity,
    documents: Iterable[Document],
    *,
    progress: Callable[[int], None] | None = None,
    before_swap: Callable[[], None] | None = None,
    owned: bool = False,
) -> RebuildStats:
    """Build a fresh index next to ``path`` and swap it in atomically.

    The old file is untouched (and can keep answering) until ``before_swap`` is
    called: the caller closes its connections there.  Vectors of the old file
    are carried over when it is readable, so a rebuild does not re-embed.
    A file at ``path`` that is not an index of ours is never replaced
    (:class:`ForeignFile`), unless the caller knows it created it (``owned``:
    a damaged index of ours); another program's SQLite database never is.
    """
    started = time.monotonic()
    found = check_replaceable(path, owned)
    private_dirs(path.parent)
    staging = path.with_name(path.name + ".rebuild")
    left = inspect_file(staging)  # a rebuild that was interrupted; anything else there is not ours
    if left.kind not in ("missing", "index", "empty", "unreadable"):
        raise ForeignFile(staging, left)
    with contextlib.suppress(FileNotFoundError):
        staging.unlink()
    _remove_sidecars(staging)
    reused = 0
    new = LocalIndex(staging, identity)
    try:
        new.db.execute("PRAGMA journal_mode=DELETE")  # no -wal beside the file that gets renamed
        if found.kind == "index":
            reused = _copy_vectors(new, path)
        with new.bulk(fresh=True):
            for count, (doc, prepared) in enumerate(prepared_documents(documents), start=1):
                new.update_document(doc, prepared)
                if progress:
                    progress(count)
        with write_transaction(new.db):  # the items and vectors of chunks the files no longer hold
            for table in _BY_HASH:
                new.db.execute(f"DELETE FROM {table} WHERE hash NOT IN (SELECT hash FROM chunks)")
        _vacuum_when_mostly_free(new.db)  # every old vector was carried over: those of no chunk leave their pages
        stats = new.stats()
    finally:
        new.close()
    if before_swap:
        before_swap()
    try:
        check_replaceable(path, owned)  # once more: what lies there now is what gets replaced
    except ForeignFile:
        with contextlib.suppress(FileNotFoundError):
            staging.unlink()
        raise
    _remove_sidecars(path)
    os.replace(staging, path)
    return {
        **stats,
        "files_indexed": stats["files"],
        "vectors_reused": reused,
        "seconds": round(time.monotonic() - started, 3),
    }


def _copy_vectors(new: LocalIndex, old_path: Path) -> int:
    """Carry cached vectors over from an old index when it can still be read."""
    try:
        new.db.execute("ATTACH DATABASE ? AS old", (f"file:{old_path}?mode=ro",))
    except apsw.Error:
        return 0
    try:
        with write_transaction(new.db):
            new.db.execute("INSERT OR IGNORE INTO vectors SELECT hash, model, dim, vec FROM old.vectors")
            old_tables = {r[0] for r in new.db.execute("SELECT name FROM old.sqlite_schema WHERE type = 'table'")}
            if "codes" in old_tables:
                new.db.execute("INSERT OR IGNORE INTO codes SELECT hash, model, code FROM old.codes")
            if "pending_items" in old_tables:  # a whole vector carried over still owes its items (pruned after)
                new.db.execute("INSERT OR IGNORE INTO pending_items SELECT hash, queued_at FROM old.pending_items")
            _add_missing_codes(new.db)
        return new.db.execute("SELECT count(*) FROM vectors").get
    except apsw.Error:
        return 0
    finally:
        with contextlib.suppress(apsw.Error):
            new.db.execute("DETACH DATABASE old")


def _vacuum_when_mostly_free(db: apsw.Connection) -> bool:
    """Rewrite the file when over a quarter of it is free pages (and at least VACUUM_MIN_FREE_PAGES).

    Day to day a removed vector's pages stay in SQLite's freelist and the next rows written
    reuse them, so the file holds the live vectors plus what one burst of edits frees; only a
    pass that freed much at once (a rebuild over an old file, an earlier version's leftovers)
    is worth rewriting the whole file for."""
    free = db.execute("PRAGMA freelist_count").get
    if free < VACUUM_MIN_FREE_PAGES or free * 4 <= db.execute("PRAGMA page_count").get:
        return False
    db.execute("VACUUM")
    return True


def _add_missing_codes(db: apsw.Connection, batch: int = 2048) -> int:
    """Codes for stored vectors that have none (an index of schema 1 carried over): computed
    from the vectors, never by embedding again."""
    added = 0
    cursor = db.execute(
        "SELECT v.hash, v.model, v.dim, v.vec FROM vectors v "
        "WHERE NOT EXISTS (SELECT 1 FROM codes k WHERE k.hash = v.hash AND k.model = v.model)"
    )
    while rows := list(itertools.islice(cursor, batch)):
        db.executemany(
            "INSERT OR REPLACE INTO codes VALUES(?, ?, ?)",
            [(h, m, quantize(np.frombuffer(vec, dtype=np.float32).reshape(-1, dim))) for h, m, dim, vec in rows],
        )
        added += len(rows)
    return added
