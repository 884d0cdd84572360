"""A spoke's get, list and history with the hub stopped (issue 48 item 4): get and list from its replica.

Real daemons on one machine, as tests/daemon/api/test_peer_api.py's Fleet (the hub with agents main and a,
``a`` and ``spoke-1/b`` in project infra; spoke-1 with main and b; spoke-2 with main).  The memories are
written and every replica has caught up with the hub up; then the hub is stopped for the whole module,
and each of spoke-1's agents reads through its daemon's socket, the CLI and mem0's ``MemoryClient`` on
spoke-1's REST port: what it may read answers as the hub answered it, plus ``degraded``, the reason and
``replica_age_s``; a memory of another agent (of this host or another) is never returned, by id or by a
filter naming its owner — generated cases included.  A history needs the hub: a clear 503.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.front.daemon_client import DaemonRequestError
from tests.daemon.api.test_peer_api import Fleet
from tests.daemon.api.test_peer_replica import caught_up
from tests.helpers import audit_events, run_cli, token_of

pytestmark = pytest.mark.slow

HOST = "spoke-1"
AGENTS = ("main", "b")
# fields that are the memory's own (access counts and importance move with every get on the hub)
STABLE = (
    *("id", "memory", "agent_id", "visibility", "project_id", "memory_type", "created_at", "updated_at"),
    *("user_id", "metadata", "state", "superseded_by", "trust", "provenance", "write_id"),
)
DEGRADED = {"degraded", "reason", "replica_age_s"}


class Away:
    """The fleet, its memories (name → id, who may read each on spoke-1) and the hub's answers, hub stopped."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.marker = uuid.uuid4().hex[:8]
        self.ids: dict[str, str] = {}
        self.readers: dict[str, set[str]] = {}  # name → spoke-1's agents that may read it
        self.hub_said: dict[tuple[str, str], dict] = {}  # (agent, name) → the hub's get, before it stopped
        self.hub_listed: dict[str, set[str]] = {}

    def add(self, name: str, host: str, agent: str, readers: set[str], **kw) -> None:
        with self.fleet.client(host, agent) as c:
            answer = c.add(agent, f"{self.marker} {name}: {host}/{agent}'s note", **kw)
        self.ids[name], self.readers[name] = answer["results"][0]["id"], readers

    def private_of_others(self, agent: str) -> list[str]:
        return [self.ids[n] for n, readers in self.readers.items() if agent not in readers]


@pytest.fixture(scope="module")
def away(tmp_path_factory):
    fleet = Fleet(tmp_path_factory.mktemp("reads"))
    for config in fleet.configs.values():  # a hub loading its models under load may take more than 10 s to answer
        data = yaml.safe_load(config.read_text())
        data["conversation"]["hub"]["timeout_s"] = 60
        config.write_text(yaml.safe_dump(data))
    try:
        fleet.start()
        a = Away(fleet)
        a.add("public", "hub", "main", {"main", "b"}, visibility="public")
        a.add("hub-infra", "hub", "a", {"b"}, visibility="project", project="infra")
        a.add("hub-private", "hub", "main", set(), visibility="private")
        a.add("main-private", HOST, "main", {"main"}, visibility="private", user_id="alice", metadata={"room": "4"})
        a.add("b-private", HOST, "b", {"b"}, visibility="private", user_id="alice", metadata={"room": "4"})
        a.add("b-infra", HOST, "b", {"b"}, visibility="project", project="infra")
        # a caller's own key "readers": kept in the replica as the hub keeps it (the replica's is hub_readers)
        a.add("b-tagged", HOST, "b", {"b"}, visibility="private", metadata={"readers": "ops"})
        a.add("spoke-2-private", "spoke-2", "main", set(), visibility="private")
        with fleet.client(HOST, "main") as c:  # an update: the history on the hub has two events
            c.update("main", a.ids["main-private"], f"{a.marker} main-private: {HOST}/main's note, updated")
        for agent in AGENTS:
            with fleet.client(HOST, agent) as c:
                listed = c.get_all(agent, limit=500)["results"]
                a.hub_listed[agent] = {m["id"] for m in listed}
                for name, readers in a.readers.items():
                    if agent in readers:
                        a.hub_said[agent, name] = c.get(agent, a.ids[name])
        caught_up(fleet, HOST)  # the gets above changed access counts: the replica has them too
        assert fleet.hub is not None and fleet.hub.stop() == 0
        yield a
    finally:
        fleet.stop()


def refused(call, *args, **kwargs) -> DaemonRequestError:
    with pytest.raises(DaemonRequestError) as info:
        call(*args, **kwargs)
    return info.value


