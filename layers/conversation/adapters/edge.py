"""Every call into Qdrant Edge (``qdrant-edge-py``, pinned exactly) lives here.

Edge is Qdrant's own engine in-process: one shard directory holds one collection (segments with
HNSW and payload indexes, a write-ahead log).  The binding is a beta whose API drifts between
releases, so nothing else in the repository imports it: the rest talks to :class:`EdgeCollection`,
whose operations are each exercised by tests/layers/conversation/test_edge_compat.py, and the next
Edge release is one diff to this file.

Things the engine does that callers must know (seen with 0.9.0):

- a second ``EdgeShard.load`` of a directory that is open raises a bare ``Exception`` (WAL
  "WouldBlock") *and* leaves the first handle unable to flush: so a lock file beside the shard is
  taken before the engine ever sees the path, and a second open gets :class:`EdgeLockedError`;
- ``optimize()`` blocks until the segments are rebuilt, *holding the GIL* (a Python thread beside
  it ran 2 times in 11.6 s at 10k), and vectors are searched by brute force until it has run.  So it
  runs in a child process on a copy of the shard (``start_optimize``) while this handle keeps
  serving and journals its writes; ``finish_optimize`` loads the optimized copy beside it, applies
  the journal and makes it the current generation (see GEN_DIR and docs/edge.md);
- every engine call holds the GIL, a load or a close of a 50k shard for 0.2-0.4 s: the swap keeps
  to one load, and the replaced shard is closed in a later turn (``tidy``);
- point ids come back as ``uuid.UUID``; they are handed out here as strings;
- a vector of the wrong size raises a bare ``Exception`` ("Vector dimension error"), a malformed
  id a ``ValueError``;
- there is no snapshot creation: a consistent copy is the directory of a flushed shard;
- storage is memory-mapped: a write that meets a full file system kills the process with SIGBUS
  (seen on an 8 MB tmpfs) instead of raising.  So every write first checks that the shard's file
  system has ``min_free`` bytes left, plus what the WAL's sparse segments may still claim (a load
  fills a 32 MiB segment in: a shard that wrote 1 MB needs 33 MB free to reopen), and raises
  ``OSError(ENOSPC)`` otherwise, before the engine is called.  That is a check, not a guarantee:
  something else filling the disk between the check and the write still crashes the process, and
  so does a disk filled in the second after an update returns, before the engine's own flush has
  written the update's pages into its segment files (:meth:`EdgeCollection.flush` does it at once).

Filters are given in mem0's dictionary form (``{"agent_id": "a", "project_id": {"in": [...]},
"NOT": [{"expires_at": {"lt": 5}}]}``), the form the broker, cleanup and mem0 already speak, and
translated by :func:`to_filter` (layers/conversation/policy/filters.py, shared with the remote server's path).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from layers.conversation.policy.filters import to_edge

ENGINE_VERSION = "0.9.0"  # the pin in pyproject.toml; a different engine is refused by the compat test
LOCK_SUFFIX = ".lock"
# Free space a write insists on: on tmpfs a new payload index alone takes ~2 MiB, a WAL segment is
# 32 MiB but sparse (filled as written).  optimize() rewrites segments: it wants their size again.
MIN_FREE_BYTES = 16 << 20
WAL_SEGMENT_BYTES = 32 << 20  # the engine's WAL segment size (sparse when created)
# A shard's files live in a generation directory, <parent>/.gen/<name>.<N>, and <parent>/<name> is a
# relative symlink naming the current one: an optimize copies the shard into generation N+1, the child
# optimizes it there, and the swap loads it there (while generation N still answers) and replaces the
# link, so no open shard's directory is ever renamed (the engine keeps its paths).  The link is the
# one truth: any other generation is an unfinished copy or a replaced shard, removed at the next open.
# Dot-directories are skipped by backups (which copy what <name> names).  <parent>/.optimize/ holds
# the child's stderr (<name>.log), and <name>.replaced / <name>.swapped of the layout before
# generations (an interrupted swap of that layout is still repaired at open).
GEN_DIR = ".gen"
WORK_DIR = ".optimize"
NEXT_LINK_SUFFIX = ".next"  # <parent>/<name>.next: the new link, renamed over <name> (atomic)
# A running optimize child is stopped (SIGSTOP) for the length of each read and continued after it:
# its HNSW build competes with a brute-force search for the shared cache and memory bandwidth (a
# search's p95 doubled beside it; a spinning process beside it cost nothing; see docs/edge.md).  It is
# held at most this share of its run (after a first YIELD_GRACE_S), so a stream of reads slows an
# optimize but cannot starve it.
YIELD_SHARE = 0.5
YIELD_GRACE_S = 1.0
JOURNAL_MAX = 20_000  # writes kept for one swap; past that the optimize is given up (retried later)
# The HNSW settings, measured at 50k on bench_edge's data with the broker's three filters (public
# 12.5k points, project "infra" 6.25k, private of agent1 10k): recall@10 against exact numpy search
# over 47 queries, p95 of the three raw queries; a loaded 2-core host, so latency is +-2x (see
# docs/edge.md for the table).  Engine defaults (m 16, ef_construct 100, full_scan_threshold
# 10,000 KB, search ef then ef_construct) send the public and private phases through the graph:
# recall 0.90 / 0.95.  Search ef 256: 0.98 / 0.99; ef 512: 0.998 / 0.998 at p95 ~25 ms; m 32 +
# ef_construct 200: 0.97-0.98; payload_m 16: no better; ACORN: 0.99 at p50 ~17 ms.  A full-scan
# threshold of 20,000 KB (~13k 384-d vectors) makes each of the three an exact scan of its subset
# through the payload index: recall 1.000, p50 7.7-15 ms p95 9.6-20 ms.  A subset past that (a
# store well over 50k) goes through the graph, searched with ef 256 (0.90 -> 0.98 above).
# The threshold is fixed in a segment when it is built: a shard made before gets these settings
# written at its next load, and they take effect at its next optimize.
HNSW_FULL_SCAN_KB = 20_000
HNSW_EF = 256
# The shard's search pool (per-segment reads in parallel): the engine sizes it from the host's CPUs
# (8 threads on this 2-core guest), each thread with its own stack and malloc arena; a shard has
# a few segments and the daemon asks one search at a time (the store thread).  Kept in the shard's
# edge_config.json, so the optimize child and a load without a config use it too.
SEARCH_THREADS = 2

KEYWORD = "keyword"
FLOAT = "float"
_SCHEMAS = {KEYWORD: qe.PayloadSchemaType.Keyword, FLOAT: qe.PayloadSchemaType.Float}
# Payload indexes are kept on disk (``Memory.Cold``: mapped, read into the page cache as filters reach
# them) rather than in the heap.  At the engine's default each indexed point cost ~0.3 KB of anonymous
# memory per optimized segment, which grew with the data for the daemon's life (docs/memory.md, "Payload
# indexes on disk"); on disk the kernel can drop those pages under pressure, and a filter reads them back.
_INDEX_PARAMS: dict[str, Callable[[], qe.KeywordIndexParams | qe.FloatIndexParams]] = {
    KEYWORD: lambda: qe.KeywordIndexParams(memory=qe.Memory.Cold),
    FLOAT: lambda: qe.FloatIndexParams(memory=qe.Memory.Cold),
}


class EdgeLockedError(RuntimeError):
    """The shard is open elsewhere (another process, or another handle in this one).

    ``here``: the holder is another handle of this process.  That is never an operator's mistake but
    a handle not yet closed (a store being replaced by a reload): worth trying again, never fatal.
    """

    def __init__(self, message: str, here: bool = False) -> None:
        super().__init__(message)
        self.here = here


# The shard paths this process holds open (resolved): tells "another handle here" from "another process".
_HELD_HERE: set[str] = set()
_HELD_LOCK = threading.Lock()


class EdgeError(RuntimeError):
    """The engine failed (its message kept); ValueError is kept for requests it refuses."""


@dataclass(frozen=True)
class Hit:
    """A point as the engine returns it: id as a string, payload, score (searches), vector (if asked)."""

    id: str
    payload: dict
    score: float | None = None
    vector: list[float] | None = None


def _hit(point: Any, score: float | None = None) -> Hit:
    vector = point.vector
    if isinstance(vector, dict):  # named vectors: ours is the default one
        vector = vector.get("")
    return Hit(str(point.id), dict(point.payload or {}), score, list(vector) if vector is not None else None)


# ------------------------------------------------------------------ filters


def to_filter(filters: Mapping[str, Any] | None) -> qe.Filter | None:
    """mem0's filter dictionary as an Edge ``Filter`` (layers/conversation/policy/filters.py holds the translation)."""
    return to_edge(filters)


