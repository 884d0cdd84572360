"""L4 search through the real daemon and the real model, many agents writing alike (issue 50 items 4 and 5).

Agent a writes private memories and agents b and c public ones, all from one sentence template, so
that most of them lie above the top of the relevance scale for one another's text.  Searching a
memory's own exact text as a must find it in the top 10 whatever phase it is in: before, the
relevance saturated at 1.0, the ten results tied and the public phase came first, hiding a's own.
"""

from __future__ import annotations

import pytest
import yaml

from daemon.front.daemon_client import DaemonClient
from tests.helpers import FAST, init_root, registry_of, run_cli, token_of, wait_reachable

SERVICES = ("qdrant", "redis", "postgres", "kafka")


def alike(i: int) -> str:
    """The i-th of many near-identical memories (only a service, a node and two numbers differ)."""
    return f"The {SERVICES[i % 4]} deploy on node-{i % 7} needs checklist step {i % 5 + 2} before {i % 11 + 8}:00"


@pytest.fixture
def root(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    for agent in ("a", "b", "c"):
        run_cli("agent", "add", agent, config=config)
    registry = registry_of(tmp_path)
    data = yaml.safe_load(registry.read_text())
    for agent in ("b", "c"):
        data["agents"][agent]["can_write_public"] = True
    registry.write_text(yaml.safe_dump(data))
    daemon = daemons(config)
    wait_reachable(daemon)

    def client(agent: str) -> DaemonClient:
        return DaemonClient(daemon.socket, timeout=120, token=token_of(tmp_path, agent))

    return client


def test_an_agents_own_memory_is_found_by_its_text_among_alike_public_ones(root):
    texts = [alike(i) for i in range(36)]
    private, public = texts[:12], texts[12:]
    with root("a") as a, root("b") as b, root("c") as c:
        for text in private:
            a.add("a", text, visibility="private", infer=False)
        for i, text in enumerate(public):
            (b if i % 2 else c).add("b" if i % 2 else "c", text, visibility="public", infer=False)
        found, first = {"private": 0, "public": 0}, {"private": 0, "public": 0}
        for text in texts:
            results = a.memory_search("a", text, limit=10, explain=True)["results"]
            kind = "private" if text in private else "public"
            found[kind] += text in [r["memory"] for r in results]
            first[kind] += results[0]["memory"] == text
        assert found == {"private": 12, "public": 24}, found
        assert first == {"private": 12, "public": 24}, first
        # the order of the ten is the order of their cosines: above the scale's top nothing ties
        results = a.memory_search("a", "the qdrant deploy checklist", limit=10, explain=True)["results"]
        cosines = [r["score_details"]["cosine"] for r in results]
        assert cosines == sorted(cosines, reverse=True)


def test_a_mem0_threshold_keeps_a_related_memory_and_drops_an_unrelated_one(root):
    with root("a") as a:
        a.add("a", "I'm a vegetarian and allergic to nuts", infer=False)
        a.add("a", "The printer on the third floor jams on thick paper", infer=False)
        a.add("a", "我对花生过敏，不能吃坚果", infer=False)
        a.add("a", "周会改到周三下午三点", infer=False)
        for threshold in (0.1, 0.3, 0.5):
            kept = {r["memory"] for r in a.memory_search("a", "alice's allergies", threshold=threshold)["results"]}
            assert "I'm a vegetarian and allergic to nuts" in kept, (threshold, kept)
            assert "The printer on the third floor jams on thick paper" not in kept, (threshold, kept)
            kept = {r["memory"] for r in a.memory_search("a", "我对什么过敏", threshold=threshold)["results"]}
            assert "我对花生过敏，不能吃坚果" in kept and "周会改到周三下午三点" not in kept, (threshold, kept)
