"""Expiry cleanup: mem0 only hides expired memories; this deletes them.

What is expired, in priority order (the seed's rule, without its three bugs):

1. the memory's own ``expiration_date`` (set at write time) is before today,
   UTC: it is expired, and a date still to come keeps it, however old it is;
2. otherwise, for types with a retention, ``created_at`` + retention has passed.

Permanent types (no retention, no date) are never deleted by age.  With
``max_age_days`` the cleanup is forced: for the types that expire, N days
replaces their retention *in addition to* their dates, and permanent types are
touched only when ``include_permanent`` is also given.  A forced cleanup never
deletes a memory that a valid memory still points at (it was superseded by one
that is not itself superseded: layers/conversation/policy/validity.py) before its own
date or retention ends: the chain of what replaced what stays whole.  The seed's script let
its default ``--max-age-days`` silently override every type's retention, judged
expiry by write time instead of ``expiration_date``, and called delete wrongly;
the tests name each of those.

With ``decay`` rules (layers/conversation/policy/decay.py) the same pass archives what
has faded: a valid memory whose importance is below the floor is marked archived
(hidden from search, kept, restorable), never deleted; a dry run says which.

The scan is paged and deletes go out in batches, so memory use does not grow
with the collection; the store behind ``scan``/``delete`` may be the daemon's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Protocol

from layers.conversation.policy import validity
from layers.conversation.policy.decay import DecayRules
from layers.conversation.policy.rules import retention_for

PAGE_SIZE = 256
DELETE_BATCH = 128


@dataclass(frozen=True)
class Selection:
    """Which memories a cleanup looks at (all of them by default)."""

    agent: str | None = None
    visibility: str | None = None
    project: str | None = None
    memory_type: str | None = None


class CleanupStore(Protocol):
    def scan(self, selection: Selection, limit: int, cursor: str | None) -> tuple[list[dict], str | None]: ...

    def delete_ids(self, ids: list[str]) -> None: ...

    def states(self, ids: list[str]) -> dict[str, str]: ...  # valid / superseded / archived of those that exist

    def archive(self, ids: list[str], at: str) -> None: ...


@dataclass(frozen=True)
class Rules:
    retention_days: Mapping[str, int | None]
    max_age_days: int | None = None
    include_permanent: bool = False
    decay: DecayRules | None = None  # set: faded memories are archived (see the module's doc)

    def own_verdict(self, memory: Mapping, now: datetime) -> str | None:
        """Why ``memory`` is expired by its own date or its type's retention (no forcing), or None."""
        return Rules(self.retention_days).verdict(memory, now)

    def faded(self, memory: Mapping, now: datetime) -> float | None:
        """The importance of a valid, not yet archived memory that has faded below the floor; None otherwise."""
        if self.decay is None or validity.state_of(memory) != validity.VALID:
            return None
        if not self.decay.archivable(memory, now):
            return None
        return self.decay.importance(memory, now)

    def verdict(self, memory: Mapping, now: datetime) -> str | None:
        """Why ``memory`` is expired at ``now``, or None when it is not."""
        today = now.astimezone(timezone.utc).date()
        created = _parse_time(memory.get("created_at"))
        expiration = _parse_date(memory.get("expiration_date"))
        retention = retention_for(memory.get("memory_type") or "", self.retention_days)
        if expiration is not None and expiration < today:
            return f"expiration_date {expiration.isoformat()} has passed"
        if self.max_age_days is not None and (retention is not None or self.include_permanent):
            if created is not None and created + timedelta(days=self.max_age_days) < now:
                return f"older than --max-age-days {self.max_age_days} (created {created.date().isoformat()})"
            return None
        aged = created is not None and retention is not None and created + timedelta(days=retention) < now
        if expiration is None and aged:
            return f"created {created.date().isoformat()}, retention {retention} days"  # type: ignore[union-attr]
        return None


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _parse_date(value: object) -> date | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        return None


@dataclass
class Tally:
    scanned: int = 0
    expired: int = 0
    deleted: int = 0
    archived: int = 0  # faded (decay by use): archived, or in a dry run would be


@dataclass
class CleanupReport:
    mode: str  # "dry-run" | "execute"
    scanned: int = 0
    expired: int = 0
    deleted: int = 0
    kept_in_chain: int = 0  # forced out by age, kept: a valid memory supersedes it and its own time has not come
    archived: int = 0  # faded below the importance floor: archived (a dry run: would be)
    errors: list[str] = field(default_factory=list)
    by_type: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    by_visibility: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "scanned": self.scanned,
            "expired": self.expired,
            "deleted": self.deleted,
            "kept_in_chain": self.kept_in_chain,
            "archived": self.archived,
            "errors": list(self.errors),
            "by_type": {k: vars(v) for k, v in sorted(self.by_type.items())},
            "by_visibility": {k: vars(v) for k, v in sorted(self.by_visibility.items())},
        }


def audit_entry(memory: Mapping, reason: str, deleted: bool, event: str | None = None) -> dict:
    """One audit line: who, where, what kind, when; never the memory's text (it may be private)."""
    return {
        "event": event or ("deleted" if deleted else "would_delete"),
        "id": memory.get("id"),
        "agent_id": memory.get("agent_id"),
        "visibility": memory.get("visibility"),
        "project_id": memory.get("project_id"),
        "memory_type": memory.get("memory_type"),
        "created_at": memory.get("created_at"),
        "expiration_date": memory.get("expiration_date"),
        "reason": reason,
    }


