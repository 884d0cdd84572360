"""Decay by use: how important a memory still is, from its age and how often it was returned.

A task log from last spring and one from this morning rank alike on their words; the older one is
rarely what an agent needs, unless agents keep asking for it.  So each memory carries
``access_count`` and ``last_accessed`` (counted when it is returned to an agent), and

    effective_age = age_days / (1 + min(ln(1 + access_count), cap))
    importance    = e^(-ln 2 × effective_age / half_life)

with a half-life per memory type (:data:`HALF_LIFE_DAYS`; the permanent types never decay:
importance 1).  Use slows the clock: 19 accesses (ln 20 ≈ 3, the cap) make a memory age a quarter
as fast; the cap keeps a memory that was popular once from living for ever.  ``age_days`` counts
from the memory's ``valid_from`` (its write, or its last update), or from ``restored_at`` when an
archived memory was restored later.

Importance joins the ranking as a factor ``1 - weight + weight × importance`` on a search result's
score (:meth:`DecayRules.rank_factor`; weight 0.02 by default), so relevance still decides and a
faded memory only gives way to a fresher one of about the same relevance.  Below
:attr:`DecayRules.archive_below` (0.10: past ~3.3 half-lives unused) the cleanup job archives a
memory: hidden from search, kept, restorable (layers/conversation/policy/validity.py).

:class:`AccessTally` gathers the hits in memory so that the request path never writes: the daemon
flushes it to the store in batches (daemon/conversation/access.py).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from layers.conversation.policy.rules import FIXED_PERMANENT, MEMORY_TYPES

ACCESS_COUNT, LAST_ACCESSED = "access_count", "last_accessed"
# Days for a memory of each type to halve in importance unused; None never decays.  The seed's two
# (procedure 90 d, task_log 30 d); a session lives 7 days and a chat summary 30 by default, so theirs
# are short enough to rank this week's first.  The permanent types are not configurable.
HALF_LIFE_DAYS: dict[str, float | None] = {
    "session": 2.0,
    "chat_summary": 10.0,
    "task_log": 30.0,
    "procedure": 90.0,
    **{kind: None for kind in FIXED_PERMANENT},
}
CAP = 3.0  # ln(1 + access_count) counts up to this (the seed's default): 19 accesses slow aging 4 times
ARCHIVE_BELOW = 0.10
# How much importance moves a search result: its score times 1 - w + w × importance, so a faded memory
# gives way only to one within 2 % of its relevance.  Measured with bench/bench_decay.py on both recall
# sets at three dates (docs/lifecycle.md): at 0.02 R@5 is never below relevance alone on either (tuned
# 0.675 -> 0.684-0.693, the blind set 0.683 -> 0.683); at 0.05 the blind set lost one or two questions of
# 126 (0.667-0.675); at 0.3 R@5 fell to 0.595-0.623 once task logs faded beside permanent memories.
RANK_WEIGHT = 0.02
LN2 = math.log(2)


def effective_age(age_days: float, access_count: int, cap: float = CAP) -> float:
    return max(0.0, age_days) / (1.0 + min(math.log1p(max(0, access_count)), cap))


def importance_of(age_days: float, access_count: int, half_life_days: float | None, cap: float = CAP) -> float:
    """e^(-ln2 x effective_age / half_life) (docs/lifecycle.md, "Decay by use"); 1.0 for a type that never decays."""
    if half_life_days is None:
        return 1.0
    return math.exp(-LN2 * effective_age(age_days, access_count, cap) / half_life_days)


def _moment(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class DecayRules:
    """The half-lives in force and what importance does (ranking weight, archive floor)."""

    half_life_days: Mapping[str, float | None] = field(default_factory=lambda: dict(HALF_LIFE_DAYS))
    cap: float = CAP
    archive_below: float = ARCHIVE_BELOW
    rank_weight: float = RANK_WEIGHT

    def half_life(self, memory_type: str | None) -> float | None:
        if not memory_type or memory_type in FIXED_PERMANENT or memory_type not in MEMORY_TYPES:
            return None
        return self.half_life_days.get(memory_type, HALF_LIFE_DAYS.get(memory_type))

    def age_days(self, payload: Mapping[str, Any], now: datetime) -> float:
        """Days since the memory's text became true, or since it was restored from the archive."""
        anchors = [_moment(payload.get(k)) for k in ("valid_from", "created_at", "restored_at")]
        start = max((a for a in (anchors[0] or anchors[1], anchors[2]) if a is not None), default=None)
        return 0.0 if start is None else max(0.0, (now - start).total_seconds() / 86400)

    def importance(self, payload: Mapping[str, Any], now: datetime | None = None) -> float:
        half_life = self.half_life(payload.get("memory_type"))
        if half_life is None:
            return 1.0
        now = now or datetime.now(timezone.utc)
        count = payload.get(ACCESS_COUNT)
        count = count if isinstance(count, int) and not isinstance(count, bool) else 0
        return importance_of(self.age_days(payload, now), count, half_life, self.cap)

    def rank_factor(self, importance: float) -> float:
        return 1.0 - self.rank_weight + self.rank_weight * importance

    def archivable(self, payload: Mapping[str, Any], now: datetime) -> bool:
        """Faded below the floor (a type that never decays never is)."""
        return self.half_life(payload.get("memory_type")) is not None and self.importance(payload, now) < (
            self.archive_below
        )


