"""L4 through the hub on the three booted hosts (issue 48 item 1): every host's memstrata.service as installed,
the hub's peer API on its fleet address, each spoke enrolled with ``memstrata fleet add-host`` and using the
hub (``conversation.backend: hub``); tests/system/fleet_l4.py sets it up as the README's "Several hosts" says.

What a spoke's agents may read on the hub; the link cut and restored (adds queued, every one on the hub exactly
once); the hub's power cut during a spoke's write stream (every acknowledged add on the hub exactly once); a
spoke's key stolen (it acts only as that spoke's agents; removed, it is refused at once); each spoke's offline
replica (what the hub gives its agents; searched with the link cut; caught up after it).  The tests run in
file order on one fleet; the stolen key's test is last (it re-keys spoke-1, then removes it).  Every wait polls with a
generous deadline.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest

from tests.system import fleet_l4 as l4
from tests.system import operator
from tests.system.fleet import HUB
from tests.system.operator import poll

pytestmark = pytest.mark.slow
DRAIN_S = 300  # a queue sent to the hub: generous, the machine is shared


@pytest.fixture(scope="module")
def hub_l4(fleet):
    l4.setup(fleet)
    for role in ("spoke-1", "spoke-2"):
        poll(lambda role=role: l4.conversation(fleet, role)["reachable"], 120, f"{role} reaching the hub")
    return fleet


def test_private_public_and_project_memories_reach_exactly_the_agents_that_may_read_them(hub_l4):
    f = hub_l4
    m = f"v{uuid.uuid4().hex[:8]}"
    private = l4.added(
        f, "spoke-1", "main", f"{m} spoke-1 main private: the boathouse key is in the tin", visibility="private"
    )
    public = l4.added(
        f, "spoke-2", "main", f"{m} spoke-2 main public: the boathouse opens at dawn", visibility="public"
    )
    project = l4.added(
        f,
        "spoke-1",
        "ops",
        f"{m} infra: the boathouse pump runs on the red circuit",
        visibility="project",
        project=l4.PROJECT,
    )
    memories = {private, public, project}
    readers = {  # (host, agent): what it may read of the three
        ("spoke-1", "main"): {private, public},
        ("spoke-1", "ops"): {public, project},  # spoke-1/ops is a member of infra on the hub
        ("spoke-2", "main"): {public},  # the same name as spoke-1's main: another agent
        ("spoke-2", "ops"): {public},
        (HUB, "main"): {public},
        (HUB, "agent-a"): {public, project},
    }
    query = f"{m} boathouse key opens pump"
    for role in ("spoke-1", "spoke-2", HUB):  # one driver run per host: every agent's search and gets
        agents = [(agent, allowed) for (r, agent), allowed in readers.items() if r == role]
        calls = [
            {"agent": agent, "op": op, "args": args, "kwargs": kwargs}
            for agent, _ in agents
            for op, args, kwargs in [("memory_search", [query], {"limit": 50})]
            + [("get", [memory_id], {}) for memory_id in sorted(memories)]
        ]
        answers = iter(l4.ops(f, role, calls))
        for agent, allowed in agents:
            found = next(answers)
            assert found["status"] == 200 and found["answer"]["degraded"] is False, found
            seen = {r["id"] for r in found["answer"]["results"]} & memories
            assert seen == allowed, (role, agent, seen)
            for memory_id in sorted(memories):
                got = next(answers)
                if memory_id in allowed:
                    owner = {private: "spoke-1/main", public: "spoke-2/main", project: "spoke-1/ops"}[memory_id]
                    assert got["status"] == 200 and got["answer"]["agent_id"] == owner, got  # the hub's names
                else:
                    assert got["status"] == 404, (role, agent, got)
    mine = l4.listed(f, "spoke-2", "main", m)
    assert [x["id"] for x in mine] == [public]


def test_a_cut_link_queues_adds_degrades_searches_and_every_add_reaches_the_hub_once(hub_l4):
    f = hub_l4
    m = f"c{uuid.uuid4().hex[:8]}"
    texts = [f"{m} spoke-1 main while cut {i}: the north gate is chained" for i in range(8)]
    f.cut("spoke-1")
    try:
        calls = [{"agent": "main", "op": "add", "args": [t], "kwargs": {"visibility": "private"}} for t in texts]
        calls.append({"agent": "main", "op": "memory_search", "args": ["north gate chained"], "kwargs": {}})
        answers = l4.ops(f, "spoke-1", calls)
        adds, search = answers[:-1], answers[-1]
        assert all(a["status"] == 200 and a["answer"]["queued"] is True for a in adds), adds
        assert search["status"] == 200 and search["answer"]["degraded"] is True, search
        assert "hub" in search["answer"]["reason"]
        section = l4.conversation(f, "spoke-1")
        assert section["reachable"] is False and section["queue"]["depth"] >= len(texts), section
        other = l4.call(f, "spoke-2", "main", "memory_search", "north gate chained")  # spoke-2's link is up
        assert other["status"] == 200 and other["answer"]["degraded"] is False
    finally:
        f.restore("spoke-1")
    poll(lambda: l4.depth(f, "spoke-1") == 0, DRAIN_S, "spoke-1's queue sent to the hub")
    on_hub = Counter(x["memory"] for x in l4.listed(f, "spoke-1", "main", m))
    assert on_hub == Counter(texts), on_hub  # each exactly once
    assert all(x["agent_id"] == "spoke-1/main" for x in l4.listed(f, "spoke-1", "main", m))


def test_the_hub_killed_during_a_write_stream_keeps_every_acknowledged_add_exactly_once(hub_l4):
    """spoke-1's main and spoke-2's ops write one add after another; the hub loses power mid-stream and boots
    again (its memstrata.service is enabled).  Every add answered with an id or ``queued`` is on the hub once."""
    f = hub_l4
    m = f"k{uuid.uuid4().hex[:8]}"
    writers = (("spoke-1", "main"), ("spoke-2", "ops"))
    outs = {w: f"/root/stream-{m}-{w[1]}.jsonl" for w in writers}
    stop = f"/root/stop-{m}"
    results: dict = {}

    def write(role: str, agent: str) -> None:
        results[(role, agent)] = l4.stream(f, role, agent, m, 400, outs[(role, agent)], interval=0.5, stop_file=stop)

    threads = [threading.Thread(target=write, args=w) for w in writers]
    for t in threads:
        t.start()
    try:
        poll(lambda: all(len(l4.answers(f, r, outs[(r, a)])) >= 5 for r, a in writers), 120, "both streams under way")
        f.kill(HUB)
        poll(
            lambda: any(x["outcome"] == "queued" for r, a in writers for x in l4.answers(f, r, outs[(r, a)])),
            120,
            "an add queued on a spoke while the hub is down",
        )
        f.boot(HUB)
        poll(
            lambda: f.run(HUB, "systemctl", "is-active", "memstrata.service", check=False).stdout.strip() == "active",
            240,
            "the hub's daemon back after the boot",
        )
        time.sleep(3)  # a few adds answered by the hub again
    finally:
        for role, _ in writers:
            f.run(role, "touch", stop)
        for t in threads:
            t.join(600)
    for role, _ in writers:
        poll(lambda role=role: l4.settled(f, role), DRAIN_S, f"{role}'s queue sent to the hub")
    poll(lambda: l4.settled(f, HUB), DRAIN_S, "the hub's store open again, its own queue written")
    for role, agent in writers:
        told = results[(role, agent)]
        acknowledged = [x["text"] for x in told if x["outcome"] in ("written", "queued")]
        assert any(x["outcome"] == "queued" for x in told), (role, Counter(x["outcome"] for x in told))
        on_hub = Counter(x["memory"] for x in l4.listed(f, role, agent, m))
        missing = [t for t in acknowledged if on_hub[t] == 0]
        twice = {t: n for t, n in on_hub.items() if n > 1}
        errors = [x for x in told if x["outcome"] == "error"]
        assert not missing and not twice, (role, agent, missing[:5], twice, errors[:3])
        assert set(on_hub) <= {x["text"] for x in told}  # nothing the driver did not send
        assert len(acknowledged) >= 5


def _replica_holds_what_the_hub_gives(f, role: str, marker: str) -> dict | None:
    """``role``'s replica's memories holding ``marker`` when they equal the hub's for that host (ids, payloads,
    readers), else None (asked again)."""
    hub, here = l4.hub_set(f, role, marker), l4.replica_set(f, role, marker)
    return hub["memories"] if hub["memories"] and here["memories"] == hub["memories"] else None


def test_every_spokes_replica_converges_to_the_hubs_visible_set_after_the_link_returns(hub_l4):
    """The offline replica (issue 48 item 3): written by the hub and both spokes (public, a project, private),
    each spoke's replica holds exactly what the hub gives its agents (ids, payloads, readers); with the link
    cut a search answers from it (degraded, with its age) each agent's own set and nothing else; written on
    the hub while the spokes were cut, the new memories are on both replicas within 10 s of the link's return."""
    f = hub_l4
    m = f"r{uuid.uuid4().hex[:8]}"
    writes = [
        (HUB, "main", "public", None),
        (HUB, "agent-a", "project", l4.PROJECT),
        ("spoke-1", "main", "private", None),
        ("spoke-1", "ops", "project", l4.PROJECT),
        ("spoke-2", "main", "public", None),
        ("spoke-2", "ops", "private", None),
    ]
    for role, agent, visibility, project in writes:
        extra = {"project": project} if project else {}
        text = f"{m} {role} {agent} {visibility}: the lighthouse lamp"
        l4.added(f, role, agent, text, visibility=visibility, **extra)
    given = {
        role: poll(lambda role=role: _replica_holds_what_the_hub_gives(f, role, m), 120, f"{role}'s replica")
        for role in ("spoke-1", "spoke-2")
    }
    assert len(given["spoke-1"]) == 5 and len(given["spoke-2"]) == 3, given  # public 2, infra's 2, private 1 / 2, 1
    late = f"{m} hub main public, written while the spokes were cut: the lighthouse is closed"
    for role in ("spoke-1", "spoke-2"):
        f.cut(role)
    try:
        l4.added(f, HUB, "main", late, visibility="public")
        for role in ("spoke-1", "spoke-2"):
            calls = [
                {"agent": a, "op": "memory_search", "args": [f"{m} lighthouse lamp"], "kwargs": {"limit": 50}}
                for a in l4.SPOKE_AGENTS
            ]
            for agent, found in zip(l4.SPOKE_AGENTS, l4.ops(f, role, calls), strict=True):
                answer = found["answer"]
                assert found["status"] == 200 and answer["degraded"] is True, found
                assert answer["replica_age_s"] is not None and "replica" in answer["reason"], answer
                may = {i for i, x in given[role].items() if agent in x["readers"]}
                assert {r["id"] for r in answer["results"] if m in r["memory"]} == may, (role, agent, answer)
        seq = l4.hub_seq(f)  # the late write included
    finally:
        returned = time.time()  # the hosts share the test machine's clock
        for role in ("spoke-1", "spoke-2"):
            f.restore(role)
    for role in ("spoke-1", "spoke-2"):
        poll(
            lambda role=role: (r := l4.replica(f, role))["seq"] >= seq and r["lag"] == 0,
            60,
            f"{role}'s replica at the hub's seq {seq}",
        )
        # when it applied its last change (nothing written since), by its own record: not this test's slow polls
        took = l4.replica_set(f, role, m)["applied_at"] - returned
        assert took <= 10, f"{role}'s replica caught up {took:.1f} s after the link returned"
        now = poll(lambda role=role: _replica_holds_what_the_hub_gives(f, role, m), 60, f"{role}'s replica again")
        assert late in {x["payload"].get("data") for x in now.values()}, now


