"""Decay by use on the real store (Qdrant Edge, the real GGUF model): the seed's formula, access counts written
in batches, importance in the ranking, and the cleanup archiving (never deleting) what faded."""

from __future__ import annotations

import math
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from layers.conversation.adapters.store import NewMemory
from layers.conversation.lifecycle.cleanup import Rules, run_cleanup
from layers.conversation.policy.decay import DEFAULT_DECAY, AccessTally, DecayRules, importance_of
from layers.conversation.policy.rules import DEFAULT_RETENTION_DAYS, FIXED_PERMANENT, Phase

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
PRIVATE_A = Phase("private", "private", owner="a")


def ago(days: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(days=days)).isoformat(timespec="seconds")


def put(store, text: str, memory_type: str, created: str) -> str:
    record = NewMemory(str(uuid.uuid4()), "a", text, memory_type, "private", None, created, None, None)
    return store.add(record)[0]["id"]


def test_the_seeds_formula():
    assert importance_of(90, 0, 90) == pytest.approx(0.5)
    assert importance_of(30, 0, 30) == pytest.approx(0.5)
    # 19 accesses: ln(20) = 3.0 (the cap): the memory ages four times slower
    assert importance_of(90, 19, 90) == pytest.approx(2 ** -(90 / (1 + math.log(20)) / 90))
    assert importance_of(90, 10_000, 90) == pytest.approx(2**-0.25)  # capped at ln(1 + n) = 3
    assert importance_of(100, 0, 30) < 0.10 < importance_of(99, 0, 30)  # a task log fades after ~100 unused days
    assert importance_of(10_000, 0, None) == 1.0


def test_half_lives_per_type_and_the_permanent_ones_never_decay():
    rules = DEFAULT_DECAY
    assert (rules.half_life("procedure"), rules.half_life("task_log")) == (90.0, 30.0)
    assert rules.half_life("session") and rules.half_life("chat_summary")
    for kind in FIXED_PERMANENT:
        assert rules.importance({"memory_type": kind, "created_at": "2000-01-01T00:00:00+00:00"}, NOW) == 1.0
    old = {"memory_type": "procedure", "created_at": "2026-03-05T12:00:00+00:00", "access_count": 0}
    assert rules.importance(old, NOW) == pytest.approx(2 ** -(270 / 90))
    moved = {**old, "valid_from": "2026-11-30T12:00:00+00:00"}  # an update: its text is new
    assert rules.importance(moved, NOW) == pytest.approx(1.0)
    restored = {**old, "restored_at": "2026-08-02T12:00:00+00:00"}  # age counts from the restore
    assert rules.importance(restored, NOW) == pytest.approx(2 ** -(120 / 90))


def test_the_tally_counts_in_memory_and_takes_back_what_was_not_written():
    tally = AccessTally(max_ids=2)
    assert tally.hit(["x", "y", "x"], "2026-11-30T10:00:00+00:00") == 3
    assert tally.hit(["z"], "2026-11-30T11:00:00+00:00") == 3 and tally.dropped == 1  # bounded
    batch = tally.take()
    assert batch == {"x": (2, "2026-11-30T10:00:00+00:00"), "y": (1, "2026-11-30T10:00:00+00:00")}
    assert len(tally) == 0
    tally.hit(["x"], "2026-11-30T12:00:00+00:00")
    tally.put_back(batch)
    assert tally.take()["x"] == (3, "2026-11-30T12:00:00+00:00")


def test_hits_are_written_as_counts(store):
    memory_id = put(store, "the deploy runbook", "procedure", ago(1))
    assert store.get(memory_id)["access_count"] == 0 and store.get(memory_id)["last_accessed"] is None
    assert store.record_access({memory_id: (3, "2026-11-30T10:00:00+00:00")}) == 1
    assert store.record_access({memory_id: (2, "2026-11-29T10:00:00+00:00"), str(uuid.uuid4()): (1, "x")}) == 1
    got = store.get(memory_id)
    assert got["access_count"] == 5 and got["last_accessed"] == "2026-11-30T10:00:00+00:00"


def test_a_faded_memory_gives_way_to_an_equally_relevant_fresh_one(store):
    store.decay = DecayRules(rank_weight=0.3)  # a heavier weight than the default, to see it work
    old = put(store, "Deploy steps: run make deploy on the bastion host", "procedure", ago(300))
    fresh = put(store, "Deploy steps: run make deploy on the bastion host.", "procedure", ago(1))
    permanent = put(store, "Deploy steps, as decided: run make deploy on the bastion host", "decision", ago(900))
    found = store.search("how do I deploy", [PRIVATE_A], limit=3, explain=True)
    order = [r["id"] for r in found]
    assert order.index(fresh) < order.index(old) and order.index(permanent) < order.index(old)
    by_id = {r["id"]: r for r in found}
    assert by_id[old]["importance"] < 0.15 and by_id[permanent]["importance"] == 1.0
    details = by_id[old]["score_details"]
    assert details["decay_factor"] == pytest.approx(1 - 0.3 + 0.3 * details["importance"], abs=1e-3)
    store.decay = DecayRules(rank_weight=0.0)  # relevance alone: importance shown, not used
    alone = store.search("how do I deploy", [PRIVATE_A], limit=3, explain=True)
    assert all(r["score_details"]["decay_factor"] == 1.0 for r in alone)


def test_the_cleanup_archives_what_faded_and_deletes_nothing(store):
    faded = put(store, "a task log from last year", "task_log", ago(120))
    used = put(store, "a task log from last year that agents keep reading", "task_log", ago(120))
    store.record_access({used: (19, ago(1))})  # ages four times slower: 30 days' worth
    fresh = put(store, "this morning's task log", "task_log", ago(0.1))
    forever = put(store, "a fact from long ago", "fact", ago(4000))
    retention = {**DEFAULT_RETENTION_DAYS, "task_log": None}  # kept by retention: only decay applies
    now = datetime.now(timezone.utc)
    entries: list[dict] = []
    dry = run_cleanup(store, Rules(retention, decay=DEFAULT_DECAY), execute=False, audit=entries.append, now=now)
    assert dry.archived == 1 and [e["id"] for e in entries if e["event"] == "would_archive"] == [faded]
    assert store.states([faded]) == {faded: "valid"}
    done = run_cleanup(store, Rules(retention, decay=DEFAULT_DECAY), execute=True, audit=entries.append, now=now)
    assert done.archived == 1 and done.deleted == 0 and done.to_dict()["by_type"]["task_log"]["archived"] == 1
    assert [e["id"] for e in entries if e["event"] == "archived"] == [faded]
    assert "decay by use" in next(e["reason"] for e in entries if e["event"] == "archived")
    assert store.states([faded, used, fresh, forever]) == {
        faded: "archived",
        used: "valid",
        fresh: "valid",
        forever: "valid",
    }
    assert faded not in {r["id"] for r in store.search("task log", [PRIVATE_A], limit=10)}
    assert faded in {r["id"] for r in store.search("task log", [PRIVATE_A], limit=10, show_archived=True)}
    again = run_cleanup(store, Rules(retention, decay=DEFAULT_DECAY), execute=True, now=now)
    assert again.archived == 0, "an archived memory is not archived again"
    assert store.restore_fields(faded, {"state": None, "archived": None, "restored_at": now.isoformat()})
    assert store.get(faded)["importance"] == pytest.approx(1.0, abs=1e-3)
    assert run_cleanup(store, Rules(retention, decay=DEFAULT_DECAY), execute=True, now=now).archived == 0