DEFAULT_DECAY = DecayRules()


class AccessTally:
    """Hits on memories, gathered in memory until a flush writes them (``take``) or gives them back (``put_back``).

    Thread-safe: request threads call :meth:`hit`, the flusher the rest.  At most ``max_ids`` distinct
    memories are held; past that a hit on a new one is counted in ``dropped`` instead (a store down
    for long must not grow the daemon without bound).
    """

    def __init__(self, max_ids: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._hits: dict[str, list] = {}  # id -> [count, last ISO time]
        self.max_ids = max_ids
        self.dropped = 0
        self.hits = 0  # since the last take

    def hit(self, ids: Iterable[str], at: str) -> int:
        """Count one access of each of ``ids`` at ``at`` (ISO 8601 UTC); the hits now waiting."""
        with self._lock:
            for memory_id in ids:
                entry = self._hits.get(memory_id)
                if entry is None:
                    if len(self._hits) >= self.max_ids:
                        self.dropped += 1
                        continue
                    self._hits[memory_id] = [1, at]
                else:
                    entry[0] += 1
                    entry[1] = max(entry[1], at)
                self.hits += 1
            return self.hits

    def take(self) -> dict[str, tuple[int, str]]:
        with self._lock:
            taken = {k: (v[0], v[1]) for k, v in self._hits.items()}
            self._hits.clear()
            self.hits = 0
            return taken

    def put_back(self, batch: Mapping[str, tuple[int, str]]) -> None:
        """A batch the store did not take, merged back (counts added, the later time kept)."""
        with self._lock:
            for memory_id, (count, at) in batch.items():
                entry = self._hits.get(memory_id)
                if entry is None:
                    self._hits[memory_id] = [count, at]
                else:
                    entry[0] += count
                    entry[1] = max(entry[1], at)
                self.hits += count

    def __len__(self) -> int:
        with self._lock:
            return len(self._hits)


def merged_access(payload: Mapping[str, Any], count: int, at: str) -> dict[str, Any]:
    """The access fields of a memory after ``count`` more hits, the last at ``at``."""
    old = payload.get(ACCESS_COUNT)
    old = old if isinstance(old, int) and not isinstance(old, bool) else 0
    last = payload.get(LAST_ACCESSED)
    return {ACCESS_COUNT: old + count, LAST_ACCESSED: max(last, at) if isinstance(last, str) else at}