def test_a_stolen_key_acts_only_as_its_hosts_agents_and_a_removed_key_is_refused_at_once(hub_l4):
    """spoke-1's key copied to spoke-2: from there it reads what spoke-1's agents may read, nothing of
    spoke-2's.  `add-host --new-key` refuses it from the next request on (spoke-1's adds are kept until its new
    key is copied and read); `remove-host` refuses the host's key at once."""
    f = hub_l4
    m = f"s{uuid.uuid4().hex[:8]}"
    s1 = l4.added(f, "spoke-1", "main", f"{m} spoke-1 main private: the kiln is lit at four", visibility="private")
    s2 = l4.added(f, "spoke-2", "main", f"{m} spoke-2 main private: the kiln spare key is blue", visibility="private")
    stolen = "/root/stolen.key"
    f.container("spoke-2").write(stolen, f.container("spoke-1").read(l4.HUB_KEY), mode=0o600)
    search = {"q": f"{m} kiln", "limit": 50}
    cases = [
        {"method": "POST", "path": "/v1/memories/search", "agent": "main", "body": search},
        {"method": "GET", "path": f"/v1/memories/{s1}", "agent": "main", "body": None},
        {"method": "GET", "path": f"/v1/memories/{s2}", "agent": "main", "body": None},
        {"method": "GET", "path": f"/v1/memories/{s2}/history", "agent": "main", "body": None},
        {"method": "GET", "path": "/v1/memories", "agent": "spoke-2/main", "body": None},
        {"method": "POST", "path": "/v1/memories/search", "agent": "main", "body": {**search, "agent": "spoke-2/main"}},
        {"method": "GET", "path": "/v1/status", "agent": None, "body": None},
    ]
    found, own, theirs, history, other_agent, other_body, admin = l4.peer(f, "spoke-2", cases, key_file=stolen)
    assert found["status"] == 200 and s1 in found["body"] and s2 not in found["body"], found  # spoke-1/main's view
    assert own["status"] == 200 and "spoke-1/main" in own["body"]
    assert theirs["status"] == history["status"] == 404 and "blue" not in theirs["body"] + history["body"]
    assert other_agent["status"] == 403 and other_body["status"] == 403
    assert admin["status"] in (404, 405)

    # --new-key: a new key in the same file on the hub; the stolen one is refused from the next request on
    l4.enrol(f, "spoke-1", "--new-key", copy=False)
    assert [a["status"] for a in l4.peer(f, "spoke-2", cases[:2], key_file=stolen)] == [401, 401]
    # spoke-1 itself still holds the old key until the operator copies the new one: its adds are kept
    poll(lambda: l4.conversation(f, "spoke-1")["reachable"] is False, 60, "spoke-1's prober seeing its key refused")
    kept = f"{m} spoke-1 main: written while its key was being replaced"
    queued = l4.call(f, "spoke-1", "main", "add", kept, visibility="private")
    assert queued["status"] == 200 and queued["answer"]["queued"] is True, queued
    l4.copy_key(f, "spoke-1")
    f.run("spoke-1", "systemctl", "reload", "memstrata.service", timeout=240)  # SIGHUP: the key file read again
    poll(lambda: l4.settled(f, "spoke-1"), DRAIN_S, "spoke-1 back with its new key, its queue sent")
    assert [x["memory"] for x in l4.listed(f, "spoke-1", "main", kept)] == [kept]

    # remove-host: the host's key (the new one, copied to spoke-2 as well) refused at once
    f.container("spoke-2").write(stolen, f.container("spoke-1").read(l4.HUB_KEY), mode=0o600)
    assert l4.peer(f, "spoke-2", cases[:1], key_file=stolen)[0]["status"] == 200
    operator.memstrata(f.container(HUB), "fleet", "remove-host", "spoke-1")
    assert [a["status"] for a in l4.peer(f, "spoke-2", cases[:2], key_file=stolen)] == [401, 401]
    refused = l4.call(f, "spoke-1", "main", "get", s1)  # the spoke itself: its key no longer known
    assert refused["status"] != 200, refused
