"""Allocation tracing on demand: which lines of the daemon's Python code hold more memory as it runs.

Issue 51: under a steady load the daemon's anonymous memory grew, and no single kind of call run
alone showed it.  ``tracemalloc`` names the lines whose allocations are still alive; a snapshot
every few minutes, diffed against the first one (taken after a warm-up) and against the previous
one, shows what keeps growing.  It slows allocation-heavy code and costs memory of its own, so it
is off unless asked for, by environment (the soak benchmark sets it, an operator can too):

- ``MEMSTRATA_TRACEMALLOC_MIN``: minutes between snapshots (off when unset or not a number > 0);
- ``MEMSTRATA_TRACEMALLOC_DIR``: where the diffs are written (default: the working directory);
- ``MEMSTRATA_TRACEMALLOC_FRAMES``: frames kept per allocation (default 1: grouped by line; 0: no
  tracing, the native figures alone, at no cost to the run measured).

Each snapshot writes ``tracemalloc-NNN-minMMMM.txt`` (the NNNth, MMMM minutes after the start):
what native code holds (malloc's live and free bytes, SQLite's memory and its connections' page
caches: tracemalloc sees none of it), the traced size now and at its peak, the top 20 lines by
growth since the first snapshot and since the previous.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import apsw

from layers.common import malloc

log = logging.getLogger(__name__)

ENV_MINUTES = "MEMSTRATA_TRACEMALLOC_MIN"
ENV_DIR = "MEMSTRATA_TRACEMALLOC_DIR"
ENV_FRAMES = "MEMSTRATA_TRACEMALLOC_FRAMES"
TOP = 20

# The tracer's own bookkeeping and the import machinery are not the daemon's memory.
_NOISE = (
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
    tracemalloc.Filter(False, "<unknown>"),
    tracemalloc.Filter(False, __file__),  # the per-line totals kept between snapshots: the tracer's own
)


def _minutes_from_env() -> float | None:
    try:
        minutes = float(os.environ.get(ENV_MINUTES, ""))
    except ValueError:
        return None
    return minutes if minutes > 0 else None


Lines = dict[tuple[str, int], tuple[int, int]]  # (file, line) → (bytes, blocks) alive


def _lines() -> Lines:
    """What each line holds now.  Only these totals are kept between snapshots, never a snapshot
    itself: one holds a record per live block (tens of MB), which would be the growth measured."""
    snap = tracemalloc.take_snapshot().filter_traces(_NOISE)
    lines = {(s.traceback[0].filename, s.traceback[0].lineno): (s.size, s.count) for s in snap.statistics("lineno")}
    del snap
    malloc.trim()  # the snapshot's tens of MB, freed, would otherwise stay resident (and be measured)
    return lines


def _top(now: Lines, then: Lines, title: str) -> list[str]:
    diffs = []
    for key, (size, count) in now.items():
        old_size, old_count = then.get(key, (0, 0))
        diffs.append((size - old_size, count - old_count, size, key))
    for key, (old_size, old_count) in then.items():
        if key not in now:
            diffs.append((-old_size, -old_count, 0, key))
    lines = [title]
    for size_diff, count_diff, size, (filename, lineno) in sorted(diffs, reverse=True)[:TOP]:
        lines.append(
            f"  {size_diff / 1024:+10.1f} KiB {count_diff:+8d} blocks  now {size / 1024:10.1f} KiB  {filename}:{lineno}"
        )
    return lines


def native() -> str:
    """One line of what native code holds: malloc (every arena) and SQLite (through apsw: the library's
    own count, and the page caches of the connections open now); and how many blocks Python holds, which
    counts its objects' growth with no tracing."""
    mib = 2**20
    heap = malloc.usage()
    used, high = apsw.status(apsw.SQLITE_STATUS_MEMORY_USED)
    connections = apsw.connections()
    cached = 0
    for db in connections:
        with contextlib.suppress(apsw.Error):  # one closed meanwhile
            cached += db.status(apsw.SQLITE_DBSTATUS_CACHE_USED)[0]
    malloced = "malloc ?"
    if heap:
        malloced = f"malloc in use {heap['in_use'] / mib:.1f} MiB, free {heap['free'] / mib:.1f} MiB"
        malloced += f", own mappings {heap['mapped'] / mib:.1f} MiB"
    sqlite = f"sqlite {used / mib:.1f} MiB (high {high / mib:.1f}), {len(connections)} connections"
    blocks = sys.getallocatedblocks()  # Python's live objects' blocks: its growth, untraced
    return f"native: {malloced}; {sqlite} caching {cached / mib:.1f} MiB; python {blocks} blocks"


class MemTrace(threading.Thread):
    """The tracing thread: started by :func:`start_from_env`, a daemon thread (it ends with the process)."""

    def __init__(self, minutes: float, directory: Path, traced: bool = True) -> None:
        super().__init__(name="memtrace", daemon=True)
        self.traced = traced  # False: the native line alone (no tracemalloc)
        self.interval = minutes * 60
        self.directory = directory
        self.stopped = threading.Event()
        self.started_at = time.monotonic()
        self.written = 0

    def run(self) -> None:
        first: Lines | None = None
        previous: Lines | None = None
        while not self.stopped.wait(self.interval):
            try:
                if not self.traced:
                    self._write({}, [])
                    continue
                snap = _lines()
                if first is None:
                    first = previous = snap
                    self._write(snap, ["(the first snapshot: later ones are diffed against it)"])
                    continue
                assert previous is not None
                lines = _top(snap, first, f"top {TOP} lines by growth since the first snapshot:")
                lines += _top(snap, previous, f"top {TOP} lines by growth since the previous snapshot:")
                self._write(snap, lines)
                previous = snap
            except Exception:  # a diagnosis must never take the daemon down
                log.exception("allocation tracing failed; it stops")
                return

    def _write(self, snap: Lines, lines: list[str]) -> None:
        minute = round((time.monotonic() - self.started_at) / 60)
        header = [f"at minute {minute}", native()]
        if self.traced:
            current, peak = tracemalloc.get_traced_memory()
            total = sum(size for size, _ in snap.values())
            overhead = tracemalloc.get_tracemalloc_memory()
            header.append(
                f"tracemalloc: traced {current / 2**20:.1f} MiB (peak {peak / 2**20:.1f} MiB), "
                f"{total / 2**20:.1f} MiB in the snapshot; the tracer's own {overhead / 2**20:.1f} MiB"
            )
        self.written += 1
        path = self.directory / f"tracemalloc-{self.written:03d}-min{minute:04d}.txt"
        path.write_text("\n".join(header + lines) + "\n", encoding="utf-8")


def start_from_env() -> MemTrace | None:
    """Start tracing when ``MEMSTRATA_TRACEMALLOC_MIN`` asks for it (first thing: what is allocated
    before the start is not traced); None when it does not."""
    minutes = _minutes_from_env()
    if minutes is None:
        return None
    try:
        frames = max(0, int(os.environ.get(ENV_FRAMES, "1")))
    except ValueError:
        frames = 1
    directory = Path(os.environ.get(ENV_DIR) or ".")
    directory.mkdir(parents=True, exist_ok=True)
    if frames:
        tracemalloc.start(frames)
    tracer = MemTrace(minutes, directory, traced=bool(frames))
    tracer.start()
    what = "allocation tracing on (slower, for diagnosis)" if frames else "native memory figures on"
    log.warning("%s: a snapshot every %g min into %s", what, minutes, directory)
    return tracer
