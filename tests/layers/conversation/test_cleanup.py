"""Expiry cleanup on the real store, with the seed's three bugs as named regressions."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from daemon.common.audit import AuditLog
from layers.conversation.adapters.store import NewMemory
from layers.conversation.lifecycle.cleanup import Rules, Selection, run_cleanup
from layers.conversation.policy.rules import DEFAULT_RETENTION_DAYS, MEMORY_TYPES

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
TODAY = NOW.date()
OLD = (NOW - timedelta(days=400)).isoformat()
NEW = (NOW - timedelta(hours=1)).isoformat()


def day(offset: int) -> str:
    return (TODAY + timedelta(days=offset)).isoformat()


def put(store, text, memory_type="knowledge", created=NEW, expiration=None, agent="a", visibility="private"):
    expires_at = None
    if expiration:
        expires_at = datetime.fromisoformat(expiration).replace(tzinfo=timezone.utc).timestamp() + 86400
    record = NewMemory(str(uuid.uuid4()), agent, text, memory_type, visibility, None, created, expiration, expires_at)
    return store.add(record)[0]["id"]


@pytest.fixture
def population(store):
    """Past, today's and future dates, and every type old and new (no date: judged by retention)."""
    expected = {}
    expected["past date"] = put(store, "past date", "session", expiration=day(-1))
    put(store, "today's date", "session", expiration=day(0))  # shown through today: not expired
    put(store, "future date, old", "chat_summary", created=OLD, expiration=day(5))
    expected["permanent type, past explicit date"] = put(
        store, "permanent type, past explicit date", "knowledge", expiration=day(-3)
    )
    for kind in MEMORY_TYPES:
        put(store, f"{kind} new", kind, created=NEW)
        old = put(store, f"{kind} old", kind, created=OLD)
        if DEFAULT_RETENTION_DAYS.get(kind):
            expected[f"{kind} old"] = old
    return expected


def texts(store) -> set[str]:
    page, cursor = store.scan(Selection(), limit=1000)
    assert cursor is None
    return {m["memory"] for m in page}


def test_dry_run_lists_exactly_the_expired_and_deletes_nothing(store, population):
    before = texts(store)
    entries = []
    report = run_cleanup(store, Rules(DEFAULT_RETENTION_DAYS), execute=False, audit=entries.append, now=NOW)
    assert texts(store) == before
    listed = {e["id"] for e in entries if e["event"] == "would_delete"}
    assert listed == set(population.values())
    assert (report.scanned, report.expired, report.deleted) == (len(before), len(population), 0)
    assert report.by_type["session"].expired == 2 and report.by_type["chat_summary"].expired == 1
    assert report.by_type["preference"].expired == 0 and report.by_type["knowledge"].expired == 1
    assert entries[-1]["event"] == "summary" and entries[-1]["mode"] == "dry-run"


def test_execute_deletes_exactly_that_set_and_a_second_run_nothing(store, population):
    before = texts(store)
    report = run_cleanup(store, Rules(DEFAULT_RETENTION_DAYS), execute=True, now=NOW)
    assert report.deleted == len(population) and not report.errors
    assert texts(store) == before - set(population)
    again = run_cleanup(store, Rules(DEFAULT_RETENTION_DAYS), execute=True, now=NOW)
    assert (again.expired, again.deleted) == (0, 0)


def test_an_old_memory_whose_date_is_still_to_come_survives(store):
    """Seed bug 2: expiry was judged by write time instead of expiration_date."""
    put(store, "written long ago, valid until next week", "session", created=OLD, expiration=day(7))
    report = run_cleanup(store, Rules(DEFAULT_RETENTION_DAYS), execute=True, now=NOW)
    assert report.deleted == 0 and texts(store) == {"written long ago, valid until next week"}


def test_max_age_days_forces_expiring_types_only(store):
    put(store, "session 20 days old", "session", created=(NOW - timedelta(days=20)).isoformat(), expiration=day(5))
    put(store, "chat summary 3 days old", "chat_summary", created=(NOW - timedelta(days=3)).isoformat())
    put(store, "knowledge 400 days old", "knowledge", created=OLD)
    run_cleanup(store, Rules(DEFAULT_RETENTION_DAYS, max_age_days=14), execute=True, now=NOW)
    assert texts(store) == {"chat summary 3 days old", "knowledge 400 days old"}
    run_cleanup(store, Rules(DEFAULT_RETENTION_DAYS, max_age_days=14, include_permanent=True), execute=True, now=NOW)
    assert texts(store) == {"chat summary 3 days old"}


