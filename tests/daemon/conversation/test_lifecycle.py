"""A memory's lifecycle through the broker (validity, superseding), in-process on a real root.

The broker over the embedded store (Qdrant Edge files in the state directory), composed as the
daemon composes it (tests/daemon/conversation_service.py); the embedder is the stand-in HTTP
endpoint.  What is checked is what the rules promise: an agent supersedes only what it may
change, another agent's private memory is never touched nor admitted to exist (the same answer
as an unknown id), a superseded memory leaves searches and listings but keeps its history, and
a superseding write is never queued.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator

import pytest
import yaml

from daemon.common.domain_errors import ConversationUnavailableError, NoSuchMemoryError
from layers.conversation.policy.rules import ForbiddenError, PolicyError
from protocol.operations import Add, List, MemorySearch, RestoreMemory
from tests.daemon.conversation_service import enable, l4_service, unreachable
from tests.helpers import registry_of
from tests.stand_in_embedder import StandInEmbedder

UNKNOWN = "5b0c1f9e-6c3a-4d8e-9a57-2f4b8e61c0a3"


@pytest.fixture
def embedder() -> Iterator[StandInEmbedder]:
    e = StandInEmbedder()
    yield e
    e.close()


@pytest.fixture
def broker(service_root, embedder):
    """Agents main and beta; beta may write public memories too."""
    registry = registry_of(service_root.parent)
    data = yaml.safe_load(registry.read_text())
    data["agents"]["beta"] = {"projects": [], "can_write_public": True}
    registry.write_text(yaml.safe_dump(data, sort_keys=False))
    enable(service_root, embedder)
    with l4_service(service_root) as up:
        yield up.daemon.broker


def _id(answer: dict) -> str:
    [result] = answer["results"]
    return result["id"]


def _audit(broker) -> list[dict]:
    lines = []
    for path in sorted(broker.audit.directory.glob("*.log")):
        lines += [json.loads(line) for line in path.read_text().splitlines()]
    return lines


def test_a_superseded_memory_leaves_search_and_keeps_its_chain(broker):
    old = _id(broker.add(Add("main", "the staging database listens on 5432", visibility="public")))
    answer = broker.add(Add("main", "the staging database moved to 6543", visibility="public", supersedes=old))
    new = _id(answer)
    assert answer["supersedes"] == old and answer["superseded"] is True
    found = broker.search(MemorySearch("beta", "staging database port"))["results"]
    assert [r["id"] for r in found] == [new]
    both = broker.search(MemorySearch("beta", "staging database port", show_superseded=True))["results"]
    assert {r["id"] for r in both} == {old, new}
    assert [r["id"] for r in broker.get_all(List("beta"))["results"]] == [new]
    assert {r["id"] for r in broker.get_all(List("beta", show_superseded=True))["results"]} == {old, new}
    gone = broker.get("beta", old)
    assert (gone["state"], gone["superseded_by"]) == ("superseded", new) and gone["invalid_at"]
    history = broker.history("beta", new)
    assert [step["id"] for step in history["chain"]] == [old, new]
    assert [step["state"] for step in history["chain"]] == ["superseded", "valid"]
    assert [e["event"] for e in broker.history("beta", old)["results"]] == ["ADD"]
    assert {"event": "memory_superseded", "memory_id": old, "superseded_by": new}.items() <= _audit(broker)[-1].items()


def test_another_agents_private_memory_is_answered_as_an_unknown_id_and_left_untouched(broker):
    private = _id(broker.add(Add("beta", "beta's private note about the rollout")))
    with pytest.raises(NoSuchMemoryError) as theirs:
        broker.add(Add("main", "my own take on the rollout", supersedes=private))
    with pytest.raises(NoSuchMemoryError) as unknown:
        broker.add(Add("main", "my own take on the rollout", supersedes=UNKNOWN))
    assert str(theirs.value).replace(private, "ID") == str(unknown.value).replace(UNKNOWN, "ID")
    assert broker.get("beta", private)["state"] == "valid"
    assert [r["memory"] for r in broker.get_all(List("main"))["results"]] == [], "nothing was written either"
    assert {"event": "supersede_denied", "agent": "main", "memory_id": private}.items() <= _audit(broker)[-1].items()


def test_a_readable_memory_of_another_agent_is_refused_as_an_unknown_id_also_to_the_administrator_as_that_agent(broker):
    """The administrator's token acting as main is main (issue 44): to replace beta's memory, it acts as beta."""
    public = _id(broker.add(Add("beta", "the release train leaves on Thursdays", visibility="public")))
    with pytest.raises(NoSuchMemoryError) as theirs:
        broker.add(Add("main", "the release train leaves on Fridays", visibility="public", supersedes=public))
    with pytest.raises(NoSuchMemoryError) as unknown:
        broker.add(Add("main", "the release train leaves on Fridays", visibility="public", supersedes=UNKNOWN))
    assert str(theirs.value).replace(public, "ID") == str(unknown.value).replace(UNKNOWN, "ID")
    with pytest.raises(NoSuchMemoryError):
        broker.add(
            Add("main", "the release train leaves on Fridays", visibility="public", supersedes=public), admin=True
        )
    assert broker.get("main", public)["state"] == "valid"
    by_admin = broker.add(
        Add("beta", "the release train leaves on Fridays", visibility="public", supersedes=public), admin=True
    )
    assert broker.get("main", public)["superseded_by"] == _id(by_admin)
    assert by_admin["provenance"] == "operator", "written by the operator, as beta"


def test_a_memory_is_superseded_once(broker):
    first = _id(broker.add(Add("main", "the on-call phone is with Ana")))
    second = _id(broker.add(Add("main", "the on-call phone is with Bo", supersedes=first)))
    with pytest.raises(PolicyError, match=f"already superseded .* by {second}"):
        broker.add(Add("main", "the on-call phone is with Cy", supersedes=first))


def test_a_supersede_retried_after_its_answer_was_lost_is_answered_as_made(broker):
    """Found by bench/bench_sigkill.py: the daemon made the pair, was killed before answering, and the
    client's retry with the same write_id was refused as "already superseded" (by this very write)."""
    first = _id(broker.add(Add("main", "the build server is ci-1")))
    made = broker.add(Add("main", "the build server is ci-2", supersedes=first, write_id="move-ci"))
    again = broker.add(Add("main", "the build server is ci-2", supersedes=first, write_id="move-ci"))
    assert [r["id"] for r in again["results"]] == [_id(made)] and again["results"][0]["event"] == "EXISTS"
    assert again["superseded"] is True and broker.get("main", first)["superseded_by"] == _id(made)
    assert [e["event"] for e in _audit(broker)].count("memory_superseded") == 1, "the pair was made once"
    with pytest.raises(PolicyError, match=f"already superseded .* by {_id(made)}"):
        broker.add(Add("main", "the build server is ci-3", supersedes=first, write_id="another"))


