"""mem0's ids and custom metadata through the broker: checked, guarded, queued and replayed with the memory.

In process, on a real root (tests/daemon/conversation_service.py): the embedded store, or a
remote one at a closed port so that writes are queued and then replayed into the embedded one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from daemon.common.domain_errors import ConversationUnavailableError, SecretRefusedError
from layers.conversation.policy.metadata import MAX_METADATA_BYTES
from layers.conversation.policy.rules import PolicyError
from protocol.operations import Add, List, MemorySearch
from tests.daemon.conversation_service import enable, l4_service, unreachable
from tests.helpers import wait_for
from tests.stand_in_embedder import StandInEmbedder


@pytest.fixture
def embedder() -> Iterator[StandInEmbedder]:
    e = StandInEmbedder()
    yield e
    e.close()


def test_ids_and_metadata_are_checked_and_never_hold_a_secret(service_root, embedder):
    enable(service_root, embedder)
    with l4_service(service_root) as up:
        broker = up.daemon.broker
        added = broker.add(
            Add("main", "Alice likes tea", user_id="alice", metadata={"category": "drinks", "n": [1, 2]})
        )
        assert (added["user_id"], added["metadata"]) == ("alice", {"category": "drinks", "n": [1, 2]})
        (stored,) = broker.get_all(List("main", filters={"user_id": "alice"}))["results"]
        assert stored["metadata"] == {"category": "drinks", "n": [1, 2]} and stored["user_id"] == "alice"
        for bad, message in (
            ({"metadata": {"visibility": "public"}}, "reserved"),
            ({"metadata": {"agent_id": "b"}}, "reserved"),
            ({"metadata": {"hub_readers": ["b"]}}, "reserved"),  # a spoke's replica's word (metadata.INTERNAL)
            ({"metadata": {"blob": "x" * MAX_METADATA_BYTES}}, "at most 4,096"),
            ({"metadata": {"x": float("nan")}}, "finite"),
            ({"user_id": "alice smith"}, "no whitespace"),
            ({"run_id": ""}, "1-128 characters"),
        ):
            with pytest.raises(PolicyError, match=message):
                broker.add(Add("main", "refused", **bad))
        secret = "AKIA" + "IOSFODNN7EXAMPLE"  # an AWS access key id (never_store)
        for bad in ({"metadata": {"note": secret}}, {"metadata": {"deep": {"list": [secret]}}}, {"user_id": secret}):
            with pytest.raises(SecretRefusedError, match="metadata matches never_store"):
                broker.add(Add("main", "harmless text", **bad))
        assert [m["memory"] for m in broker.get_all(List("main"))["results"]] == ["Alice likes tea"], (
            "nothing else kept"
        )
        with pytest.raises(PolicyError, match="unknown operator"):
            broker.search(MemorySearch("main", "tea", filters={"user_id": {"like": "a%"}}))
        with pytest.raises(PolicyError, match="memstrata's own field"):
            broker.get_all(List("main", filters={"hub_readers": "main"}))


def test_a_queued_write_keeps_its_ids_and_metadata_when_replayed(service_root, embedder):
    enable(service_root, embedder, **unreachable())
    with l4_service(service_root, start=False) as down:
        answer = down.daemon.broker.add(Add(
            "main", "Alice's flight is on Friday", user_id="alice", run_id="trip-7", actor_id="Alice",
            metadata={"category": "travel"}, write_id="w-flight",
        ))  # fmt: skip
        assert answer["queued"] is True
        with pytest.raises(ConversationUnavailableError, match="not answered from the local index"):
            down.daemon.broker.search(MemorySearch("main", "flight", filters={"user_id": "alice"}))
    enable(service_root, embedder, probe_interval_s=0.2)
    with l4_service(service_root) as up:
        broker = up.daemon.broker
        wait_for(lambda: broker.queue.depth() == 0, timeout=60, what="the queue replayed")
        (memory,) = broker.get_all(List("main", filters={"run_id": "trip-7"}))["results"]
        assert (memory["user_id"], memory["actor_id"], memory["metadata"]) == ("alice", "Alice", {"category": "travel"})
        assert (
            broker.search(MemorySearch("main", "flight", filters={"category": "travel"}))["results"][0]["id"]
            == memory["id"]
        )
