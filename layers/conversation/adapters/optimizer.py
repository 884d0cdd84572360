"""When the embedded store's HNSW index is (re)built: Edge's ``optimize()``, decided off the request path.

An Edge shard searches by brute force whatever has not been optimized, and ``optimize()`` holds
the GIL for as long as it runs (tens of seconds at 50k), so the store never calls it in-process:
:meth:`EdgeCollection.start_optimize` optimizes a copy in a child process while the shard keeps
answering, and :meth:`EdgeCollection.finish_optimize` swaps it in.  This module only decides when,
from counters the shard keeps, and remembers what happened for status.  :meth:`Optimizer.tick`
runs on the store's thread (after writes, and on the store's periodic ping), so a start (the copy)
and a swap (loading the optimized copy, re-applying the journal) pause the store's other work,
never run beside it; the close of the replaced shard is a turn of its own (the next tick), so
requests queue behind one of these at a time.

An optimize starts when the shard is open and not optimizing, at least ``min_interval_s`` after
the previous one ended, and either ``after_writes`` points were written since the last one, or at
least ``min_writes`` were and no write came for ``idle_s``.  At the first tick of a shard the
points it holds unindexed count as written (a store migrated or filled by an earlier version).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from layers.conversation.adapters.edge import EdgeCollection, EdgeError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OptimizeSchedule:
    after_writes: int = 5000
    min_writes: int = 500  # fewer unindexed points than this cost a search nothing worth a rebuild
    idle_s: float = 60.0
    min_interval_s: float = 600.0


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


class Optimizer:
    """The schedule applied to one store's shard, and what the last optimize did (for status)."""

    def __init__(self, schedule: OptimizeSchedule | None = None) -> None:
        self.schedule = schedule or OptimizeSchedule()
        self._shard: EdgeCollection | None = None
        self._base = 0  # shard.writes when the points written since counted as pending
        self._carried = 0  # pending points the shard held before that (unindexed at first sight, or journalled)
        self._started: tuple[float, float, int] | None = None  # wall, monotonic, shard.writes at the copy
        self._ended_at: float | None = None  # monotonic
        self.last: dict | None = None
        self.figures: dict = {}

    def pending(self) -> int:
        if self._shard is None:
            return 0
        return self._carried + self._shard.writes - self._base

    def due(self, shard: EdgeCollection, now: float) -> bool:
        s = self.schedule
        if shard.optimizing or shard.closed:
            return False
        if self._ended_at is not None and now - self._ended_at < s.min_interval_s:
            return False
        pending = self.pending()
        return pending >= s.after_writes or (pending >= s.min_writes and now - shard.last_write >= s.idle_s)

    def tick(self, shard: EdgeCollection | None, refresh: bool = False, now: float | None = None) -> None:
        """On the store thread: swap in a finished optimize, or start one when it is due.  Never raises."""
        if shard is None or shard.closed:
            return
        now = time.monotonic() if now is None else now
        if shard is not self._shard:  # first sight of this shard (opened, reopened, restored)
            self._shard, self._started = shard, None
            self._base = shard.writes
            self._carried = max(0, self._refresh(shard).get("unindexed", 0))
        if self._started is not None and not shard.optimizing and shard.writes - self._started[2] > 0:
            # the shard gave it up itself (more writes arrived than one swap re-applies)
            self._finished(shard, now, "cancelled", error="too many writes arrived while it ran")
        try:
            shard.tidy()  # the shard the previous tick's swap replaced, if any
            if shard.optimizing:
                result = shard.finish_optimize()
                if result is not None:
                    self._finished(shard, now, "swapped", writes_reapplied=result["journal"])
                    refresh = True
            elif self.due(shard, now):
                shard.start_optimize()
                self._started = (time.time(), now, shard.writes)
                log.info("conversation store: optimizing a copy of the shard (%d points pending)", self.pending())
                refresh = True
        except (EdgeError, OSError) as exc:
            self._finished(shard, now, "failed", error=str(exc)[:300])
            log.warning("conversation store: optimize failed, the shard stays as it was: %s", exc)
        if refresh:
            self._refresh(shard)

    def _finished(self, shard: EdgeCollection, now: float, result: str, **details) -> None:
        started_wall, started_mono, writes_then = self._started or (time.time(), now, shard.writes)
        self.last = {
            "result": result,
            "started_at": _iso(started_wall),
            "ended_at": _iso(time.time()),
            "seconds": round(now - started_mono, 1),
            **details,
        }
        self._started, self._ended_at = None, now
        if result == "swapped":  # what was written after the copy is in the new shard's unindexed segment
            self._base, self._carried = shard.writes, shard.writes - writes_then
            log.info("conversation store: optimized shard swapped in (%.1f s)", now - started_mono)

    def _refresh(self, shard: EdgeCollection) -> dict:
        try:
            info = shard.info()
        except (EdgeError, OSError):
            return self.figures
        self.figures = {**info, "unindexed": max(0, info["points"] - info["indexed_vectors"])}
        return self.figures

    def status(self) -> dict:
        """For ``memstrata status``: indexed vs unindexed points, the optimize under way, the last one."""
        return {
            **self.figures,
            "optimizing_since": _iso(self._started[0]) if self._started else None,
            "pending_writes": self.pending(),
            "last_optimize": self.last,
            "schedule": asdict(self.schedule),
        }
