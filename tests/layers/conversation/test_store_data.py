"""mem0's ids as data and custom metadata in the L4 store, filtered in mem0's language, on Edge and on qdrant-client.

user_id / run_id / actor_id are what a memory is about, stored, returned and filtered on; a
filter is always inside a visibility phase and never widens it (agent a's private memory about
alice never reaches b, whatever b's filter says).
"""

from __future__ import annotations

import pytest

from layers.conversation.adapters.store import ASSISTANT_WEIGHT, EDGE, QDRANT_LOCAL, ConversationStore, StoreSettings
from layers.conversation.policy.filters import check
from tests.layers.conversation.test_store import INFRA, PRIVATE_A, PRIVATE_B, PUBLIC, memory


@pytest.fixture(params=[EDGE, QDRANT_LOCAL])
def any_store(request, tmp_path, embedder):
    s = ConversationStore(StoreSettings("embedded", tmp_path / "l4", engine=request.param), embedder, 384)
    s.connect()
    yield s
    s.close()


def fill(store) -> None:
    store.add(memory("a", "Alice loves sci-fi movies", user_id="alice", extra={"category": "movies", "rating": 5}))
    store.add(memory("a", "Bob is vegetarian", user_id="bob", run_id="r1", extra={"category": "food"}))
    store.add(
        memory("b", "Alice asked b about her flight to Berlin", user_id="alice", actor_id="Alice", role="user")
    )  # b's private memory about the same user_id
    store.add(memory("b", "Alice's team meets on Mondays", "project", "infra", user_id="alice"))


def texts(results) -> set[str]:
    return {r["memory"] for r in results}


def test_ids_and_metadata_are_stored_returned_and_filtered(any_store):
    fill(any_store)
    as_a = [PUBLIC, INFRA, PRIVATE_A]
    found = any_store.search("what does alice like", as_a, 10, filters=check({"user_id": "alice"}))
    assert texts(found) == {"Alice loves sci-fi movies", "Alice's team meets on Mondays"}
    top = next(r for r in found if r["memory"] == "Alice loves sci-fi movies")
    assert (top["user_id"], top["run_id"], top["agent_id"]) == ("alice", None, "a")
    assert top["metadata"] == {"category": "movies", "rating": 5}
    by_meta = any_store.search("food", as_a, 10, filters=check({"category": {"in": ["food"]}, "run_id": "r1"}))
    assert texts(by_meta) == {"Bob is vegetarian"}
    ranged = any_store.search("movies", as_a, 10, filters=check({"rating": {"gte": 4}}))
    assert texts(ranged) == {"Alice loves sci-fi movies"}
    substring = any_store.search("anything", as_a, 10, filters=check({"category": {"icontains": "MOV"}}))
    assert texts(substring) == {"Alice loves sci-fi movies"}
    either = check({"OR": [{"user_id": "bob"}, {"project_id": "infra"}]})
    assert texts(any_store.search("x", as_a, 10, filters=either)) == {
        "Bob is vegetarian",
        "Alice's team meets on Mondays",
    }
    page, cursor = any_store.list(as_a, 100, filters=check({"user_id": "alice"}))
    assert texts(page) == {"Alice loves sci-fi movies", "Alice's team meets on Mondays"} and cursor is None
    spoken = any_store.list([PRIVATE_B], 100, filters=check({"actor_id": "Alice"}))[0]
    assert [(m["actor_id"], m["role"]) for m in spoken] == [("Alice", "user")]


@pytest.mark.parametrize(
    "hostile",
    [
        {"user_id": "alice"},
        {"AND": [{"agent_id": "b"}, {"visibility": "private"}]},
        {"agent_id": "b"},
        {"OR": [{"agent_id": "b"}, {"user_id": "alice"}]},
        {"visibility": "*", "agent_id": "*"},
        {"NOT": [{"agent_id": "a"}]},
    ],
)
def test_a_filter_never_widens_what_the_caller_reads(any_store, hostile):
    """a reads public, infra and its own private memories; b's private memory about alice is never among them."""
    fill(any_store)
    as_a = [PUBLIC, INFRA, PRIVATE_A]
    found = any_store.search("Alice flight Berlin", as_a, 10, filters=check(hostile))
    listed = any_store.list(as_a, 100, filters=check(hostile))[0]
    for results in (found, listed):
        assert "Alice asked b about her flight to Berlin" not in texts(results)
        assert all(r["visibility"] != "private" or r["agent_id"] == "a" for r in results)


def test_relevance_on_the_real_model_makes_mem0s_threshold_mean_something(store):
    """A raw e5 cosine is ~0.75 for an unrelated pair, above any threshold a mem0 user picks; on the calibrated
    scale (layers/local/models/vectors.py PAIR_FLOORS/PAIR_SPAN, bench/bench_relevance.py) mem0's 0.1 drops it."""
    store.add(memory("a", "Alice prefers tea over coffee"))
    store.add(memory("a", "The backup job runs every day at four in the morning"))
    store.add(memory("a", "部署了 Qdrant，端口 6333"))
    raw = store.search("what does Alice drink", [PRIVATE_A], 10, explain=True)
    assert min(r["score_details"]["cosine"] for r in raw) > 0.6, "the model's unrelated pairs score high"
    kept = store.search("what does Alice drink", [PRIVATE_A], 10, threshold=0.1)
    assert [r["memory"] for r in kept] == ["Alice prefers tea over coffee"]
    assert (
        store.search("Qdrant 用的哪个端口", [PRIVATE_A], 10, threshold=0.1)[0]["memory"] == "部署了 Qdrant，端口 6333"
    )
    assert store.search("recipe for chocolate cake", [PRIVATE_A], 10, threshold=0.1) == []
    details = raw[0]["score_details"]
    assert details["calibrated"] is True and details["phase"] == "private" and 0 <= details["relevance"] <= 1
    assert details["visibility"] == "private: yours (a)"


def test_an_assistants_turn_is_ranked_below_the_users_own_words(store):
    """infer=False keeps every turn; "Hey Alex! I'll remember…" must not crowd out what Alex said (ASSISTANT_WEIGHT)."""
    store.add(memory("a", "Hi, I'm Alex. I work as a nurse in Boston.", user_id="alex"))
    store.add(memory("a", "Hey Alex! I'll remember that you're a nurse in Boston.", user_id="alex", role="assistant"))
    found = store.search("where does Alex work", [PRIVATE_A], 10, explain=True)
    by_role = {r["role"]: r["score_details"] for r in found}
    assert by_role["assistant"]["role_weight"] == ASSISTANT_WEIGHT and by_role["user"]["role_weight"] == 1.0
    assert by_role["assistant"]["score"] == pytest.approx(
        by_role["assistant"]["relevance"] * ASSISTANT_WEIGHT, abs=1e-3
    )
    only_user = store.search("what do you know about me?", [PRIVATE_A], 10, filters=check({"role": "user"}))
    assert [r["memory"] for r in only_user] == ["Hi, I'm Alex. I work as a nurse in Boston."]
