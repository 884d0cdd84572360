"""Every id an L4 write names is looked up in the caller's own scope (issue 44, item 3).

Over the real API: Starlette's TestClient over ``build_app`` on a daemon whose L4 is the embedded
store (Qdrant Edge files), composed as the daemon composes it (tests/daemon/conversation_service.py).
Before the fix a ``write_id`` was global: a write reusing another agent's was answered ``EXISTS``
with that agent's memory id (a private one too) and the caller's text was not stored; with
``supersedes`` the caller's own memory was superseded by the other agent's memory and left the
caller's search; and reusing one's own write_id with ``supersedes`` made a cycle (A superseded by
B and B by A) with no valid memory left.  Now a write_id is the owner's, a supersede target that is
not the caller's own is answered as a missing one, and a supersede never leaves a chain without a
valid memory.  The named cases come first, then hypothesis generates other agents' memories (private,
in a project the caller is not in, public) and the ids naming them.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.api.requests import WriteId
from protocol.operations import Add, List, RestoreMemory
from tests.daemon.conversation.l4_api import MEMORIES, Api, l4_api
from tests.daemon.conversation_service import enable, l4_service, unreachable
from tests.helpers import wait_for
from tests.stand_in_embedder import StandInEmbedder

WRITE_ID_PATTERN = WriteId.__metadata__[0].pattern  # the API's own rule for a write_id


@pytest.fixture(scope="module")
def api(_service_template, tmp_path_factory) -> Iterator[Api]:
    with l4_api(_service_template, tmp_path_factory.mktemp("l4-ids") / "root") as api:
        yield api


_numbers = itertools.count()


def _fresh(prefix: str) -> str:
    """A write_id nobody used yet in this module's store."""
    return f"{prefix}-{next(_numbers)}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------- the reported cases


def test_a_write_id_another_agent_used_stores_the_callers_own_text(api):
    """A framework deriving write ids from conversation and message numbers collides across agents."""
    write_id = _fresh("conv-7:msg-3")
    theirs = api.added("beta", "beta", "beta's private plan for the migration", write_id=write_id)
    answer = api.add("main", "main", "main's note on the generator service", write_id=write_id)
    assert answer.status_code == 200, answer.text
    [result] = answer.json()["results"]
    assert result["event"] == "ADD" and result["id"] != theirs, "the caller's text is stored, not answered EXISTS"
    mine = api.call("main", "GET", f"{MEMORIES}/{result['id']}", params={"agent": "main"}).json()
    assert (mine["memory"], mine["agent_id"], mine["write_id"]) == (
        "main's note on the generator service",
        "main",
        write_id,
    )
    assert api.stored(theirs)["memory"] == "beta's private plan for the migration"

    again = api.add("main", "main", "main's note on the generator service", write_id=write_id)
    assert again.json()["results"] == [{"id": result["id"], "event": "EXISTS"}], "a retry still finds its own write"
    retried = api.add("beta", "beta", "beta's private plan for the migration", write_id=write_id)
    assert retried.json()["results"] == [{"id": theirs, "event": "EXISTS"}]


def test_a_supersede_with_another_agents_write_id_replaces_the_callers_memory_by_its_own(api):
    old = api.added("main", "main", "the build server is ci-1.internal")
    write_id = _fresh("conv-9:msg-1")
    theirs = api.added("beta", "beta", "beta's build notes", write_id=write_id, visibility="public")
    answer = api.add("main", "main", "the build server is ci-2.internal", write_id=write_id, supersedes=old)
    assert answer.status_code == 200, answer.text
    [result] = answer.json()["results"]
    assert result["event"] == "ADD" and result["id"] != theirs and answer.json()["superseded"] is True
    assert api.stored(old)["superseded_by"] == result["id"]
    assert result["id"] in api.search("main", "build server ci-2"), "the replacement is in the caller's search"
    assert api.stored(theirs)["state"] == "valid" and api.stored(theirs)["superseded_by"] is None


def test_reusing_ones_own_write_id_never_makes_a_supersede_cycle(api):
    first_write = _fresh("w1")
    first = api.added("main", "main", "the backup window is 01:00", write_id=first_write)
    second = api.added("main", "main", "the backup window is 02:00", write_id=_fresh("w2"), supersedes=first)
    cycle = api.add("main", "main", "the backup window is 01:00", write_id=first_write, supersedes=second)
    assert cycle.status_code == 409, cycle.text
    assert first in cycle.json()["error"] and "new write_id" in cycle.json()["error"]
    assert (api.stored(first)["state"], api.stored(first)["superseded_by"]) == ("superseded", second)
    assert (api.stored(second)["state"], api.stored(second)["superseded_by"]) == ("valid", None)
    assert second in api.search("main", "backup window"), "the chain still ends in a valid memory"

    itself = api.add("main", "main", "the backup window is 03:00", write_id=_fresh("w3"))
    [own] = itself.json()["results"]
    same = api.add(
        "main", "main", "the backup window is 03:00", write_id=itself.json()["write_id"], supersedes=own["id"]
    )
    assert same.status_code == 409 and "itself" in same.json()["error"]
    assert api.stored(own["id"])["state"] == "valid"


