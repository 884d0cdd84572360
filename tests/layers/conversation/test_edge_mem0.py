"""mem0 on an Edge shard (EdgeVectorStore): its own calls work, and no hit is dropped by a score threshold."""

from __future__ import annotations

import numpy as np

from layers.conversation.adapters.edge_mem0 import EdgeVectorStore
from layers.conversation.policy.rules import Phase
from tests.layers.conversation.test_store import memory

PRIVATE_A = Phase("private", "private", owner="a")


def test_mem0_runs_on_the_edge_shard_and_its_entity_store_too(store, tmp_path):
    mem0 = store._memory
    assert isinstance(mem0.vector_store, EdgeVectorStore) and isinstance(mem0._entity_store, EdgeVectorStore)
    assert (tmp_path / "l4" / "edge" / store.settings.collection / "edge_config.json").is_file()
    assert not (tmp_path / "l4" / "qdrant").exists(), "no qdrant-client local storage is made"
    assert store._client.indexes() == {
        "agent_id": "keyword",
        "visibility": "keyword",
        "project_id": "keyword",
        "memory_type": "keyword",
        "write_id": "keyword",
        "user_id": "keyword",
        "run_id": "keyword",
        "actor_id": "keyword",
        "state": "keyword",
        "superseded_by": "keyword",
        "trust": "keyword",
        "expires_at": "float",
    }
    [added] = store.add(memory("a", "旧的说法：端口是 6333"))
    mem0.update(added["id"], "新的说法：端口是 6334")
    assert store.get(added["id"])["memory"] == "新的说法：端口是 6334"
    assert [h["event"] for h in mem0.history(added["id"])] == ["ADD", "UPDATE"]
    listed = mem0.get_all(filters={"agent_id": "a"}, top_k=10)["results"]
    assert [m["id"] for m in listed] == [added["id"]]
    mem0.delete(added["id"])
    assert store.get(added["id"]) is None and store.count() == 0


def test_a_weak_hit_is_not_dropped_by_mem0s_default_threshold(store):
    """mem0 drops semantic scores under 0.1 by default; the store searches with 0.0 and clamps scores to [0, 1]."""
    [kept] = store.add(memory("a", "一条和查询毫不相干的记忆"))
    query = "部署 Qdrant"
    q = np.asarray(store.embedder.embed_query(query), dtype=float)
    store._client.set_vector(kept["id"], (-q).tolist())  # pointing away from the query: cosine -1
    with_default = store._memory.search(query, top_k=5, filters=PRIVATE_A.mem0_filters())["results"]
    assert with_default == [], "mem0's default threshold drops it (the behaviour the store must avoid)"
    found = store.search(query, [PRIVATE_A], limit=5)
    assert [r["id"] for r in found] == [kept["id"]] and found[0]["score"] == 0.0