def test_a_link_to_a_memory_the_reader_may_not_see_is_not_shown(broker):
    """main replaces its public memory with a private one: beta sees the old one superseded, never by what."""
    public = _id(broker.add(Add("main", "the office wifi password is on the fridge", visibility="public")))
    private = _id(broker.add(Add("main", "the office wifi password moved to the vault", supersedes=public)))
    assert broker.get("main", public)["superseded_by"] == private
    seen = broker.get("beta", public)
    assert seen["state"] == "superseded" and seen["superseded_by"] is None
    [shown] = broker.search(MemorySearch("beta", "office wifi", show_superseded=True))["results"]
    assert shown["id"] == public and shown["superseded_by"] is None
    assert [step["id"] for step in broker.history("beta", public)["chain"]] == [public]


def test_a_superseding_write_is_never_queued(service_root, embedder):
    enable(service_root, embedder, **unreachable())
    with l4_service(service_root, start=False) as down:
        broker = down.daemon.broker
        with pytest.raises(ConversationUnavailableError, match="nothing was queued"):
            broker.add(Add("main", "the new fact", supersedes=UNKNOWN))
        assert broker.queue.depth() == 0


# ---------------------------------------------------------------- decay by use


def _stored(broker, memory_id: str) -> dict:
    """The memory as the store holds it, read without counting as a use."""
    return broker.thread.call("get", lambda: broker.store.get(memory_id))


def test_returned_memories_are_counted_in_memory_and_written_in_batches(broker):
    memory_id = _id(broker.add(Add("main", "the backup job runs at four")))
    for _ in range(3):
        assert [r["id"] for r in broker.search(MemorySearch("main", "backup job"))["results"]] == [memory_id]
    broker.get("main", memory_id)
    assert _stored(broker, memory_id)["access_count"] == 0, "nothing is written on the request path"
    assert broker.status()["use"]["pending"] == 1
    broker.access.flush()
    stored = _stored(broker, memory_id)
    assert stored["access_count"] == 4 and stored["last_accessed"]
    assert broker.status()["use"]["written"] == 1 and broker.status()["use"]["pending"] == 0
    broker.get("main", memory_id, admin=True)  # the administrator looking is not a use
    broker.get_all(List("main"))  # nor is a listing
    assert broker.status()["use"]["pending"] == 0


def test_hits_not_yet_written_are_written_at_a_clean_stop(service_root, embedder):
    enable(service_root, embedder)
    with l4_service(service_root) as up:
        broker = up.daemon.broker
        memory_id = _id(broker.add(Add("main", "the wiki moved to wiki.internal")))
        broker.search(MemorySearch("main", "wiki"))
        broker.search(MemorySearch("main", "wiki"))
        assert _stored(broker, memory_id)["access_count"] == 0
    with l4_service(service_root) as again:
        assert _stored(again.daemon.broker, memory_id)["access_count"] == 2


