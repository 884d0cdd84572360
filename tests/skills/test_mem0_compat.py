"""An agent written against ``mem0.Memory`` runs on memstrata with only its import line changed.

AGENT_CODE follows mem0's documented quickstart (add a conversation, search,
get_all, get, update, history, delete, delete_all); it runs as a real
subprocess under a python with no site-packages, from inside agent a's
workspace, against the real daemon.  The seed's agent flow (visibility and
project in ``metadata``, results from the three phases) and the identity rules
are checked in-process against the same daemon.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.daemon.conversation.test_conversation import cluster  # noqa: F401  (agents a, b, c; a and c share infra)
from tests.skills.test_mem0_client import CLIENT, DISCOVERY_ENV, PYTHON, load_module

AGENT_CODE = """\
from mem0 import Memory
import json

m = Memory()
messages = [
    {"role": "user", "content": "I'm planning to watch a movie tonight. Any recommendations?"},
    {"role": "assistant", "content": "How about thriller movies? They can be quite engaging."},
    {"role": "user", "content": "I'm not a big fan of thriller movies but I love sci-fi movies."},
    {"role": "assistant", "content": "Got it! I'll avoid thriller recommendations and suggest sci-fi movies."},
]
added = m.add(messages, user_id="a", metadata={"visibility": "private"})
found = m.search("What kind of movies do I love?", filters={"user_id": "a"}, top_k=3)
everything = m.get_all(filters={"user_id": "a"})
memory_id = found["results"][0]["id"]
one = m.get(memory_id)
m.update(memory_id=memory_id, data="Loves sci-fi movies, dislikes thrillers")
updated = m.get(memory_id)
history = m.history(memory_id=memory_id)
m.delete(memory_id=memory_id)
gone = m.get(memory_id)
after_delete = m.history(memory_id=memory_id)
m.delete_all(user_id="a")
left = m.get_all(filters={"user_id": "a"})
print(json.dumps({
    "added": added, "found": found, "everything": everything, "one": one, "updated": updated,
    "history": history, "gone": gone, "after_delete": after_delete, "left": left,
}))
"""


def workspace(root: Path, agent: str) -> Path:
    return root / "workspace" / "agents" / f"{agent}-workspace"


def test_mem0_quickstart_runs_with_only_the_import_changed(cluster):  # noqa: F811
    code = AGENT_CODE.replace("from mem0 import Memory", "from mem0_client import Memory")
    changed = [(x, y) for x, y in zip(AGENT_CODE.splitlines(), code.splitlines(), strict=True) if x != y]
    assert changed == [("from mem0 import Memory", "from mem0_client import Memory")]
    env = {k: v for k, v in os.environ.items() if k not in DISCOVERY_ENV}
    env.update(MEMSTRATA_CONFIG=str(cluster.root / "memstrata.yaml"), PYTHONPATH=str(CLIENT.parent))
    done = subprocess.run(
        [PYTHON, "-S", "-c", code],
        cwd=workspace(cluster.root, "a"),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    added = out["added"]["results"]
    assert [r["event"] for r in added] == ["ADD"] * 4  # infer off (no LLM): each message its own memory
    assert [r["role"] for r in added] == ["user", "assistant", "user", "assistant"]
    assert all(r["metadata"]["visibility"] == "private" for r in added)
    found = out["found"]["results"]
    assert len(found) == 3 and "I'm not a big fan of thriller movies but I love sci-fi movies." in [
        r["memory"] for r in found
    ]
    top = found[0]
    assert {"id", "memory", "hash", "metadata", "score", "created_at", "updated_at", "agent_id"} <= set(top)
    assert top["agent_id"] == "a" and top["metadata"]["degraded"] is False and top["metadata"]["phase"] == "private"
    assert len(out["everything"]["results"]) == 4
    assert out["one"]["id"] == top["id"] and out["one"]["memory"] == top["memory"] and out["one"]["role"]
    assert out["updated"]["memory"] == "Loves sci-fi movies, dislikes thrillers"
    assert out["updated"]["created_at"] == out["one"]["created_at"]
    assert [e["event"] for e in out["history"]] == ["ADD", "UPDATE"]
    assert out["gone"] is None
    assert [e["event"] for e in out["after_delete"]] == ["ADD", "UPDATE", "DELETE"]
    assert out["left"]["results"] == []


def test_seed_agent_flow_visibility_project_and_identity(cluster):  # noqa: F811
    mem0_client = load_module()
    socket = str(cluster.daemon.socket)

    def memory(agent: str):
        return mem0_client.Memory.from_config(
            {"memstrata": {"workspace": str(workspace(cluster.root, agent)), "socket": socket}}
        )

    a, b, c = memory("a"), memory("b"), memory("c")
    a.add("a 的私密记忆：周五值班", agent_id="a", metadata={"visibility": "private"})
    shared = a.add(
        "Qdrant 集群迁移到新节点 10.0.0.7",
        agent_id="a",
        metadata={"visibility": "project", "project_id": "infra", "memory_type": "decision"},
    )["results"][0]
    assert (shared["metadata"]["project_id"], shared["metadata"]["memory_type"]) == ("infra", "decision")
    found = c.search("Qdrant 迁移", filters={"agent_id": "c"})["results"]
    assert [r["memory"] for r in found] == ["Qdrant 集群迁移到新节点 10.0.0.7"]  # a's private one never
    assert found[0]["metadata"]["phase"] == "project" and found[0]["agent_id"] == "a"
    assert c.search("Qdrant 迁移", filters={"memory_type": "session"})["results"] == []
    assert b.search("Qdrant 迁移 值班")["results"] == []  # b is in no shared project
    assert b.get(shared["id"]) is None
    for call in (
        lambda: c.add("冒充", agent_id="a"),
        lambda: c.search("x", filters={"agent_id": "a"}),
        lambda: c.get_all(agent_id="a"),
        lambda: c.delete_all(agent_id="a"),
    ):
        with pytest.raises(ValueError, match="names another agent"):
            call()
    with pytest.raises(ValueError, match=r"only its owner|belongs to"):
        try:
            c.update(shared["id"], text="c 改的")
        except mem0_client.RequestError as exc:
            raise ValueError(str(exc)) from None
    with pytest.raises(ValueError, match="reset"):
        c.reset()
    with pytest.raises(mem0_client.RequestError, match="reserved"):
        a.add("x", metadata={"write_id": "mine"})
    assert c.delete_all()["deleted"] == 0 and a.get(shared["id"])["memory"].startswith("Qdrant")
    assert len(a.get_all(filters={"visibility": "private"})["results"]) == 1


def test_end_users_are_data_filtered_inside_each_agents_visibility(cluster):  # noqa: F811
    """mem0's user_id / run_id / actor_id are whom a memory is about: kept, filtered, returned; never identity."""
    mem0_client = load_module()
    socket = str(cluster.daemon.socket)

    def memory(agent: str):
        return mem0_client.Memory.from_config(
            {"memstrata": {"workspace": str(workspace(cluster.root, agent)), "socket": socket}}
        )

    a, b, c = memory("a"), memory("b"), memory("c")
    a.add("Alice prefers window seats", user_id="alice", metadata={"category": "travel", "priority": 2})
    a.add([{"role": "user", "content": "Alice is allergic to peanuts", "name": "Alice"}], user_id="alice", run_id="s1")
    a.add("Bob prefers aisle seats", user_id="bob", metadata={"category": "travel", "priority": 5})
    b.add("Alice told b her passport number ends in 42", user_id="alice")  # b's private memory about alice
    c.add("Alice owns the infra budget", user_id="alice", metadata={"visibility": "project", "project_id": "infra"})

    found = a.search("What does Alice like?", filters={"user_id": "alice"})["results"]
    assert {r["memory"] for r in found} == {
        "Alice prefers window seats",
        "Alice is allergic to peanuts",
        "Alice owns the infra budget",  # c's project memory: a is in infra
    }
    peanuts = next(r for r in found if "peanuts" in r["memory"])
    assert (peanuts["user_id"], peanuts["run_id"], peanuts["actor_id"], peanuts["role"]) == (
        "alice",
        "s1",
        "Alice",
        "user",
    )
    seats = next(r for r in found if "window" in r["memory"])
    assert seats["metadata"]["category"] == "travel" and seats["metadata"]["priority"] == 2
    assert seats["agent_id"] == "a" and seats["metadata"]["visibility"] == "private"
    # b's private memory about the same user never reaches a, whatever the filter says
    for flt in ({"user_id": "alice"}, {"OR": [{"user_id": "alice"}, {"user_id": "*"}]}, {"AND": [{"agent_id": "b"}]}):
        texts = [r["memory"] for r in a.search("Alice passport number", filters=flt)["results"]]
        texts += [r["memory"] for r in a.get_all(filters=flt)["results"]]
        assert not any("passport" in t for t in texts), flt
    assert [r["memory"] for r in b.get_all(filters={"user_id": "alice"})["results"]] == [
        "Alice told b her passport number ends in 42"
    ]  # b is in no shared project: only its own
    travel = a.get_all(filters={"AND": [{"category": "travel"}, {"priority": {"gte": 3}}]})["results"]
    assert [r["memory"] for r in travel] == ["Bob prefers aisle seats"]
    assert a.get_all(user_id="alice", run_id="s1")["results"][0]["memory"] == "Alice is allergic to peanuts"
    assert a.delete_all(user_id="bob")["deleted"] == 1
    assert [r["memory"] for r in a.get_all(filters={"category": {"icontains": "TRAV"}})["results"]] == [
        "Alice prefers window seats"
    ]
    with pytest.raises(mem0_client.RequestError, match="unknown operator"):
        a.search("x", filters={"user_id": {"$eq": "alice"}})