# ------------------------------------------------------------------ the collection


class EdgeCollection:
    """One Edge shard at ``path`` holding ``dim``-dimensional cosine vectors; created when absent.

    Not opened twice: a lock file (``<path>.lock``, flock) is held while it is open.
    """

    def __init__(
        self, path: Path, dim: int, min_free: int = MIN_FREE_BYTES, cold: bool = False, wal: bool = True
    ) -> None:
        self.path = Path(path)
        self.dim = dim
        self.min_free = min_free
        self.cold = cold
        self.wal = wal
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock_fd = os.open(str(self.path) + LOCK_SUFFIX, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._held_key = os.path.realpath(str(self.path) + LOCK_SUFFIX)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            with _HELD_LOCK:
                here = self._held_key in _HELD_HERE
            holder = "another handle of this process" if here else "another process or handle"
            raise EdgeLockedError(f"the embedded store at {self.path} is open in {holder}", here=here) from None
        with _HELD_LOCK:
            _HELD_HERE.add(self._held_key)
        self._work = self.path.parent / WORK_DIR
        self._gens = self.path.parent / GEN_DIR
        self._next_link = self.path.parent / f"{self.path.name}{NEXT_LINK_SUFFIX}"
        # the layout before generations (kept for repairing a swap it interrupted)
        self._legacy_copy = self._work / f"{self.path.name}.optimizing"
        self._replaced = self._work / f"{self.path.name}.replaced"
        self._swapped = self._work / f"{self.path.name}.swapped"
        self._child: subprocess.Popen | None = None
        self._next: Path | None = None  # the generation being optimized (the copy), while an optimize runs
        self._journal: list | None = None  # the writes since the copy was taken, while an optimize runs
        # (shard, its directory or None: keep the files) a swap replaced, closed by ``tidy``
        self._retired: tuple[Any, Path | None] | None = None
        self._child_started = 0.0  # time.monotonic() the child was started
        self._held_s = 0.0  # how long reads have held the child stopped
        self._holding = False  # inside ``reading``: the child is stopped already
        self.writes = 0  # points written through this handle (the optimize schedule counts them)
        self.last_write = 0.0  # time.monotonic() of the last write
        self._remover: threading.Thread | None = None  # removing a replaced generation's files
        self._shard = None
        try:
            self.recovered = self._recover()
            self._live_dir = self._current()  # the generation the engine has open
            self._shard = self._open()
        except BaseException:
            with _HELD_LOCK:
                _HELD_HERE.discard(self._held_key)
            os.close(self._lock_fd)
            raise

    def _recover(self) -> str:
        """Put the directory in the generation layout and drop what an interrupted optimize left; what was done.

        Under the lock, before the engine sees the path.  The link ``<name>`` names the truth; a
        ``<name>.next`` link beside it is a swap's (or a conversion's) new link: dropped when
        ``<name>`` is there, renamed in when it is not (the conversion moved the directory first).
        A real directory at ``<name>`` (the layout before generations) is moved into generation 0.
        """
        done: list[str] = []
        self._recover_legacy_swap(done)
        if self._next_link.is_symlink():
            if self.path.is_symlink() or self.path.exists():
                self._next_link.unlink()
            else:
                os.rename(self._next_link, self.path)
                _fsync_dir(self.path.parent)
                done.append("completed the move into generation directories")
        if self.path.is_dir() and not self.path.is_symlink():
            self._gens.mkdir(mode=0o700, exist_ok=True)
            first = self._gens / f"{self.path.name}.0"
            if first.exists():
                shutil.rmtree(first)  # a copy left by an optimize: the directory at <name> is the truth
            os.symlink(os.path.relpath(first, self.path.parent), self._next_link)
            _fsync_dir(self.path.parent)
            os.rename(self.path, first)
            os.rename(self._next_link, self.path)
            _fsync_dir(self.path.parent)
            _fsync_dir(self._gens)
        elif not self.path.is_symlink():  # a new shard: its link first (dangling until created)
            self._gens.mkdir(mode=0o700, exist_ok=True)
            stale = self._generations()
            if stale:
                raise EdgeError(
                    f"{self.path} is missing but {self._gens} holds its generations "
                    f"({', '.join(p.name for p in stale)}): link the current one as {self.path}"
                )
            os.symlink(os.path.join(GEN_DIR, f"{self.path.name}.0"), self.path)
            _fsync_dir(self.path.parent)
        current = os.path.realpath(self._current())
        for gen in self._generations():
            if os.path.realpath(gen) != current:  # both resolved: compared as the same file system path
                shutil.rmtree(gen)
                done.append(f"removed {gen.name}")
        return "; ".join(done)

    def _recover_legacy_swap(self, done: list[str]) -> None:
        """The repair of a swap interrupted in the layout before generations (a shard renamed aside).

        There the replaced shard (flushed and closed before the swap's first rename) stayed the truth
        until the swapped-in copy held the journal too, which the ``<name>.swapped`` marker said.
        """
        if (self._replaced / "edge_config.json").is_file() and not self._swapped.exists():
            if self.path.exists():
                shutil.rmtree(self.path)  # the copy, maybe without the writes made while it was optimized
            os.rename(self._replaced, self.path)
            _fsync_dir(self.path.parent)
            done.append("put back the shard an interrupted swap had moved aside")
        for leftover in (self._legacy_copy, self._replaced):
            if leftover.exists():
                shutil.rmtree(leftover)
                done.append(f"removed {leftover.name}")
        self._swapped.unlink(missing_ok=True)

    def _current(self) -> Path:
        """The generation directory the link names (it may not exist yet: a shard not yet created).

        Spelled from ``path`` (not resolved): a parent reached through a symlink stays as given.
        """
        return Path(os.path.normpath(self.path.parent / os.readlink(self.path)))

    def _generations(self) -> list[Path]:
        pattern = re.compile(re.escape(self.path.name) + r"\.(\d+)$")
        if not self._gens.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self._gens.iterdir() if (m := pattern.match(p.name))]
        return [p for _, p in sorted(found, key=lambda numbered: numbered[0])]

    def _next_generation(self) -> Path:
        numbers = [int(p.name.rsplit(".", 1)[1]) for p in [*self._generations(), self._current()]]
        return self._gens / f"{self.path.name}.{max(numbers) + 1}"

    def _open(self) -> qe.EdgeShard:
        """The engine on the current generation, by its own path (the link is never handed to it)."""
        real = self._current()
        if (real / "edge_config.json").is_file():
            stored = stored_dim(real)
            if stored is not None and stored != self.dim:
                raise ValueError(f"the shard at {self.path} holds {stored}-dimensional vectors, not {self.dim}")
            _check_room(real, self.min_free)
            # given again at each load: a shard made before (or with other settings) has them written
            # into its edge_config.json here, and its next optimize rebuilds the graph with them
            return _engine(lambda: qe.EdgeShard.load(str(real), self._config()))
        _check_room(self.path.parent, self.min_free + WAL_SEGMENT_BYTES)
        return _engine(lambda: qe.EdgeShard.create(str(real), self._config()))

    def _config(self) -> qe.EdgeConfig:
        """Cosine vectors of ``dim``, and the HNSW settings measured above (HNSW_FULL_SCAN_KB).

        ``cold``: the vectors and the graph are left on disk, read (and kept in the page cache) as searches
        reach them, rather than read whole when the shard loads: for a copy searched now and then (a spoke's
        replica of the hub, 56 MB of vectors at 36,500 memories that a load no longer reads).

        ``wal`` False (fixed when the shard is created): no write-ahead log, so a write is durable once
        ``flush`` returns, not before.  For a copy that records how far it got only after a flush, and
        applies again what came after (the replica): a WAL there holds what the segments already do, and
        its last two 32 MB segments are read whole at every load (53 MB mapped at 36,500 memories)."""
        placement = qe.Memory.Cold if self.cold else None  # None: the engine's default (read at load)
        hnsw = qe.HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=HNSW_FULL_SCAN_KB, memory=placement)
        return qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=self.dim, distance=qe.Distance.Cosine, memory=placement),
            hnsw_config=hnsw,
            max_search_threads=SEARCH_THREADS,
            wal_enabled=None if self.wal else False,  # None: the engine's default, a WAL
        )

    # writes -----------------------------------------------------------------

    def upsert(self, points: Iterable[tuple[str, Sequence[float], Mapping]]) -> None:
        """Insert or replace points (id, vector, payload) in one update (one WAL record)."""
        batch = [qe.Point(_point_id(pid), [float(x) for x in vector], dict(payload)) for pid, vector, payload in points]
        if batch:
            self._update(qe.UpdateOperation.upsert_points(batch), len(batch))

    def delete(self, ids: Sequence[str]) -> None:
        if ids:
            targets: list[int | uuid.UUID | str] = [_point_id(i) for i in ids]
            self._update(qe.UpdateOperation.delete_points(targets), len(targets))

    def delete_where(self, filters: Mapping[str, Any]) -> None:
        flt = to_filter(filters)
        if flt is None:
            raise ValueError("delete_where needs a filter (an empty one would delete everything)")
        self._update(qe.UpdateOperation.delete_points_by_filter(flt))

    def set_payload(self, point_id: str, payload: Mapping) -> None:
        """Merge ``payload`` into the point's payload (other keys kept)."""
        pid = _point_id(point_id)
        self._update(qe.UpdateOperation.set_payload([pid], dict(payload)))

    def set_payload_of(self, point_ids: Sequence[str], payload: Mapping) -> None:
        """Merge the same ``payload`` into every one of ``point_ids``: one update (one WAL record), all or none."""
        targets: list[int | uuid.UUID | str] = [_point_id(i) for i in point_ids]
        if targets:
            self._update(qe.UpdateOperation.set_payload(targets, dict(payload)), len(targets))

    def replace_payload(self, point_id: str, payload: Mapping) -> None:
        pid = _point_id(point_id)
        self._update(qe.UpdateOperation.overwrite_payload([pid], dict(payload)))

    def set_vector(self, point_id: str, vector: Sequence[float]) -> None:
        pv = qe.PointVectors(_point_id(point_id), [float(x) for x in vector])
        self._update(qe.UpdateOperation.update_vectors([pv]))

    def ensure_index(self, field: str, kind: str) -> None:
        """A payload index on ``field`` (``keyword`` or ``float``), on disk; nothing when it is there as such.

        An index an earlier version made in the heap (or of another kind) is dropped and made again: the
        engine keeps an index's placement as it was created."""
        info = _engine(lambda: self._live().info().payload_schema).get(field)
        if info is not None:
            if info.data_type == _SCHEMAS[kind] and _on_disk(info):
                return
            self._update(qe.UpdateOperation.delete_field_index(field))
        self._update(qe.UpdateOperation.create_field_index(field, _INDEX_PARAMS[kind]()))

    # reads ------------------------------------------------------------------

    def retrieve(
        self, ids: Sequence[str], with_payload: bool | list[str] = True, with_vector: bool = False
    ) -> list[Hit]:
        if not ids:
            return []
        targets: list[int | uuid.UUID | str] = [_point_id(i) for i in ids]
        return [_hit(p) for p in self._read(lambda: self._live().retrieve(targets, with_payload, with_vector))]

    def search(
        self, vector: Sequence[float], limit: int, filters: Mapping[str, Any] | None = None, exact: bool = False
    ) -> list[Hit]:
        """The ``limit`` nearest points (cosine similarity as the score, highest first) that match ``filters``."""
        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest([float(x) for x in vector]),
            filter=to_filter(filters),
            with_payload=True,
            params=qe.SearchParams(exact=True) if exact else qe.SearchParams(hnsw_ef=HNSW_EF),
        )
        return [_hit(p, p.score) for p in self._read(lambda: self._live().query(request))]

    def scroll(
        self,
        filters: Mapping[str, Any] | None = None,
        limit: int = 256,
        offset: str | None = None,
        with_payload: bool | list[str] = True,
        with_vector: bool = False,
    ) -> tuple[list[Hit], str | None]:
        """One page in id order from ``offset`` (inclusive), and the id the next page starts at (None: done)."""
        request = qe.ScrollRequest(
            offset=_point_id(offset) if offset else None,
            limit=limit,
            filter=to_filter(filters),
            with_payload=with_payload,
            with_vector=with_vector,
        )
        records, next_offset = self._read(lambda: self._live().scroll(request))
        return [_hit(r) for r in records], (str(next_offset) if next_offset is not None else None)

    def count(self, filters: Mapping[str, Any] | None = None) -> int:
        request = qe.CountRequest(exact=True, filter=to_filter(filters))
        return int(self._read(lambda: self._live().count(request)))

    def indexes(self) -> dict[str, str]:
        """The payload indexes: field → ``keyword`` / ``float`` / the engine's name for other kinds."""
        schema = _engine(lambda: self._live().info().payload_schema)
        names = {v: k for k, v in _SCHEMAS.items()}
        return {field: names.get(info.data_type, str(info.data_type)) for field, info in schema.items()}

    def info(self) -> dict:
        info = _engine(lambda: self._live().info())
        return {
            "points": info.points_count,
            "segments": info.segments_count,
            "indexed_vectors": info.indexed_vectors_count,
        }

    # upkeep -----------------------------------------------------------------

    def optimize(self) -> bool:
        """Build the HNSW index and merge segments in this process; blocks it (GIL held) until done.

        For tests and tools only: the store optimizes off the request path (``start_optimize``).
        """
        return bool(self._write(lambda: self._live().optimize(), extra=_disk_usage(self.path / "segments")))

    @property
    def optimizing(self) -> bool:
        """An optimize was started and not yet finished or cancelled (its child may have ended)."""
        return self._child is not None

    @property
    def optimize_pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    def start_optimize(self) -> None:
        """Optimize a copy of the shard in a child process (nice 19, one core); returns once the copy is taken.

        Runs on the thread that owns this handle: the copy (a ``cp`` of the directory into the next
        generation, no engine call) is the only pause, and no write can come during it.  No flush
        first: between two calls the shard's files are what a SIGKILL would leave, which its WAL
        makes whole at the child's load (a flush held the GIL 0.07-0.55 s at 50k; the copy, 0.14 s,
        does not).  A shard with no WAL (``wal``) is flushed first: nothing else would make its copy
        whole.  From the copy on, every write goes to this shard as before and is journalled too.
        ``finish_optimize`` swaps the copy in; ``cancel_optimize`` drops it.  The child gets
        SIGKILL when the thread that started it ends (PR_SET_PDEATHSIG).
        """
        if self._child is not None:
            return
        self.tidy()
        if not self.wal:  # no log makes the copy whole at the child's load: what is written must be in its files
            self.flush()
        live = self._live_dir
        size = _disk_usage(live)
        _check_room(live, self.min_free + 2 * size)  # the copy, and the optimize's rewrite of it
        self._work.mkdir(mode=0o700, exist_ok=True)
        target = self._next_generation()
        _copy_tree(live, target)
        self._next, self._journal = target, []
        self._held_s, self._child_started = 0.0, time.monotonic()
        with open(self._work / f"{self.path.name}.log", "wb") as log_file:
            try:
                self._child = subprocess.Popen(
                    [sys.executable, "-P", __file__, "optimize", str(target), str(os.getpid())],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log_file,
                    close_fds=True,
                    env={**os.environ, "RAYON_NUM_THREADS": "1"},
                )
            except BaseException:
                self._next = self._journal = None
                shutil.rmtree(target, ignore_errors=True)
                raise

    def finish_optimize(self) -> dict | None:
        """None while the child runs; once it has ended, the optimized copy swapped in.

        Returns ``{"journal": writes re-applied, "pid": the child's}``; raises EdgeError (the
        child failed, or the swap could not complete: the live shard is then kept as it was).
        The shard the swap replaced is closed by the next ``tidy`` (a separate turn: closing a
        shard holds the GIL about as long as loading one).
        """
        child = self._child
        if child is None or child.poll() is None:
            return None
        journal, target = self._journal or [], self._next
        assert target is not None  # set with the child, by start_optimize
        self._child = self._journal = self._next = None
        if child.returncode != 0:
            reason = _tail(self._work / f"{self.path.name}.log")
            shutil.rmtree(target, ignore_errors=True)
            raise EdgeError(f"the optimize process ended with {_exit_text(child.returncode)}: {reason}")
        self._swap(target, journal)
        return {"journal": len(journal), "pid": child.pid}

    def cancel_optimize(self) -> None:
        """Stop a running optimize (SIGKILL) and drop its copy and journal; the live shard is untouched."""
        child, target = self._child, self._next
        self._child = self._journal = self._next = None
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGKILL)
            child.wait()
        if target is not None:
            shutil.rmtree(target, ignore_errors=True)

    def _swap(self, target: Path, journal: list) -> None:
        """The optimized generation loaded beside the live shard, given the journal, then named by the link.

        The live shard answers until the link is replaced (``<name>.next`` renamed over ``<name>``,
        atomic); before that a crash leaves the live generation the truth and the new one a leftover
        for ``_recover``, after it the new one holds every acknowledged write.  Nothing is renamed but
        the link, so the live shard need not be closed first.

        A power cut must find the same (issue 45): the link may only name files the disk has.  So
        before the rename the new generation is flushed (the journal's writes: the daemon's
        checkpoint may already have trimmed its log of them, having flushed the live shard) and its
        whole tree synced, files and directories (the ``cp`` copy and the child's rewrite: the child
        synced them already, ``_optimize_child``, so this is mostly clean pages), and so is the
        directory holding it; after the rename the link's directory is synced, and only then may
        ``tidy`` remove the replaced generation.
        """
        _check_room(target, self.min_free)
        fresh = None
        try:
            fresh = _engine(lambda: qe.EdgeShard.load(str(target), self._config()))
            for operation in journal:
                _check_room(target, self.min_free)
                _engine(lambda op=operation: fresh.update(op))
            _engine(fresh.flush)
            _sync_tree(target)
            _fsync_dir(self._gens)  # the new generation's own name
            self._next_link.unlink(missing_ok=True)
            os.symlink(os.path.relpath(target, self.path.parent), self._next_link)
            os.rename(self._next_link, self.path)  # from here the new generation is the truth
        except BaseException:
            if fresh is not None:
                with contextlib.suppress(Exception):
                    fresh.close()
            self._next_link.unlink(missing_ok=True)
            shutil.rmtree(target, ignore_errors=True)
            raise
        replaced = self._shard
        retired_dir: Path | None = self._live_dir
        self._shard, self._live_dir = fresh, target  # the link already names what this handle serves
        try:
            _fsync_dir(self.path.parent)  # the new link on disk before the old generation may go
        except OSError:
            retired_dir = None  # closed by tidy, its files left to the next open's ``_recover``
            raise
        finally:
            self._retired = (replaced, retired_dir)

    def tidy(self) -> None:
        """Close the shard a swap replaced and remove its generation (the files go in the background)."""
        retired, self._retired = self._retired, None
        if retired is None:
            return
        shard, directory = retired
        with contextlib.suppress(Exception):
            _engine(shard.close)
        del shard, retired
        if directory is None:  # its link's rename was never synced: ``_recover`` decides at the next open
            return
        # The engine frees the replaced shard into malloc, which keeps it otherwise (+51 MB instead of
        # +102 MB at 50k, docs/memory.md).  Imported here: this file also runs as the optimize child's
        # script (``python -P edge.py``), which has only the standard library and the engine.
        from layers.common import malloc

        malloc.trim()
        self._remover = threading.Thread(target=shutil.rmtree, args=(directory, True), name="edge-tidy", daemon=True)
        self._remover.start()

    def flush(self) -> None:
        """Everything written so far onto the segment files (the WAL already has it)."""
        _engine(lambda: self._live().flush())

    def close(self) -> None:
        """Stop any optimize, flush and release the shard and its lock; a second close does nothing."""
        if self._shard is None:
            return
        try:
            self.cancel_optimize()
            self.tidy()
            _engine(lambda: self._shard.flush())
            _engine(lambda: self._shard.close())
        finally:
            self._shard = None
            if self._remover is not None:
                self._remover.join()
            with _HELD_LOCK:
                _HELD_HERE.discard(self._held_key)
            os.close(self._lock_fd)

    @property
    def closed(self) -> bool:
        return self._shard is None

    def _update(self, operation, points: int = 1) -> None:
        """One update (of ``points`` points) on the live shard; journalled while an optimize runs, for its copy."""
        self._write(lambda: self._live().update(operation))
        self.writes += points
        self.last_write = time.monotonic()
        if self._journal is not None:
            self._journal.append(operation)
            if len(self._journal) > JOURNAL_MAX:
                self.cancel_optimize()  # too many writes to hold: the next optimize starts afresh

    @contextlib.contextmanager
    def reading(self):
        """A running optimize child held stopped for the block (see YIELD_SHARE); every read is in one.

        The store holds it across the broker's three phases: stopping and continuing it once per
        phase left the search's p95 at 36 ms against 28 ms held once (50k, alternating windows).  A
        child stopped by someone else (state ``T``: a test holding it) is left as it is.
        """
        child = self._stop_child_for_a_read()
        if child is None:
            yield
            return
        started = time.monotonic()
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGCONT)
            self._held_s += time.monotonic() - started

    def _stop_child_for_a_read(self) -> subprocess.Popen | None:
        """The optimize child, stopped now for a read; None when there is none to stop.

        None too when a read holds it already, when reads have had their share of its run
        (YIELD_GRACE_S, YIELD_SHARE), or when it is stopped or gone already.
        """
        child = self._child
        if self._holding or child is None or child.returncode is not None:
            return None
        budget = YIELD_GRACE_S + YIELD_SHARE * (time.monotonic() - self._child_started)
        if self._held_s > budget or _stopped(child.pid):
            return None
        try:
            os.kill(child.pid, signal.SIGSTOP)
        except ProcessLookupError:
            return None
        return child

    def _read(self, call):
        with self.reading():
            return _engine(call)

    def _write(self, call, extra: int = 0):
        """``call`` when the file system has room for it (see the module's note on SIGBUS), else ENOSPC."""
        _check_room(self.path, self.min_free + extra)
        return _engine(call)

    def _live(self) -> qe.EdgeShard:
        if self._shard is None:
            raise EdgeError(f"the shard at {self.path} is closed")
        return self._shard