def said(error: DaemonRequestError, memory_id: str) -> str:
    """A refusal's words with the id and the replica's age left out."""
    return re.sub(r"[0-9.]+ s old", "N s old", error.message.replace(memory_id, "ID"))


def test_get_answers_what_the_agent_may_read_as_the_hub_did_plus_degraded(away):
    for agent in AGENTS:
        with away.fleet.client(HOST, agent) as c:
            for name, readers in away.readers.items():
                memory_id = away.ids[name]
                if agent not in readers:
                    error = refused(c.get, agent, memory_id)
                    assert error.status == 404 and "replica" in error.message and away.marker not in error.message
                    continue
                got = c.get(agent, memory_id)
                hub = away.hub_said[agent, name]
                assert set(got) == set(hub) | DEGRADED, (agent, name)
                assert {k: got[k] for k in STABLE} == {k: hub[k] for k in STABLE}, (agent, name)
                assert (
                    got["degraded"] is True and "the hub is unreachable" in got["reason"] and "replica" in got["reason"]
                )
                assert isinstance(got["replica_age_s"], float)
                assert "hub_readers" not in got["metadata"]  # the hub's word for this host, never shown
            unknown, foreign = str(uuid.uuid4()), away.private_of_others(agent)[0]
            # another's memory is not even admitted to exist: the words of an unknown id
            assert said(refused(c.get, agent, unknown), unknown) == said(refused(c.get, agent, foreign), foreign)
    denied = [e for e in audit_events(away.fleet.roots[HOST]) if e.get("event") == "read_denied"]
    assert {(e["agent"], e["memory_id"]) for e in denied} >= {("main", away.ids["b-private"])}


def test_list_answers_what_the_agent_may_read_with_each_filter(away):
    for agent in AGENTS:
        mine = {away.ids[n] for n, readers in away.readers.items() if agent in readers}
        with away.fleet.client(HOST, agent) as c:
            page = c.get_all(agent, limit=500)
            assert page["degraded"] is True and isinstance(page["replica_age_s"], float) and page["next_cursor"] is None
            assert {m["id"] for m in page["results"]} == away.hub_listed[agent]
            assert set(away.ids.values()) & away.hub_listed[agent] == mine
            for filters, names in (
                ({"visibility": "public"}, {"public"}),
                ({"project_id": "infra"}, {"hub-infra", "b-infra"}),
                ({"agent_id": f"{HOST}/main"}, {"main-private"}),
                ({"agent_id": f"{HOST}/b"}, {"b-private", "b-infra", "b-tagged"}),
                ({"agent_id": "spoke-2/main"}, {"spoke-2-private"}),
                ({"user_id": "alice", "room": "4"}, {"main-private", "b-private"}),
                ({"readers": "ops"}, {"b-tagged"}),  # the caller's own metadata, as on the hub
            ):
                found = {m["id"] for m in c.get_all(agent, limit=500, filters=filters)["results"]}
                wanted = {away.ids[n] for n in names} & mine
                assert found & set(away.ids.values()) == wanted, (agent, filters)
                assert found <= away.hub_listed[agent], (agent, filters)
            error = refused(c.get_all, agent, limit=10, filters={"hub_readers": agent})
            assert error.status == 400 and "memstrata's own field" in error.message


def test_paging_through_the_replica_gives_every_memory_once(away):
    with away.fleet.client(HOST, "b") as c:
        seen: list[str] = []
        cursor = None
        while True:
            page = c.get_all("b", limit=2, **({"cursor": cursor} if cursor else {}))
            assert page["degraded"] is True
            seen += [m["id"] for m in page["results"]]
            cursor = page["next_cursor"]
            if not cursor:
                break
    assert len(seen) == len(set(seen)) and set(seen) == away.hub_listed["b"]


def test_history_needs_the_hub_and_says_so(away):
    with away.fleet.client(HOST, "main") as c:
        for memory_id in (away.ids["main-private"], away.ids["b-private"], str(uuid.uuid4())):
            error = refused(c.history, "main", memory_id)
            assert error.status == 503 and "the hub is unreachable" in error.message
            assert "history" in error.message and "replica" in error.message and away.marker not in error.message
    cli = run_cli(
        "history", "--memory", away.ids["main-private"], "--agent", "main", config=away.fleet.configs[HOST], check=False
    )
    assert cli.returncode != 0 and "history is the hub's record" in cli.stderr and away.marker not in cli.stdout