def test_without_max_age_days_per_type_retention_applies(store):
    """Seed bug 1: a default --max-age-days silently overrode every type's retention."""
    put(store, "chat summary 20 days old", "chat_summary", created=(NOW - timedelta(days=20)).isoformat())
    put(store, "session 8 days old", "session", created=(NOW - timedelta(days=8)).isoformat())
    run_cleanup(store, Rules(DEFAULT_RETENTION_DAYS), execute=True, now=NOW)
    assert texts(store) == {"chat summary 20 days old"}  # 30-day retention, not some global age


def test_deletes_really_remove_points_in_batches(store):
    """Seed bug 3: the delete call was built wrongly; here the points are gone from the collection."""
    for i in range(300):
        put(store, f"old session {i}", "session", created=OLD)
    report = run_cleanup(store, Rules(DEFAULT_RETENTION_DAYS), execute=True, now=NOW)
    assert report.deleted == 300 and store.count() == 0


def test_filters_narrow_the_cleanup(store):
    put(store, "a's old session", "session", created=OLD, agent="a")
    put(store, "b's old session", "session", created=OLD, agent="b")
    run_cleanup(store, Rules(DEFAULT_RETENTION_DAYS), execute=True, selection=Selection(agent="b"), now=NOW)
    assert texts(store) == {"a's old session"}
    run_cleanup(
        store, Rules(DEFAULT_RETENTION_DAYS), execute=True, selection=Selection(memory_type="chat_summary"), now=NOW
    )
    assert texts(store) == {"a's old session"}


def test_audit_lines_carry_no_text_and_the_utc_date(store, tmp_path):
    put(store, "机密内容：不要写进日志", "session", created=OLD)
    audit = AuditLog(tmp_path / "security", prefix="memory-cleanup")
    run_cleanup(store, Rules(DEFAULT_RETENTION_DAYS), execute=True, audit=audit.write, now=NOW)
    [log] = (tmp_path / "security").iterdir()
    assert log.name == f"memory-cleanup-{datetime.now(timezone.utc):%Y-%m-%d}.log"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["event"] for line in lines] == ["deleted", "summary"]
    assert set(lines[0]) == {
        "time",
        "event",
        "id",
        "agent_id",
        "visibility",
        "project_id",
        "memory_type",
        "created_at",
        "expiration_date",
        "reason",
    }
    assert "机密" not in log.read_text() and "retention 7 days" in lines[0]["reason"]


def test_a_forced_cleanup_keeps_what_a_valid_memory_supersedes_until_its_own_expiry(store):
    """--max-age-days would take a superseded memory early; the chain keeps it while its replacement is valid."""
    retention = {**DEFAULT_RETENTION_DAYS, "task_log": 1000}  # 400 days old: not expired by itself
    kept = put(store, "old log, replaced", "task_log", created=OLD)
    replacement = put(store, "the log as it is now", "task_log", created=OLD)
    store.supersede([kept], replacement, NEW)
    orphan = put(store, "old log, its replacement replaced too", "task_log", created=OLD)
    middle = put(store, "a replacement itself replaced", "task_log", created=OLD)
    last = put(store, "the newest log", "task_log", created=NEW)
    store.supersede([orphan], middle, NEW)
    store.supersede([middle], last, NEW)
    dated = put(store, "session past its date, replaced", "session", created=OLD, expiration=day(-1))
    store.supersede([dated], replacement, NEW)
    entries = []
    report = run_cleanup(store, Rules(retention, max_age_days=30), execute=True, audit=entries.append, now=NOW)
    left = texts(store)
    assert "old log, replaced" in left and "a replacement itself replaced" in left  # valid ones point at them
    assert "old log, its replacement replaced too" not in left  # what points at it is itself superseded
    assert "session past its date, replaced" not in left  # its own date has passed: the chain does not hold it
    assert report.kept_in_chain == 2 and report.to_dict()["kept_in_chain"] == 2
    why = {e["id"]: e["why"] for e in entries if e["event"] == "kept"}
    assert set(why) == {kept, middle} and replacement in why[kept]
    plain = run_cleanup(store, Rules(retention), execute=True, now=NOW)
    assert plain.kept_in_chain == 0 and plain.deleted == 0  # not forced: nothing is past its own retention