def stored_dim(path: Path) -> int | None:
    """The vector size a shard directory was created with (from its config file), None if unreadable."""
    try:
        config = json.loads((Path(path) / "edge_config.json").read_text())
        vectors = config.get("vectors") or {}
        params: Any = vectors.get("") if isinstance(vectors, dict) and "" in vectors else vectors
        return int(params["size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _check_room(path: Path, wanted: int) -> None:
    """OSError (ENOSPC/EROFS, naming ``path``) unless its file system has ``wanted`` bytes + the WAL's debt free."""
    try:
        st = os.statvfs(path)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    if st.f_flag & os.ST_RDONLY:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
    debt = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(Path(path) / "wal"):
            info = entry.stat(follow_symlinks=False)
            debt += max(0, info.st_size - info.st_blocks * 512)
    if st.f_bavail * st.f_frsize < wanted + debt:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def _copy_tree(source: Path, target: Path) -> None:
    """A copy of a (flushed) shard directory: reflinked where the file system can, holes kept sparse."""
    try:
        subprocess.run(
            ["cp", "-a", "--reflink=auto", "--sparse=always", str(source), str(target)],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        shutil.rmtree(target, ignore_errors=True)
        detail = getattr(exc, "stderr", b"") or b""
        raise OSError(errno.EIO, f"copying {source} failed: {detail.decode(errors='replace').strip() or exc}") from None


def _stopped(pid: int) -> bool:
    """The process is stopped (``T``: SIGSTOP) or gone (a zombie, or reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b") ", 1)[1][:1]
    except (OSError, IndexError):
        return True
    return state in (b"T", b"t", b"Z", b"X")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_tree(root: Path) -> None:
    """fsync every file and directory under ``root`` (``root`` too), deepest first.

    A generation the link is about to name must be on the disk whole, not in the page cache: ``cp``
    and the engine write without syncing what they do not themselves rewrite.  Here, not in
    layers/common/fsutil.py: the optimize child runs this file with the standard library only.
    """
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                continue
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(directory))


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "no message"


def _exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
    return f"exit status {code}"


def _disk_usage(path: Path) -> int:
    """Bytes the files under ``path`` occupy on disk (sparse files count what they hold)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


def _point_id(value: str | uuid.UUID) -> str:
    """Point ids are UUIDs here (mem0's and ours); anything else is refused before the engine sees it."""
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise ValueError(f"not a point id (a UUID): {value!r}") from None


def _engine(call):
    """Run an engine call; its bare ``Exception``s become :class:`EdgeError` (ValueError/TypeError kept)."""
    try:
        return call()
    except (ValueError, TypeError, EdgeError):
        raise
    except Exception as exc:
        if str(exc).startswith("Vector dimension error"):
            raise ValueError(str(exc)) from None
        raise EdgeError(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__) from exc


def background_child(parent: int) -> bool:
    """Make this process a child that builds for ``parent`` in the background: SIGKILLed when the thread that
    started it ends (PR_SET_PDEATHSIG), nice 19, on one core.  False when ``parent`` is already gone (nobody
    would take what it builds)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the starter
    if os.getppid() != parent:
        return False
    with contextlib.suppress(OSError):
        os.nice(19)
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    return True


def _on_disk(info: Any) -> bool:
    """Whether a payload index was made on disk (an index made from a bare schema type has no params)."""
    memory = getattr(info.params, "memory", None)
    return memory is not None and memory == qe.Memory.Cold


def _optimize_child(path: str, parent: int) -> int:
    """The child ``start_optimize`` runs: optimize the copy at ``path``, nice and on one core, then exit 0."""
    if not background_child(parent):
        return 3  # the starter is already gone: nobody would swap this copy in
    shard = qe.EdgeShard.load(path)
    shard.optimize()
    shard.flush()
    shard.close()
    _sync_tree(Path(path))  # the heavy part of the swap's sync, here: off the daemon's store thread
    return 0


if __name__ == "__main__":  # python -P edge.py optimize <copy> <parent pid>  (see start_optimize)
    if len(sys.argv) != 4 or sys.argv[1] != "optimize":
        sys.exit("usage: edge.py optimize <shard copy> <parent pid>")
    sys.exit(_optimize_child(sys.argv[2], int(sys.argv[3])))