def test_a_readable_memory_of_another_agent_is_refused_as_a_supersede_target_like_a_missing_one(api):
    public = api.added("beta", "beta", "the release train leaves on Thursdays", visibility="public")
    unknown = str(uuid.uuid4())
    answers = {
        target: api.add("main", "main", "the release train leaves on Fridays", visibility="public", supersedes=target)
        for target in (public, unknown)
    }
    assert [a.status_code for a in answers.values()] == [404, 404]
    assert answers[public].json() == json.loads(answers[unknown].text.replace(unknown, public))
    assert api.stored(public)["state"] == "valid"


def test_the_administrator_writing_as_an_agent_uses_that_agents_write_ids(api):
    write_id = _fresh("admin")
    theirs = api.added("beta", "beta", "beta's note on the DNS change", write_id=write_id)
    as_main = api.add("admin", "main", "main's note on the DNS change", write_id=write_id)
    [result] = as_main.json()["results"]
    assert result["event"] == "ADD" and result["id"] != theirs
    assert api.stored(result["id"])["agent_id"] == "main"
    own = api.add("main", "main", "main's note on the DNS change", write_id=write_id)
    assert own.json()["results"] == [{"id": result["id"], "event": "EXISTS"}], "main's write_id, main's memory"


# ---------------------------------------------------------------- generated: other agents' ids


def _kinds() -> dict[str, dict]:
    """beta's memories main may not change: private, in a project main is not in, public."""
    return {"private": {}, "project": {"visibility": "project", "project": "ops"}, "public": {"visibility": "public"}}


def _essence(memory: dict) -> dict:
    keys = ("memory", "agent_id", "visibility", "state", "superseded_by", "invalid_at", "updated_at", "metadata")
    return {k: memory.get(k) for k in keys}


def _shape(response, *ids: str) -> tuple[int, str]:
    """A response with the ids it names replaced: what must be the same for "theirs" and "none"."""
    text = response.text
    for i in ids:
        text = text.replace(i, "ID")
    return response.status_code, text


def _answer_without_ids(response) -> dict:
    """A write's answer with what differs between any two writes (its ids, write_id and text) left out."""
    body = response.json()
    body.pop("write_id", None)
    body["results"] = [{k: v for k, v in r.items() if k not in ("id", "memory")} for r in body.get("results", [])]
    return body


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(sorted(_kinds())),
    write_id=st.from_regex(WRITE_ID_PATTERN, fullmatch=True).filter(lambda w: len(w) <= 100),
    text=st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1, max_size=40).filter(
        lambda t: t.strip()
    ),
)
def test_another_agents_write_id_is_for_the_caller_a_write_id_never_used(api, kind, write_id, text):
    write_id = f"{write_id}-{next(_numbers)}"  # each example's own: a repeat must not find an earlier example's
    theirs = api.added("beta", "beta", f"beta's memory {write_id}", write_id=write_id, **_kinds()[kind])
    before = _essence(api.stored(theirs))
    reused = api.add("main", "main", f"main {next(_numbers)}: {text}", write_id=write_id)
    never = api.add("main", "main", f"main {next(_numbers)}: {text}", write_id=_fresh("never"))
    assert reused.status_code == never.status_code == 200, (reused.text, never.text)
    assert _answer_without_ids(reused) == _answer_without_ids(never)
    [mine] = reused.json()["results"]
    assert mine["event"] == "ADD" and mine["id"] != theirs
    assert api.stored(mine["id"])["agent_id"] == "main"
    assert _essence(api.stored(theirs)) == before, "the other agent's memory is unchanged"


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(sorted(_kinds())),
    how=st.sampled_from(["supersede", "get", "history", "update", "delete", "restore"]),
)
def test_another_agents_memory_id_is_answered_as_none_and_left_unchanged(api, kind, how):
    """A public memory main may read: get and history answer it, and update, delete and restore keep their
    403 (nothing is revealed: main can read it); every other case is exactly the answer for an unknown id."""
    theirs = api.added("beta", "beta", f"beta's {kind} memory {next(_numbers)}", **_kinds()[kind])
    before = _essence(api.stored(theirs))
    unknown = str(uuid.uuid4())

    def ask(memory_id: str):
        path, agent = f"{MEMORIES}/{memory_id}", {"agent": "main"}
        if how == "supersede":
            return api.add("main", "main", "main's replacement", supersedes=memory_id)
        if how == "get":
            return api.call("main", "GET", path, params=agent)
        if how == "history":
            return api.call("main", "GET", f"{path}/history", params=agent)
        if how == "update":
            return api.call("main", "PUT", path, json={**agent, "text": "main's rewrite"})
        if how == "delete":
            return api.call("main", "DELETE", path, params=agent)
        return api.call("main", "POST", f"{path}/restore", json=agent)

    answer = ask(theirs)
    if kind == "public" and how in ("get", "history"):
        assert answer.status_code == 200
    elif kind == "public" and how != "supersede":
        assert answer.status_code == 403 and "only its owner" in answer.text
    else:
        assert _shape(answer, theirs) == _shape(ask(unknown), unknown)
        assert answer.status_code == 404
    assert _essence(api.stored(theirs)) == before, "the other agent's memory is unchanged"


