"""daemon/conversation/broker.py and its parts (l4_writes, l4_reads, l4_queue, l4_status), in-process on a real root.

The store is a remote server at a closed port, so no store call ever succeeds:
what is tested is where each request goes while L4 is down: writes to the durable
queue (real apsw), searches to the caller's own L3 index (real), changes refused.
The embedder is the stand-in (tests/stand_in_embedder.py); the broker's probe
thread is not started, so nothing changes under the test.
"""

from __future__ import annotations

import json
import socket

import pytest
import yaml

from daemon.common.contracts import ConversationStatus
from daemon.common.domain_errors import ConversationUnavailableError, SecretRefusedError
from layers.conversation.policy.rules import PolicyError
from protocol.operations import Add, DeleteAll, MemorySearch, Update
from tests.daemon.conftest import Service
from tests.helpers import FAKE_API_KEY, registry_of
from tests.stand_in_embedder import StandInEmbedder


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def down(service_root, monkeypatch):
    """A service whose L4 is enabled, remote and unreachable; the broker is built, not started."""
    embedder = StandInEmbedder()
    for name, value in embedder.configure(service_root).items():
        monkeypatch.setenv(name, value)
    data = yaml.safe_load(service_root.read_text())
    data["conversation"] = {
        "enabled": True,
        "backend": "remote",
        "qdrant": {"url": f"http://127.0.0.1:{_closed_port()}", "timeout_s": 1},
    }
    service_root.write_text(yaml.safe_dump(data, sort_keys=False))
    s = Service(service_root.parent, service_root).open()
    s.daemon.broker = s.daemon._make_broker()
    yield s
    s.daemon.broker.stop(2)
    s.close()
    embedder.close()


def test_a_write_while_the_store_is_down_is_queued_durably(down):
    broker = down.daemon.broker
    answer = broker.add(Add("main", "the deploy window is Tuesday", memory_type="decision"))
    assert answer["queued"] is True and answer["ahead"] == 0
    assert answer["visibility"] == "private" and answer["memory_type"] == "decision"
    assert broker.queue.depth() == 1 and broker.queue.contains(answer["write_id"], "main")
    again = broker.add(Add("main", "the deploy window is Tuesday", write_id=answer["write_id"]))
    assert again["queued"] is True and "already queued" in again["reason"]
    assert broker.queue.depth() == 1, "a retried write_id is queued once"
    assert broker.status()["queue"]["depth"] == 1


def test_a_write_behind_queued_ones_waits_its_turn(down):
    broker = down.daemon.broker
    broker.add(Add("main", "first"))
    second = broker.add(Add("main", "second"))
    assert second["ahead"] == 1 and "earlier writes are still queued" in second["reason"]


def test_a_secret_is_refused_before_anything_is_kept_and_audited(down):
    broker = down.daemon.broker
    with pytest.raises(SecretRefusedError) as refused:
        broker.add(Add("main", f"the key is {FAKE_API_KEY}"))
    assert FAKE_API_KEY not in str(refused.value)
    assert broker.queue.depth() == 0
    lines = [json.loads(line) for p in broker.audit.directory.glob("*") for line in p.read_text().splitlines()]
    assert any(e.get("event") == "secret_refused" and e.get("agent") == "main" for e in lines)


def test_bad_requests_are_policy_errors(down):
    broker = down.daemon.broker
    with pytest.raises(PolicyError, match="empty"):
        broker.add(Add("main", "   "))
    with pytest.raises(PolicyError, match="role"):
        broker.add(Add("main", "text", role="system"))
    with pytest.raises(PolicyError, match="infer needs an LLM"):
        broker.add(Add("main", "text", infer=True))


def test_a_search_while_the_store_is_down_is_answered_from_the_callers_l3_index(down):
    d = down.daemon
    (down.workspace / "MEMORY.md").write_text("# MEMORY\nthe rambutan shipment arrives Friday\n")
    d.reconciler.all()
    answer = d.broker.search(MemorySearch("main", "rambutan"))
    assert answer["layer"] == "local" and answer["degraded"] is True
    assert "unreachable" in answer["reason"]
    assert [r["path"] for r in answer["results"]] == ["MEMORY.md"] and answer["results"][0]["source"] == "local"
    with pytest.raises(ConversationUnavailableError):
        d.broker.search(MemorySearch("main", "rambutan", fallback=False))


def test_changes_while_the_store_is_down_are_refused_never_queued(down):
    broker = down.daemon.broker
    memory_id = "00000000-0000-4000-8000-000000000000"
    for change in (
        lambda: broker.delete("main", memory_id),
        lambda: broker.update(Update("main", memory_id, "new text")),
        lambda: broker.delete_all(DeleteAll("main")),
    ):
        with pytest.raises(ConversationUnavailableError, match="nothing was queued"):
            change()
    assert broker.queue.depth() == 0
    with pytest.raises(LookupError):
        broker.get("main", "not-a-uuid")  # not even asked of the store


def test_the_conversation_status_keeps_its_keys(down):
    d = down.daemon
    d.board.publish()
    status = d.status()["conversation"]
    assert status["enabled"] is True and status["backend"] == "remote" and status["reachable"] is False
    assert set(status) == set(ConversationStatus.__annotations__), "the keys daemon/common/contracts.py defines"
    assert {"import", "index", "queue", "tailscale"} <= set(status)
    assert set(status["queue"]) == {
        "depth", "oldest_age_s", "writable", "replayed", "skipped_already_written", "replay_rate_per_s",
        "eta_s", "set_aside", "set_aside_recent", "unflushed", "checkpoints", "checkpoint_error",
    }  # fmt: skip


def test_a_project_memory_is_placed_by_the_registry(down):
    registry = registry_of(down.root)
    data = yaml.safe_load(registry.read_text())
    data.setdefault("projects", {})["infra"] = {"members": ["main"], "keywords": ["qdrant"]}
    registry.write_text(yaml.safe_dump(data, sort_keys=False))
    answer = down.daemon.broker.add(Add("main", "qdrant listens on 6333", memory_type="knowledge"))
    assert (answer["visibility"], answer["project_id"]) == ("project", "infra") and answer["visibility_inferred"]
