"""Vector search that does not read every vector: one byte per dimension first, exact scores for the few kept.

Hybrid search used to read every passage vector out of SQLite and score it in
Python, for every query and for each of its vector lists: 1.1 s at 2,000
chunks, 4-5 s and 600+ MB at 20,000.  Now each passage also has a code of one
byte per dimension (:func:`quantize`: a quarter of the float vector), kept in
the index (table ``codes``, written with the vectors) and, in each process
that searches, in a :class:`CodeCache` of packed arrays.  A search scores every
passage's code, keeps the best chunks (:data:`RESCORE_CHUNKS`), and only those
are scored exactly from their stored vectors.  Sign bits (32× smaller) were
measured first and dropped: e5's vectors share one direction (their mean has
norm 0.92), so their signs barely differ and the true ten nearest fell within
the sign-bit pass's first 10% for a fifth of the questions only.  Filters (layer,
day range, path glob) are masks over the cache's rows, applied before the
nearest are chosen, never after.

The cache is loaded once per index file and then follows the writer through
the ``changes`` log (chunk ids the writer appends to in the same transaction
as the change); a reader that fell behind the log's trimmed start loads again.
All caches of a process together stay under :data:`CACHE_BUDGET_BYTES` (the
least recently searched index is dropped first).  Measured figures:
docs/facts.md, "L3 vectors at scale".
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date

import numpy as np
from threadpoolctl import ThreadpoolController

#: Chunks the pass over the codes keeps for exact scoring, at least (``pool`` when a list wants more).
#: Hybrid asks each list for 40; on the recall sets' real vectors the codes' twenty best already hold
#: the exact ten best.  Reading the kept chunks' float vectors is most of a list's time: 100 took
#: 31 ms at 20,000 chunks, 50 take 17 ms, with recall@10 1.000 of exact on the scale bench's vectors.
RESCORE_CHUNKS = 50
#: All code caches of one process, together; the least recently searched goes first.
CACHE_BUDGET_BYTES = 160 * 1024 * 1024
#: How many entries of the change log the writer keeps; a reader further behind reloads.
KEEP_CHANGES = 50_000
_BLOCK = 2048  # passages per block of the scoring pass: its float32 scratch is 1.5-4 MB
#: A cache is compacted once its dead rows are over half of it and at least this many (chunk slots, or
#: passages: a note appended to every few seconds replaces its last chunk, all of its passages, each time).
COMPACT_AT_LEAST = 256
LAYERS = {"core": 0, "daily": 1}


#: A code is round(x × SCALE) clipped to ±127: unit vectors of 384-1536 dimensions have components
#: within ±0.17 (e5-small: max 0.166, 99.9th percentile 0.130; the companion: 0.127 and 0.104, on the
#: recall sets' passages), so ±0.25 keeps every one unclipped at a resolution of 0.002.  Measured on
#: those passages and the sets' questions: the codes' ten best hold 0.97 (e5) and 0.99 (companion) of
#: the exact ten best, their twenty best all of them.
SCALE = 127 / 0.25


@functools.cache
def _blas() -> ThreadpoolController:
    """The process's BLAS libraries (found once: the lookup walks the loaded libraries, ~ms)."""
    return ThreadpoolController()


def one_blas_thread() -> contextlib.AbstractContextManager:
    """BLAS on one thread inside the block, as it was after it.  A search's products (the pass over
    the codes, the exact rescoring) are too small to share: on a busy 2-core host the second BLAS
    thread only waits for a core (100k chunks: p50 / p95 88 / 400 ms with numpy's default threads,
    24 / 32 ms with one; docs/facts.md, "L3 vectors at scale").  The limit is the block's alone: BLAS
    elsewhere in the process (the companion model) keeps its threads."""
    return _blas().limit(limits=1, user_api="blas")


def quantize(vectors: np.ndarray) -> bytes:
    """One signed byte per component of each row of ``vectors`` (shape (n, d)), row after row."""
    return np.clip(np.rint(np.asarray(vectors, dtype=np.float32) * SCALE), -127, 127).astype(np.int8).tobytes()


def day_number(day: str | None) -> int:
    return date.fromisoformat(day).toordinal() if day else -1


@dataclass(frozen=True)
class Mask:
    """Which chunks a vector list may return (the index's Filters, as arrays)."""

    layer: str | None = None
    since: str | None = None
    until: str | None = None
    chunk_ids: frozenset[int] | None = None  # the chunks a path glob matched; None: any


