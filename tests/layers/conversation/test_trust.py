"""Trust on the real store (Qdrant Edge, the real GGUF model): who may claim what, trust_min inside the query,
equal scores ranked by trust, and a memory from before trust counted as medium."""

from __future__ import annotations

import dataclasses

import pytest

from layers.conversation.policy.rules import ForbiddenError, Phase, PolicyError, provenance
from tests.layers.conversation.test_store import memory

PRIVATE_A = Phase("private", "private", owner="a")


def test_trust_and_source_by_path_and_what_an_agent_may_claim():
    assert provenance(admin=False, trust=None, source=None, infer=False) == ("medium", "agent_output")
    assert provenance(admin=False, trust=None, source=None, infer=True) == ("medium", "inferred")
    assert provenance(admin=True, trust=None, source=None, infer=False) == ("high", "operator")
    assert provenance(admin=False, trust="low", source="tool_result", infer=False) == ("low", "tool_result")
    assert provenance(admin=True, trust="low", source="user_direct", infer=False) == ("low", "user_direct")
    with pytest.raises(ForbiddenError, match="at most medium"):
        provenance(admin=False, trust="high", source=None, infer=False)
    with pytest.raises(ForbiddenError, match="operator"):
        provenance(admin=False, trust=None, source="operator", infer=False)
    with pytest.raises(PolicyError, match="unknown trust 'total'"):
        provenance(admin=True, trust="total", source=None, infer=False)
    with pytest.raises(PolicyError, match="unknown source"):
        provenance(admin=False, trust=None, source="rumour", infer=False)


def _put(store, text: str, trust: str | None) -> str:
    record = dataclasses.replace(memory("a", text), trust=trust, provenance="agent_output" if trust else None)
    return store.add(record)[0]["id"]


def test_trust_min_filters_inside_the_query_and_an_old_memory_counts_as_medium(store):
    high = _put(store, "the VPN endpoint is vpn.example.org (operator)", "high")
    medium = _put(store, "the VPN endpoint is vpn.example.org (agent)", "medium")
    low = _put(store, "the VPN endpoint might be vpn2.example.org", "low")
    older = _put(store, "the VPN endpoint was vpn0.example.org", None)  # written before trust existed
    assert store.get(older)["trust"] == "medium" and store.get(older)["provenance"] is None

    def found(trust_min):
        return {r["id"] for r in store.search("VPN endpoint", [PRIVATE_A], limit=2, trust_min=trust_min)}

    assert found("high") == {high}
    assert len(store.search("VPN endpoint", [PRIVATE_A], limit=3, trust_min="medium")) == 3  # top_k stays full
    assert {r["id"] for r in store.search("VPN endpoint", [PRIVATE_A], limit=5, trust_min="medium")} == {
        high,
        medium,
        older,
    }
    assert {r["id"] for r in store.search("VPN endpoint", [PRIVATE_A], limit=5, trust_min="low")} == {
        high,
        medium,
        low,
        older,
    }


def test_equal_scores_rank_by_trust(store):
    """The same words at three trust levels (different owners' copies would merge by hash: one scope here)."""
    ids = {
        trust: _put(store, f"backups run at four{suffix}", trust)
        for trust, suffix in (("low", " "), ("high", "  "), ("medium", "   "))
    }
    found = store.search("when do backups run", [PRIVATE_A], limit=3)
    scores = [r["score"] for r in found]
    assert len(set(scores)) == 1, "stored with the same text, they score the same"
    assert [r["id"] for r in found] == [ids["high"], ids["medium"], ids["low"]]