def test_an_archived_memory_is_restored_by_its_owner_only(broker):
    faded = _id(broker.add(Add("main", "last year's on-call rota", memory_type="task_log")))
    theirs = _id(broker.add(Add("beta", "beta's private rota", memory_type="task_log")))
    broker.thread.call("archive", lambda: broker.store.archive([faded, theirs], "2026-11-30T03:00:00+00:00"))
    assert broker.search(MemorySearch("main", "on-call rota"))["results"] == []
    assert [r["id"] for r in broker.get_all(List("main", show_archived=True))["results"]] == [faded]
    with pytest.raises(NoSuchMemoryError) as other:
        broker.restore_memory(RestoreMemory("main", theirs))
    with pytest.raises(NoSuchMemoryError) as unknown:
        broker.restore_memory(RestoreMemory("main", UNKNOWN))
    assert str(other.value).replace(theirs, "ID") == str(unknown.value).replace(UNKNOWN, "ID")
    restored = broker.restore_memory(RestoreMemory("main", faded))
    assert restored["restored"] is True and restored["previous_state"] == "archived"
    assert restored["state"] == "valid" and restored["restored_at"] and restored["importance"] > 0.99
    assert [r["id"] for r in broker.search(MemorySearch("main", "on-call rota"))["results"]] == [faded]
    assert broker.restore_memory(RestoreMemory("main", faded))["restored"] is False
    assert _stored(broker, theirs)["state"] == "archived"
    assert {"event": "memory_restored", "memory_id": faded, "previous_state": "archived"}.items() <= (
        _audit(broker)[-1].items()
    )


def test_an_owner_may_undo_a_supersede(broker):
    old = _id(broker.add(Add("main", "lunch is at noon")))
    new = _id(broker.add(Add("main", "lunch moved to one", supersedes=old)))
    assert broker.restore_memory(RestoreMemory("main", old))["previous_state"] == "superseded"
    both = {r["id"] for r in broker.search(MemorySearch("main", "lunch"))["results"]}
    assert both == {old, new}
    assert broker.get("main", old)["superseded_by"] is None


# ---------------------------------------------------------------- trust


def test_trust_and_source_follow_who_writes(broker):
    by_agent = broker.add(Add("main", "the printer on floor 2 is broken"))
    assert (by_agent["trust"], by_agent["provenance"]) == ("medium", "agent_output")
    by_operator = broker.add(Add("main", "the printer on floor 2 was replaced"), admin=True)
    assert (by_operator["trust"], by_operator["provenance"]) == ("high", "operator")
    hedged = broker.add(Add("main", "the printer on floor 3 may be broken too", trust="low", source="user_direct"))
    assert (hedged["trust"], hedged["provenance"]) == ("low", "user_direct")
    stored = broker.get("main", _id(by_operator))
    assert (stored["trust"], stored["provenance"]) == ("high", "operator")
    with pytest.raises(ForbiddenError, match="at most medium"):
        broker.add(Add("main", "trust me, the printer works", trust="high"))
    assert {"event": "write_denied", "agent": "main", "trust": "high"}.items() <= _audit(broker)[-1].items()
    found = broker.search(MemorySearch("main", "printer", trust_min="high"))["results"]
    assert [r["id"] for r in found] == [_id(by_operator)]
    assert len(broker.search(MemorySearch("main", "printer", trust_min="medium"))["results"]) == 2
    assert len(broker.search(MemorySearch("main", "printer"))["results"]) == 3


def test_since_and_until_keep_the_memories_made_in_those_local_days(broker):
    today = datetime.date.today()
    made = _id(broker.add(Add("main", "the boiler was serviced")))
    kept = broker.add(Add("main", "the boiler needs a new valve", metadata={"room": "cellar"}))

    def found(**days) -> set[str]:
        return {r["id"] for r in broker.search(MemorySearch("main", "boiler", **days))["results"]}

    if datetime.date.today() != today:
        pytest.skip("local midnight passed during the test")  # the days below are the test's today
    day = today.isoformat()
    assert found(since=day) == found(until=day) == found(since=day, until=day) == {made, _id(kept)}
    assert found(since=(today + datetime.timedelta(days=1)).isoformat()) == set()
    assert found(until=(today - datetime.timedelta(days=1)).isoformat()) == set()
    with_filter = broker.search(MemorySearch("main", "boiler", since=day, filters={"room": "cellar"}))["results"]
    assert [r["id"] for r in with_filter] == [_id(kept)], "the caller's filter still narrows"
    for wrong in ("2026-02-30", "9999-12-31"):  # no such day; no day after it
        with pytest.raises(PolicyError, match="must be a calendar day"):
            broker.search(MemorySearch("main", "boiler", since=wrong, until=wrong))
