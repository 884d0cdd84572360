"""A memory's lifecycle through the broker (validity, superseding), in-process on a real root.

The broker over the embedded store (Qdrant Edge files in the state directory), composed as the
daemon composes it (tests/daemon/conversation_service.py); the embedder is the stand-in HTTP
endpoint.  What is checked is what the rules promise: an agent supersedes only what it may
change, another agent's private memory is never touched nor admitted to exist (the same answer
as an unknown id), a superseded memory leaves searches and listings but keeps its history, and
a superseding write is never queued.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml

from daemon.shared.errors import ConversationUnavailableError, NoSuchMemoryError
from layers.conversation.policy import ForbiddenError, PolicyError
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
    old = _id(broker.add("main", "the staging database listens on 5432", visibility="public"))
    answer = broker.add("main", "the staging database moved to 6543", visibility="public", supersedes=old)
    new = _id(answer)
    assert answer["supersedes"] == old and answer["superseded"] is True
    found = broker.search("beta", "staging database port")["results"]
    assert [r["id"] for r in found] == [new]
    both = broker.search("beta", "staging database port", show_superseded=True)["results"]
    assert {r["id"] for r in both} == {old, new}
    assert [r["id"] for r in broker.get_all("beta")["results"]] == [new]
    assert {r["id"] for r in broker.get_all("beta", show_superseded=True)["results"]} == {old, new}
    gone = broker.get("beta", old)
    assert (gone["state"], gone["superseded_by"]) == ("superseded", new) and gone["invalid_at"]
    history = broker.history("beta", new)
    assert [step["id"] for step in history["chain"]] == [old, new]
    assert [step["state"] for step in history["chain"]] == ["superseded", "valid"]
    assert [e["event"] for e in broker.history("beta", old)["results"]] == ["ADD"]
    assert {"event": "memory_superseded", "memory_id": old, "superseded_by": new}.items() <= _audit(broker)[-1].items()


def test_another_agents_private_memory_is_answered_as_an_unknown_id_and_left_untouched(broker):
    private = _id(broker.add("beta", "beta's private note about the rollout"))
    with pytest.raises(NoSuchMemoryError) as theirs:
        broker.add("main", "my own take on the rollout", supersedes=private)
    with pytest.raises(NoSuchMemoryError) as unknown:
        broker.add("main", "my own take on the rollout", supersedes=UNKNOWN)
    assert str(theirs.value).replace(private, "ID") == str(unknown.value).replace(UNKNOWN, "ID")
    assert broker.get("beta", private)["state"] == "valid"
    assert [r["memory"] for r in broker.get_all("main")["results"]] == [], "nothing was written either"
    assert {"event": "supersede_denied", "agent": "main", "memory_id": private}.items() <= _audit(broker)[-1].items()


def test_a_readable_memory_of_another_agent_is_refused_and_an_administrator_may(broker):
    public = _id(broker.add("beta", "the release train leaves on Thursdays", visibility="public"))
    with pytest.raises(ForbiddenError, match="only its owner may supersede it"):
        broker.add("main", "the release train leaves on Fridays", visibility="public", supersedes=public)
    assert broker.get("main", public)["state"] == "valid"
    by_admin = broker.add(
        "main", "the release train leaves on Fridays", visibility="public", supersedes=public, admin=True
    )
    assert broker.get("main", public)["superseded_by"] == _id(by_admin)


def test_a_memory_is_superseded_once(broker):
    first = _id(broker.add("main", "the on-call phone is with Ana"))
    second = _id(broker.add("main", "the on-call phone is with Bo", supersedes=first))
    with pytest.raises(PolicyError, match=f"already superseded .* by {second}"):
        broker.add("main", "the on-call phone is with Cy", supersedes=first)


def test_a_link_to_a_memory_the_reader_may_not_see_is_not_shown(broker):
    """main replaces its public memory with a private one: beta sees the old one superseded, never by what."""
    public = _id(broker.add("main", "the office wifi password is on the fridge", visibility="public"))
    private = _id(broker.add("main", "the office wifi password moved to the vault", supersedes=public))
    assert broker.get("main", public)["superseded_by"] == private
    seen = broker.get("beta", public)
    assert seen["state"] == "superseded" and seen["superseded_by"] is None
    [shown] = broker.search("beta", "office wifi", show_superseded=True)["results"]
    assert shown["id"] == public and shown["superseded_by"] is None
    assert [step["id"] for step in broker.history("beta", public)["chain"]] == [public]


def test_a_superseding_write_is_never_queued(service_root, embedder):
    enable(service_root, embedder, **unreachable())
    with l4_service(service_root, start=False) as down:
        broker = down.daemon.broker
        with pytest.raises(ConversationUnavailableError, match="nothing was queued"):
            broker.add("main", "the new fact", supersedes=UNKNOWN)
        assert broker.queue.depth() == 0
