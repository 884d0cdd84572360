"""The planner alone (no store): what it folds, what it keeps apart, when it refuses.

Vectors here are made up on purpose (the real model's cosines are tested in test_calibration.py
and on the real store in test_consolidation.py): they pin what the planner does with a cosine.
"""

from __future__ import annotations

import numpy as np

from layers.conversation.consolidation.plan import Planner, Stored, Thresholds


def memory(n: int, text: str, vector, agent="a", visibility="private", **payload) -> Stored:
    data = {"data": text, "agent_id": agent, "visibility": visibility, "memory_type": "fact", **payload}
    data.setdefault("created_at", f"2026-01-01T00:00:{n:02d}+00:00")
    return Stored(f"id-{n}", data, np.asarray(vector, dtype=np.float32))


def plan(memories, **thresholds):
    planner = Planner(Thresholds(**thresholds), now=0)
    planner.add(memories)
    return planner.build()


def test_the_same_text_folds_whatever_the_vectors_say():
    result = plan([memory(1, "Qdrant 部署在 6333 端口", [1, 0]), memory(2, "qdrant 部署在 6333 端口。", [0, 1])])
    (cluster,) = result.clusters
    assert cluster.kind == "exact" and len(cluster.superseded) == 1


def angle(degrees: float) -> list[float]:
    return [float(np.cos(np.radians(degrees))), float(np.sin(np.radians(degrees)))]


def test_each_member_is_compared_with_its_keeper_not_reached_through_a_chain():
    a = memory(1, "the build runs on kestrel", angle(0))  # with C: cosine 0.866, under the threshold
    b = memory(2, "Note: the build runs on kestrel", angle(15))  # 0.966 with A and with C
    c = memory(3, "Note: the build runs on kestrel, confirmed", angle(30))
    # B has two duplicates (A, C), A and C one each: B keeps; A and C are each a duplicate of B itself
    assert plan([a, b, c]).superseded() == {"id-1": "id-2", "id-3": "id-2"}
    # with D beyond C, C has two duplicates (B, D) and the most words: it keeps them, and A, a
    # duplicate of B but not of C (0.866), stays valid rather than be folded through B
    d = memory(4, "Reminder: note: the build runs on kestrel, confirmed", angle(45))
    assert plan([a, b, c, d]).superseded() == {"id-2": "id-3", "id-4": "id-3"}
    close = memory(1, "the build runs on kestrel", angle(25))
    assert plan([close, b, c]).superseded() == {"id-1": "id-3", "id-2": "id-3"}
    d = memory(4, "Note: the build runs on falcon, confirmed", angle(30))
    assert "id-4" not in plan([close, b, c, d]).superseded()  # a word replaced: another fact


def test_scopes_keep_agents_visibility_and_ids_apart():
    same = "用户喜欢简洁的回答"
    result = plan(
        [
            memory(1, same, [1, 0]),
            memory(2, same, [1, 0], agent="b"),
            memory(3, same, [1, 0], visibility="public"),
            memory(4, same, [1, 0], user_id="alice"),
            memory(5, same, [1, 0], memory_type="preference"),
        ]
    )
    assert result.clusters == []


def test_superseded_archived_and_expired_memories_are_left_alone():
    same = "用户喜欢简洁的回答"
    result = plan(
        [
            memory(1, same, [1, 0]),
            memory(2, same, [1, 0], state="superseded", superseded_by="id-9"),
            memory(3, same, [1, 0], state="archived"),
            memory(4, same, [1, 0], expires_at=-1.0),
        ]
    )
    assert result.clusters == [] and result.agents["a"].valid == 1


def test_the_refusal_counts_each_agent_on_its_own():
    memories = [memory(i, f"fact number {i} of many", angle(9 * i)) for i in range(10)]
    memories += [memory(20, "fact number 1 of many.", angle(9)), memory(21, "x", [0, 1], agent="b")]
    result = plan(memories, max_share=0.05)
    assert result.agents["a"].invalidated == 1 and "agent a: 1 of its 11" in (result.refusal() or "")
    assert plan(memories, max_share=0.1).refusal() is None


def test_the_compared_memories_tokens_are_not_kept_after_the_plan():
    """Issue 51: up to 65,536 memories' tokens (~3 KB each) stayed resident between consolidations."""
    from layers.conversation.consolidation.sameness import TOKENS_KEPT, _tokens_of

    memories = [memory(n, f"the pump in shed {n} runs on port {7000 + n}", angle(n * 0.01)) for n in range(40)]
    result = plan(memories, conflict=0.5)
    assert result.clusters, "the memories were compared"
    assert _tokens_of.cache_info().currsize == 0
    assert _tokens_of.cache_info().maxsize == TOKENS_KEPT <= 8192