# ---------------------------------------------------------------- the queue: a write_id is its owner's there too


def test_two_agents_queue_the_same_write_id_and_each_is_replayed_as_its_own(service_root):
    embedder = StandInEmbedder()
    try:
        enable(service_root, embedder, **unreachable())
        with l4_service(service_root, start=False) as down:
            broker = down.daemon.broker
            theirs = broker.add(Add("beta", "beta's queued note", write_id="conv-1:msg-1"))
            mine = broker.add(Add("main", "main's queued note", write_id="conv-1:msg-1"))
            assert theirs["queued"] is True and mine["queued"] is True
            assert "already queued" not in mine["reason"] and mine["ahead"] == 1, "no oracle, nothing dropped"
            assert broker.queue.depth() == 2
            retried = broker.add(Add("main", "main's queued note", write_id="conv-1:msg-1"))
            assert "already queued" in retried["reason"] and broker.queue.depth() == 2

        enable(service_root, embedder, probe_interval_s=0.2)
        with l4_service(service_root) as up:
            broker = up.daemon.broker
            wait_for(lambda: broker.queue.depth() == 0, timeout=60, what="the queue replayed")
            assert broker.status()["queue"]["replayed"] == 2
            for agent in ("main", "beta"):
                [memory] = [m for m in broker.get_all(List(agent))["results"] if m["write_id"] == "conv-1:msg-1"]
                assert (memory["agent_id"], memory["memory"]) == (agent, f"{agent}'s queued note")
    finally:
        embedder.close()


# ---------------------------------------------------------------- generated: supersede chains


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "supersede", "restore"]),
        st.integers(0, 3),  # the text: a few, so that restatements (dedup) happen
        st.integers(0, 2),  # the write_id: a few, so that reuses happen
        st.integers(0, 3),  # which earlier memory the op names
    ),
    min_size=2,
    max_size=8,
)


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS)
def test_generated_writes_and_supersedes_never_leave_a_chain_without_a_valid_memory(api, ops):
    """Whatever mix of writes, reused write ids, restatements, supersedes and restores an agent sends, every
    memory's ``superseded_by`` chain ends, without a cycle, in a valid memory."""
    from daemon.common.domain_errors import ConflictError, NoSuchMemoryError
    from layers.conversation.policy.rules import PolicyError

    broker = api.service.daemon.broker
    run = next(_numbers)
    made: list[str] = []
    for op, text, write, target in ops:
        fields = {"write_id": f"chain-{run}-{write}"}
        try:
            if op == "restore" and made:
                broker.restore_memory(RestoreMemory("main", made[target % len(made)]))
                continue
            if op == "supersede" and made:
                fields["supersedes"] = made[target % len(made)]
            answer = broker.add(Add("main", f"chain {run}: fact number {text}", **fields))
        except (ConflictError, PolicyError, NoSuchMemoryError):
            continue  # refused: nothing changed
        made += [r["id"] for r in answer["results"] if r["id"] not in made]
    stored = {i: api.stored(i) for i in made}
    for start in made:
        seen, at = {start}, stored[start]
        while at["superseded_by"]:
            assert at["state"] == "superseded"
            nxt = at["superseded_by"]
            assert nxt not in seen, f"a cycle through {nxt}"
            seen.add(nxt)
            at = stored.get(nxt) or api.stored(nxt)
        assert at["state"] != "superseded", "the chain ends in a valid memory"
