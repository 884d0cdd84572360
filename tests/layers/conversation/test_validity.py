"""Validity windows on the real store (Qdrant Edge, the real GGUF model): superseded memories leave search
inside the engine's query, the chain is kept, and a restore of the lifecycle fields undoes it."""

from __future__ import annotations

import pytest

from layers.conversation.policy import validity
from layers.conversation.policy.rules import Phase
from tests.layers.conversation.test_store import CREATED, memory

PRIVATE_A = Phase("private", "private", owner="a")
PUBLIC = Phase("public", "public")
AT = "2026-12-01T09:00:00+00:00"


def test_a_new_memory_is_valid_from_its_write(store):
    [added] = store.add(memory("a", "Qdrant 部署在 6333 端口"))
    got = store.get(added["id"])
    assert got["valid_from"] == CREATED and got["state"] == "valid"
    assert got["invalid_at"] is None and got["superseded_by"] is None and got["archived"] is None


def test_superseded_memories_leave_search_and_listing_unless_asked(store):
    [old] = store.add(memory("a", "Qdrant 部署在 6333 端口"))
    [new] = store.add(memory("a", "Qdrant 改到了 6334 端口"))
    store.supersede([old["id"]], new["id"], AT)
    found = store.search("Qdrant 端口", [PRIVATE_A], limit=5)
    assert [r["id"] for r in found] == [new["id"]]
    both = store.search("Qdrant 端口", [PRIVATE_A], limit=5, show_superseded=True)
    assert {r["id"] for r in both} == {old["id"], new["id"]}
    listed, _ = store.list([PRIVATE_A])
    assert [r["id"] for r in listed] == [new["id"]]
    listed, _ = store.list([PRIVATE_A], show_superseded=True)
    assert len(listed) == 2
    gone = store.get(old["id"])  # by id it is still there, and says what replaced it and when
    assert gone["state"] == "superseded" and gone["invalid_at"] == AT and gone["superseded_by"] == new["id"]
    assert [p["id"] for p in store.predecessors(new["id"])] == [old["id"]]


def test_top_k_is_filled_with_valid_memories(store):
    """The filter is inside the engine's query: hidden memories take none of the ``limit`` places."""
    olds = [store.add(memory("a", f"旧的端口记录 {i}: 6333"))[0]["id"] for i in range(6)]
    [new] = store.add(memory("a", "新的端口记录: 6334"))
    store.supersede(olds, new["id"], AT)
    others = [store.add(memory("a", f"其他记录 {i}"))[0]["id"] for i in range(3)]
    found = store.search("端口记录 6333", [PRIVATE_A], limit=4)
    assert len(found) == 4 and not {r["id"] for r in found} & set(olds)
    assert {r["id"] for r in found} == {new["id"], *others}


def test_one_supersede_marks_every_old_memory_in_one_engine_update(store):
    ids = [store.add(memory("a", f"task log {i}", memory_type="task_log"))[0]["id"] for i in range(5)]
    [summary] = store.add(memory("a", "five task logs, consolidated"))
    shard = store._client
    before = shard.writes
    store.supersede(ids, summary["id"], AT)
    assert shard.writes - before == len(ids)  # counted per point, written as one operation
    assert store.states([*ids, summary["id"]]) == {**{i: "superseded" for i in ids}, summary["id"]: "valid"}
    assert store.supersede([summary["id"]], summary["id"], AT) is None  # a memory never supersedes itself
    assert store.states([summary["id"]]) == {summary["id"]: "valid"}


def test_restoring_the_lifecycle_fields_undoes_a_supersede(store):
    [old] = store.add(memory("a", "周会在周三"))
    [new] = store.add(memory("a", "周会改到周四"))
    before = store.get(old["id"])
    store.supersede([old["id"]], new["id"], AT)
    assert store.restore_fields(old["id"], {"state": None, "invalid_at": None, "superseded_by": None})
    after = store.get(old["id"])
    assert after == before
    assert {r["id"] for r in store.search("周会", [PRIVATE_A], limit=5)} == {old["id"], new["id"]}
    with pytest.raises(ValueError, match="only the lifecycle fields"):
        store.restore_fields(old["id"], {"agent_id": "b"})
    assert store.restore_fields("5b0c1f9e-6c3a-4d8e-9a57-2f4b8e61c0a3", {"state": None}) is False


def test_an_update_moves_valid_from(store):
    [added] = store.add(memory("a", "备份在凌晨四点"))
    store.update(added["id"], "备份改到凌晨三点")
    got = store.get(added["id"])
    assert got["valid_from"] > CREATED and got["created_at"] == CREATED and got["state"] == "valid"


def test_a_memory_from_before_validity_counts_as_valid(store):
    """Points written without ``state`` or ``valid_from`` (an older version) pass the filter."""
    [added] = store.add(memory("a", "an old memory"))
    shard = store._client
    payload = dict(store._payloads([added["id"]])[added["id"]])
    payload.pop("valid_from")
    shard.replace_payload(added["id"], payload)
    [found] = store.search("old memory", [PRIVATE_A], limit=3)
    assert found["valid_from"] == CREATED and found["state"] == "valid"


def test_the_validity_fields_are_reserved():
    from layers.conversation.policy.metadata import RESERVED

    assert set(validity.LIFECYCLE_FIELDS) <= RESERVED