def _pages(store: CleanupStore, selection: Selection) -> Iterator[list[dict]]:
    cursor = None
    while True:
        page, cursor = store.scan(selection, PAGE_SIZE, cursor)
        yield page
        if cursor is None:
            return


def _slim(memory: Mapping) -> dict:
    """What a cleanup keeps of a memory until its batch goes out: ids and placement, never the text."""
    keys = ("id", "agent_id", "visibility", "project_id", "memory_type", "created_at", "expiration_date")
    return {k: memory.get(k) for k in keys}


def _kept_in_chain(store: CleanupStore, rules: Rules, page: list[dict], now: datetime) -> dict[str, str]:
    """The memories of ``page`` a forced cleanup must keep, each with why: superseded by a memory that is valid
    (present and not itself superseded) while their own date or retention has not ended (one lookup a page)."""
    if rules.max_age_days is None:
        return {}
    candidates = {
        m["id"]: m["superseded_by"]
        for m in page
        if m.get("superseded_by") and rules.verdict(m, now) is not None and rules.own_verdict(m, now) is None
    }
    if not candidates:
        return {}
    states = store.states(sorted(set(candidates.values())))
    return {
        memory_id: f"superseded by {by}, which is valid: kept until its own expiry"
        for memory_id, by in candidates.items()
        if states.get(by) in ("valid", "archived")
    }


def run_cleanup(
    store: CleanupStore,
    rules: Rules,
    *,
    execute: bool,
    selection: Selection = Selection(),
    audit: Callable[[dict], None] = lambda entry: None,
    now: datetime | None = None,
) -> CleanupReport:
    """Scan every selected memory, audit each expired one, delete them when ``execute``.

    Deleting while scrolling would move the scroll's ground under it, so expired
    ids are collected (ids only: memory stays bounded by the expired count, not
    the collection) and deleted in batches after the scan.
    """
    now = now or datetime.now(timezone.utc)
    report = CleanupReport("execute" if execute else "dry-run")
    expired: list[tuple[dict, str]] = []
    faded: list[tuple[dict, str]] = []
    for page in _pages(store, selection):
        pointed_at = _kept_in_chain(store, rules, page, now)
        for memory in page:
            kind, visibility = memory.get("memory_type") or "unknown", memory.get("visibility") or "unknown"
            report.scanned += 1
            report.by_type[kind].scanned += 1
            report.by_visibility[visibility].scanned += 1
            reason = rules.verdict(memory, now)
            if reason is not None and memory.get("id") in pointed_at:
                report.kept_in_chain += 1
                audit({**audit_entry(memory, reason, deleted=False), "event": "kept", "why": pointed_at[memory["id"]]})
                continue
            if reason is None:
                importance = rules.faded(memory, now)
                if importance is not None:
                    why = f"importance {importance:.3f} below {rules.decay.archive_below} (decay by use)"  # type: ignore[union-attr]
                    faded.append((_slim(memory), why))
                    report.archived += 1
                    report.by_type[kind].archived += 1
                    report.by_visibility[visibility].archived += 1
                    if not execute:
                        audit(audit_entry(memory, why, deleted=False, event="would_archive"))
                continue
            report.expired += 1
            report.by_type[kind].expired += 1
            report.by_visibility[visibility].expired += 1
            slim = _slim(memory)
            expired.append((slim, reason))
            if not execute:
                audit(audit_entry(slim, reason, deleted=False))
    if execute:
        stamp = now.astimezone(timezone.utc).isoformat(timespec="seconds")
        for start in range(0, len(faded), DELETE_BATCH):
            batch = faded[start : start + DELETE_BATCH]
            try:
                store.archive([m["id"] for m, _ in batch], stamp)
            except Exception as exc:  # reported, and the rest is still tried
                report.errors.append(f"archiving {len(batch)} memories failed: {exc}")
                for memory, _ in batch:
                    report.archived -= 1
                    report.by_type[memory.get("memory_type") or "unknown"].archived -= 1
                    report.by_visibility[memory.get("visibility") or "unknown"].archived -= 1
                continue
            for memory, why in batch:
                audit(audit_entry(memory, why, deleted=False, event="archived"))
        for start in range(0, len(expired), DELETE_BATCH):
            batch = expired[start : start + DELETE_BATCH]
            try:
                store.delete_ids([m["id"] for m, _ in batch])
            except Exception as exc:  # reported, and the rest is still tried
                report.errors.append(f"deleting {len(batch)} memories failed: {exc}")
                continue
            for memory, reason in batch:
                report.deleted += 1
                report.by_type[memory.get("memory_type") or "unknown"].deleted += 1
                report.by_visibility[memory.get("visibility") or "unknown"].deleted += 1
                audit(audit_entry(memory, reason, deleted=True))
    audit(
        {
            "event": "summary",
            **{k: v for k, v in report.to_dict().items() if k != "errors"},
            "errors": len(report.errors),
        }
    )
    return report