def test_the_cli_gets_and_lists_from_the_replica_saying_so(away):
    config = away.fleet.configs[HOST]
    got = run_cli("get", away.ids["b-infra"], "--agent", "b", config=config)
    assert "b-infra" in got.stdout and "degraded" in got.stderr and "s old" in got.stderr
    as_json = json.loads(run_cli("get", away.ids["public"], "--agent", "main", "--json", config=config).stdout)
    assert as_json["degraded"] is True and as_json["id"] == away.ids["public"]
    other = run_cli("get", away.ids["b-private"], "--agent", "main", config=config, check=False)
    assert other.returncode != 0 and "no memory" in other.stderr and away.marker not in other.stdout + other.stderr
    listed = run_cli("list", "--agent", "main", "--project", "infra", config=config)
    assert "no memories" in listed.stdout and "degraded" in listed.stderr
    public = json.loads(run_cli("list", "--agent", "b", "--visibility", "public", "--json", config=config).stdout)
    assert away.ids["public"] in {m["id"] for m in public["results"]} and public["degraded"] is True
    assert all(m["visibility"] == "public" for m in public["results"])


MEMORY_CLIENT = """
import json, sys
from mem0 import MemoryClient
client = MemoryClient(api_key=sys.argv[1], host=sys.argv[2])
out = {"get": client.get(sys.argv[3]), "all": client.get_all(filters={"user_id": "alice"})}
try:
    client.get(sys.argv[4])
    out["other"] = "answered"
except Exception as exc:
    out["other"] = f"{type(exc).__name__}: {exc}"
try:
    client.history(sys.argv[3])
    out["history"] = "answered"
except Exception as exc:
    out["history"] = f"{type(exc).__name__}: {exc}"
print("OUT " + json.dumps(out))
"""


def test_mem0s_memory_client_on_the_spoke_gets_and_lists_from_the_replica(away, tmp_path):
    token = token_of(away.fleet.roots[HOST], "main")
    env = {**os.environ, "MEM0_TELEMETRY": "False", "MEM0_DIR": str(tmp_path / "mem0-home"), "HOME": str(tmp_path)}
    args = [token, f"http://127.0.0.1:{away.fleet.mem0_port}", away.ids["main-private"], away.ids["b-private"]]
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_CLIENT, *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.split("OUT ", 1)[1])
    assert out["get"]["id"] == away.ids["main-private"] and out["get"]["degraded"] is True
    assert isinstance(out["get"]["replica_age_s"], float) and "replica" in out["get"]["reason"]
    assert out["all"]["degraded"] is True
    assert [m["id"] for m in out["all"]["results"]] == [away.ids["main-private"]]  # never b's, of the same user
    assert "answered" not in out["other"] and away.marker not in out["other"]
    assert "answered" not in out["history"] and "history" in out["history"]


# ---------------------------------------------------------------- generated hostile cases


def _others(agent: str) -> list[str]:
    """Owners ``agent`` of spoke-1 is not, as the hub names them."""
    return [f"{HOST}/{a}" for a in AGENTS if a != agent] + ["spoke-2/main", "main", "a"]


FILTERS = st.sampled_from(
    [
        lambda other: {"agent_id": other},
        lambda other: {"agent_id": other, "visibility": "private"},
        lambda other: {"OR": [{"agent_id": other}, {"visibility": "private"}]},
        lambda other: {"NOT": [{"visibility": "public"}]},
        lambda other: {"readers": other.rsplit("/", 1)[-1]},
        lambda other: {"hub_readers": other.rsplit("/", 1)[-1]},  # refused (400): memstrata's own field
        lambda other: {"agent_id": {"in": [other, "*"]}},
        lambda other: {"user_id": "alice"},
        lambda other: {"memory": {"contains": "private"}},
    ]
)


@settings(max_examples=12, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(agent=st.sampled_from(AGENTS), pick=st.integers(0, 100), make=FILTERS)
def test_generated_ids_and_filters_of_others_reach_nothing_of_theirs(away, agent, pick, make):
    others = _others(agent)
    other = others[pick % len(others)]
    foreign = away.private_of_others(agent)
    target = foreign[pick % len(foreign)]
    leaks = 0
    with away.fleet.client(HOST, agent) as c:
        leaks += 0 if refused(c.get, agent, target).status == 404 else 1
        try:
            page = c.get_all(agent, limit=500, filters=make(other))
        except DaemonRequestError as exc:  # a filter the daemon refuses (400) shows nothing
            assert exc.status == 400, exc
            page = {"results": []}
        for m in page["results"]:
            readable = (
                m["visibility"] == "public"
                or (m["visibility"] == "project" and m["project_id"] == "infra" and agent == "b")
                or (m["visibility"] == "private" and m["agent_id"] == f"{HOST}/{agent}")
            )
            leaks += 0 if readable and m["id"] not in foreign else 1
    assert leaks == 0, (agent, other, target)