class _Growing:
    """A numpy array that grows by doubling: appends cost amortised O(rows), views are free."""

    def __init__(self, dtype: type | np.dtype, width: int = 0) -> None:
        self.width = width
        self.data = np.empty((1024, width) if width else 1024, dtype=dtype)
        self.n = 0

    def append(self, rows: np.ndarray) -> None:
        need = self.n + len(rows)
        if need > len(self.data):
            grown = np.empty((max(need, 2 * len(self.data)), *self.data.shape[1:]), dtype=self.data.dtype)
            grown[: self.n] = self.data[: self.n]
            self.data = grown
        self.data[self.n : need] = rows
        self.n = need

    @property
    def view(self) -> np.ndarray:
        return self.data[: self.n]

    @property
    def nbytes(self) -> int:
        """The rows in use: the capacity past them is never written, so its pages are not resident
        (an array this large is its own mapping, malloc.MMAP_THRESHOLD)."""
        return int(self.data[: self.n].nbytes)


class CodeCache:
    """The codes of every chunk of one index that has vectors, with what its filters need.

    Rows ("slots") are chunks; a chunk's passages are contiguous.  The codes are
    kept per *part*, one contiguous array for each column range a query asks
    for (e5's, the companion's): scoring a contiguous array took half the time
    of a slice of both side by side.  A part not yet kept is added by loading
    the cache anew (:meth:`want`; twice in a cache's life).  A removed or changed
    chunk's slot is marked dead and, when changed, appended anew; dead rows are
    dropped when they are over half of the cache, counted in slots and in passages
    (issue 51: counted in slots alone, with at least 1,024 of them, an agent's daily
    note appended to every 5 s left ~20 dead passages per append, and a traced soak
    named these arrays' 10.6 MiB of growth in 21 minutes, the most of any line).
    """

    def __init__(self, width: int, parts: frozenset[tuple[int, int]] = frozenset(), whole_only: bool = False) -> None:
        self.width = width  # components per stored passage (both models' when a row holds both)
        self.whole_only = whole_only  # keep each chunk's first passage (the whole chunk) only: a large index
        self.lock = threading.Lock()
        self.seq = -1  # the last change applied; -1: never loaded
        self.parts = {part: _Growing(np.int8, part[1]) for part in sorted(parts)}  # (offset, dim) → codes
        self.passages = 0
        self.first = _Growing(np.int64)  # per slot: its first passage
        self.chunk_ids = _Growing(np.int64)
        self.days = _Growing(np.int32)
        self.layers = _Growing(np.int8)
        self.alive = _Growing(np.bool_)
        self.slot_of: dict[int, int] = {}
        self.dead = 0  # dead slots
        self.dead_passages = 0  # their passages

    def reset(self, parts: frozenset[tuple[int, int]] | None = None, whole_only: bool | None = None) -> None:
        """Empty (keeping ``parts`` and ``whole_only``, by default as they are), to be loaded again."""
        fresh = CodeCache(
            self.width,
            frozenset(self.parts) if parts is None else parts,
            self.whole_only if whole_only is None else whole_only,
        )
        self.__dict__.update({k: v for k, v in fresh.__dict__.items() if k != "lock"})

    def want(self, offset: int, dim: int) -> bool:
        """Make sure the part (offset, dim) is kept; True when the cache had to be emptied for it."""
        if (offset, dim) in self.parts:
            return False
        if offset < 0 or offset + dim > self.width:
            raise ValueError(f"stored vectors are {self.width}-d, a {dim}-d query at column {offset} does not fit")
        self.reset(frozenset(self.parts) | {(offset, dim)})
        return True

    @property
    def nbytes(self) -> int:
        arrays = (*self.parts.values(), self.first, self.chunk_ids, self.days, self.layers, self.alive)
        return sum(a.nbytes for a in arrays)

    def __len__(self) -> int:
        return len(self.slot_of)

    # ------------------------------------------------------------ following the index

    def remove(self, chunk_id: int) -> None:
        slot = self.slot_of.pop(chunk_id, None)
        if slot is not None:
            self.alive.data[slot] = False
            self.dead += 1
            end = int(self.first.data[slot + 1]) if slot + 1 < self.first.n else self.passages
            self.dead_passages += end - int(self.first.data[slot])

    def add(self, rows: Iterable[tuple[int, str | None, str, bytes]]) -> None:
        """Append chunks given as (id, day, layer, codes); a chunk already here is replaced."""
        ids, days, layers, firsts, blobs = [], [], [], [], []
        start = self.passages
        for chunk_id, day, layer, codes in rows:
            count = min(len(codes) // self.width, 1 if self.whole_only else len(codes))
            if not count:
                continue
            self.remove(chunk_id)
            ids.append(chunk_id)
            days.append(day_number(day))
            layers.append(LAYERS.get(layer, 2))
            firsts.append(start)
            blobs.append(codes[: count * self.width])
            start += count
        if not ids:
            return
        base = self.chunk_ids.n
        rows_codes = np.frombuffer(b"".join(blobs), dtype=np.int8).reshape(-1, self.width)
        for (offset, dim), part in self.parts.items():
            part.append(rows_codes[:, offset : offset + dim])
        self.passages = start
        self.first.append(np.asarray(firsts, dtype=np.int64))
        self.chunk_ids.append(np.asarray(ids, dtype=np.int64))
        self.days.append(np.asarray(days, dtype=np.int32))
        self.layers.append(np.asarray(layers, dtype=np.int8))
        self.alive.append(np.ones(len(ids), dtype=np.bool_))
        for offset, chunk_id in enumerate(ids):
            self.slot_of[chunk_id] = base + offset

    def compact(self) -> None:
        """Drop dead slots and their passages once they are over half of the cache (of its slots or of its
        passages) and at least :data:`COMPACT_AT_LEAST`: each row is copied at most once per row appended."""
        slots = self.dead >= COMPACT_AT_LEAST and self.dead * 2 >= self.chunk_ids.n
        rows = self.dead_passages >= COMPACT_AT_LEAST and self.dead_passages * 2 >= self.passages
        if not (slots or rows):
            return
        alive = self.alive.view
        if not alive.any():
            seq = self.seq
            self.reset()
            self.seq = seq  # empty and current: the log is followed on from here
            return
        counts = np.diff(np.append(self.first.view, self.passages))
        keep = np.repeat(alive, counts)
        fresh = CodeCache(self.width, frozenset(self.parts), self.whole_only)
        fresh.seq = self.seq
        for key, part in self.parts.items():
            fresh.parts[key].append(part.view[keep])
        fresh.passages = int(keep.sum())
        fresh.first.append(np.concatenate(([0], np.cumsum(counts[alive])[:-1])).astype(np.int64))
        for name in ("chunk_ids", "days", "layers"):
            getattr(fresh, name).append(getattr(self, name).view[alive])
        fresh.alive.append(np.ones(int(alive.sum()), dtype=np.bool_))
        fresh.slot_of = {int(c): i for i, c in enumerate(fresh.chunk_ids.view)}
        self.__dict__.update({k: v for k, v in fresh.__dict__.items() if k != "lock"})

    # ------------------------------------------------------------ searching

    def nearest(self, query: np.ndarray, offset: int, masks: list[Mask], pool: int) -> list[list[int]]:
        """For each mask, the ids of the ``pool`` chunks whose best passage code scores highest
        against ``query``, best first (compared with the part from ``offset`` on, which
        :meth:`want` made sure is kept: a row may hold two models' vectors side by side)."""
        if not self.chunk_ids.n:
            return [[] for _ in masks]
        q = np.asarray(query, dtype=np.float32)
        codes = self.parts[(offset, len(q))].view
        scores = np.empty(len(codes), dtype=np.float32)
        scratch = np.empty((min(_BLOCK, len(codes)), len(q)), dtype=np.float32)
        with one_blas_thread():
            for start in range(0, len(codes), _BLOCK):
                block = codes[start : start + _BLOCK]
                np.copyto(scratch[: len(block)], block)  # int8 → float32 into one buffer: no allocation per block
                scores[start : start + len(block)] = np.dot(scratch[: len(block)], q)  # BLAS gemv; `@` was 9× slower
        best = np.maximum.reduceat(scores, self.first.view)  # a chunk scores as its best passage
        out = []
        for mask in masks:
            candidates = np.flatnonzero(self._allowed(mask))
            if len(candidates) > pool:
                candidates = candidates[np.argpartition(-best[candidates], pool)[:pool]]
            candidates = candidates[np.argsort(-best[candidates], kind="stable")]
            out.append(self.chunk_ids.view[candidates].tolist())
        return out

    def _allowed(self, mask: Mask) -> np.ndarray:
        allowed = self.alive.view.copy()
        if mask.layer is not None:
            allowed &= self.layers.view == LAYERS.get(mask.layer, 2)
        if mask.since is not None:
            allowed &= self.days.view >= day_number(mask.since)
        if mask.until is not None:
            allowed &= (self.days.view <= day_number(mask.until)) & (self.days.view >= 0)
        if mask.chunk_ids is not None:
            allowed &= np.isin(self.chunk_ids.view, np.fromiter(mask.chunk_ids, dtype=np.int64))
        return allowed


_CACHES: OrderedDict[tuple[str, str, str], CodeCache] = OrderedDict()
_CACHES_LOCK = threading.Lock()


def cache_for(key: tuple[str, str, str], width: int) -> CodeCache:
    """The process's cache of one index file (path, creation stamp, model), made on first use."""
    with _CACHES_LOCK:
        cache = _CACHES.get(key)
        if cache is None or cache.width != width:
            cache = _CACHES[key] = CodeCache(width)
        _CACHES.move_to_end(key)
        total = sum(c.nbytes for c in _CACHES.values())
        while total > CACHE_BUDGET_BYTES and len(_CACHES) > 1:
            _, dropped = _CACHES.popitem(last=False)
            total -= dropped.nbytes
        return cache
