"""Each spoke keeps an offline replica of what its agents may read on the hub (issue 48 item 3).

Real daemons on one machine, as tests/daemon/api/test_peer_api.py (its Fleet: the hub with agents main and a,
``a`` and ``spoke-1/b`` in project infra; spoke-1 with main and b; spoke-2 with main).  What reaches a
spoke's replica is checked on the hub's feed and snapshot routes with that spoke's own key (what the
replica is built from), in the spoke's status, and in its degraded answers once the hub is stopped.
"""

from __future__ import annotations

import json
import signal
import time
import uuid

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.daemon.api.test_peer_api import Fleet
from tests.helpers import DaemonProcess, registry_of, run_cli, wait_for, wait_reachable

pytestmark = pytest.mark.slow

CONVERGE_S = 120  # generous: the machine is shared with other suites


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    f = Fleet(tmp_path_factory.mktemp("replica"))
    for config in f.configs.values():  # a hub loading its models under load may take more than 10 s to answer
        data = yaml.safe_load(config.read_text())
        data["conversation"]["hub"]["timeout_s"] = 60
        config.write_text(yaml.safe_dump(data))
    try:
        f.start()
        yield f
    finally:
        f.stop()


def replica(fleet: Fleet, host: str) -> dict:
    return fleet.spokes[host].status()["conversation"]["replica"]


def fed(fleet: Fleet, host: str) -> dict[str, dict | None]:
    """Every memory the hub's feed gives ``host`` (with its key): id → memory (None: not readable there)."""
    state: dict[str, dict | None] = {}
    after = 0
    while True:
        status, page = fleet.peer("GET", f"/v1/peer/feed?after={after}&limit=1000", fleet.key(host), None)
        assert status == 200, page
        for change in page["changes"]:
            state[change["id"]] = change["memory"]
        if page["seq"] == after or not page["changes"]:
            return state
        after = page["seq"]


def snapshot(fleet: Fleet, host: str) -> dict[str, dict]:
    found: dict[str, dict] = {}
    cursor = ""
    while True:
        status, page = fleet.peer("GET", f"/v1/peer/snapshot?limit=7&cursor={cursor}", fleet.key(host), None)
        assert status == 200, page
        found.update({m["id"]: m["memory"] for m in page["memories"]})
        if not page["cursor"]:
            return found
        cursor = page["cursor"]


def caught_up(fleet: Fleet, host: str) -> dict:
    """The spoke's replica at the hub's feed head as the hub gives it now (asked of the hub, not of the spoke:
    the spoke's own lag is against the head it last saw, which a write it has not yet polled for leaves at 0)."""
    status, page = fleet.peer("GET", "/v1/peer/feed?after=0&limit=1", fleet.key(host), None)
    assert status == 200, page
    head = int(page["head"])
    return wait_for(
        lambda: (r := replica(fleet, host))["seq"] >= head and r["lag"] == 0 and r,
        timeout=CONVERGE_S,
        interval=0.3,
        what=f"{host}'s replica at the hub's feed head {head}",
    )


def add(fleet: Fleet, host: str, agent: str, text: str, **kw) -> str:
    with fleet.client(host, agent) as c:
        return c.add(agent, text, **kw)["results"][0]["id"]


def test_the_feed_gives_each_host_only_what_its_agents_may_read_with_their_names(fleet):
    marker = uuid.uuid4().hex[:8]
    public = add(fleet, "hub", "main", f"{marker} the office wifi is called harbour", visibility="public")
    infra = add(fleet, "hub", "a", f"{marker} the infra pager rota is weekly", visibility="project", project="infra")
    s1_private = add(fleet, "spoke-1", "main", f"{marker} spoke-1 main: tea in drawer two", visibility="private")
    s1_infra = add(fleet, "spoke-1", "b", f"{marker} spoke-1 b: infra backups run at three", project="infra")
    s2_private = add(fleet, "spoke-2", "main", f"{marker} spoke-2 main parks on level four", visibility="private")
    hub_private = add(fleet, "hub", "main", f"{marker} the hub's main private note", visibility="private")

    two, one = fed(fleet, "spoke-2"), fed(fleet, "spoke-1")
    assert two[public]["readers"] == ["main"] and two[s2_private]["readers"] == ["main"]
    for foreign in (infra, s1_private, s1_infra, hub_private):
        assert two.get(foreign) is None, foreign  # never sent: a null is a delete on the spoke
    assert one[public]["readers"] == ["main", "b"]
    assert one[infra]["readers"] == ["b"] and one[s1_infra]["readers"] == ["b"]
    assert one[s1_private]["readers"] == ["main"]
    assert one.get(s2_private) is None and one.get(hub_private) is None
    assert one[public]["payload"]["data"].endswith("harbour") and len(one[public]["vector"]) > 8
    assert one[s1_private]["payload"]["agent_id"] == "spoke-1/main"

    snap = snapshot(fleet, "spoke-2")
    assert public in snap and s2_private in snap
    assert not {infra, s1_private, s1_infra, hub_private} & set(snap)
    # no memory in any answer to spoke-2's key is one of spoke-1's agents' or the hub's private ones
    for memory in [*snap.values(), *(m for m in two.values() if m)]:
        payload = memory["payload"]
        assert payload["visibility"] == "public" or payload["agent_id"] == "spoke-2/main", payload

    section = caught_up(fleet, "spoke-2")
    assert section["memories"] >= 2 and section["seq"] > 0 and section["epoch"]
    hub_feed = fleet.hub.status()["conversation"]["feed"]
    assert hub_feed["seq"] >= section["seq"] and set(hub_feed["spokes"]) >= {"spoke-1", "spoke-2"}


# (writer host, writer agent, visibility): what each may write (public: the hub's main; infra: its members)
WRITES = [
    ("hub", "main", "public"),
    ("hub", "main", "private"),
    ("hub", "a", "project"),
    ("hub", "a", "private"),
    ("spoke-1", "main", "private"),
    ("spoke-1", "b", "project"),
    ("spoke-1", "b", "private"),
    ("spoke-2", "main", "private"),
]
HOST_AGENTS = {"spoke-1": ["main", "b"], "spoke-2": ["main"]}
INFRA = {"hub/a", "spoke-1/b"}  # members of infra, as the hub names them


def expected_readers(host: str, writer: str, visibility: str) -> list[str]:
    """Who of ``host``'s agents may read a memory ``writer`` (HOST/AGENT) wrote: the rule, written out."""
    return [
        agent
        for agent in HOST_AGENTS[host]
        if visibility == "public"
        or (visibility == "project" and f"{host}/{agent}" in INFRA)
        or (visibility == "private" and writer == f"{host}/{agent}")
    ]


@settings(max_examples=24, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(WRITES), min_size=1, max_size=3))
def test_generated_writes_reach_exactly_the_hosts_agents_that_may_read_them(fleet, writes):
    made = []
    for host, agent, visibility in writes:
        options = {"project": "infra"} if visibility == "project" else {"visibility": visibility}
        text = f"{uuid.uuid4().hex[:8]} generated {visibility} memory of {host}/{agent}"
        writer = agent if host == "hub" else f"{host}/{agent}"
        made.append((add(fleet, host, agent, text, **options), writer, visibility))
    for host in HOST_AGENTS:
        state = fed(fleet, host)
        for memory_id, writer, visibility in made:
            readers = expected_readers(host, writer, visibility)
            memory = state.get(memory_id)
            assert (memory["readers"] if memory else []) == readers, (host, writer, visibility)


def test_routes_need_the_host_key_and_no_agent(fleet):
    assert fleet.peer("GET", "/v1/peer/feed?after=0", None, None)[0] == 401
    assert fleet.peer("GET", "/v1/peer/snapshot", "not-a-key-" + "x" * 30, None)[0] == 401
    assert fleet.peer("GET", "/v1/peer/feed?after=-1", fleet.key("spoke-1"), None)[0] == 400


def test_changes_propagate_and_a_project_membership_removed_empties_it_from_the_replica(fleet):
    marker = uuid.uuid4().hex[:8]
    kept = add(fleet, "hub", "main", f"{marker} the lift is serviced on mondays", visibility="public")
    gone = add(fleet, "hub", "main", f"{marker} the canteen closes at two", visibility="public")
    infra = add(fleet, "hub", "a", f"{marker} infra: the vpn gateway is gw-3", visibility="project", project="infra")
    with fleet.client("hub", "main") as c:
        c.update("main", kept, f"{marker} the lift is serviced on tuesdays")
        c.delete("main", gone)
        newer = c.add("main", f"{marker} the lift is serviced on fridays", visibility="public", supersedes=kept)
    newer_id = newer["results"][0]["id"]
    state = fed(fleet, "spoke-2")
    assert state[gone] is None
    assert state[kept]["payload"]["data"].endswith("tuesdays")
    assert state[kept]["payload"].get("superseded_by") == newer_id
    assert state[newer_id]["payload"]["data"].endswith("fridays")
    with fleet.client("hub", "main") as c:
        c.restore_memory("main", kept)  # valid again: the supersede undone
    assert fed(fleet, "spoke-2")[kept]["payload"].get("superseded_by") is None
    assert fed(fleet, "spoke-1")[infra]["readers"] == ["b"]

    before = caught_up(fleet, "spoke-1")
    registry = registry_of(fleet.hub_root)
    data = yaml.safe_load(registry.read_text())
    data["projects"]["infra"]["members"].remove("spoke-1/b")
    registry.write_text(yaml.safe_dump(data))
    try:
        wait_for(
            lambda: replica(fleet, "spoke-1")["rebuilds"] > before["rebuilds"],
            timeout=CONVERGE_S,
            what="spoke-1 rebuilt on the registry change",
        )
        assert snapshot(fleet, "spoke-1").get(infra) is None
        assert fed(fleet, "spoke-1").get(infra) is None
    finally:
        data["projects"]["infra"]["members"].append("spoke-1/b")
        registry.write_text(yaml.safe_dump(data))
    wait_for(
        lambda: replica(fleet, "spoke-1")["rebuilds"] > before["rebuilds"] + 1,
        timeout=CONVERGE_S,
        what="spoke-1 rebuilt once b is back in infra",
    )


def ranked(results: list[dict]) -> list[set[str]]:
    """The ids in their ranks, those of equal score (to 3 places) as one rank.

    The spoke embeds the query itself: the same model, but llama.cpp's sums are not bit-identical from one
    process to another, so two memories whose scores tie to 3 places may swap.  Ranks further apart than
    that must be the hub's."""
    ranks: list[set[str]] = []
    last: float | None = None
    for result in results:
        score = round(float(result["score"] or 0.0), 3)
        if last is None or score != last:
            ranks.append(set())
        ranks[-1].add(result["id"])
        last = score
    return ranks


def _shown(results: list[dict]) -> list[tuple[str, str, float]]:
    """What a failure shows: each result's id, text and score (with its unclamped relevance when explained)."""
    return [(r["id"][:8], r["memory"], r["score"]) for r in results]


def test_with_the_hub_stopped_a_spoke_searches_its_replica_with_the_hubs_ranking(fleet):
    marker = uuid.uuid4().hex[:8]
    facts = [
        "the staging database restarts every sunday at midnight",
        "our build server is named anvil and lives in rack four",
        "coffee beans are ordered from the roastery on elm street",
        "the quarterly review happens in the blue meeting room",
        "office plants are watered by whoever arrives first on monday",
    ]
    for fact in facts:
        add(fleet, "hub", "main", f"{marker} {fact}", visibility="public")
    secret = add(fleet, "spoke-1", "b", f"{marker} infra: the break-glass account is held by b", project="infra")
    add(fleet, "spoke-1", "main", f"{marker} spoke-1 main's own note about the staging database", visibility="private")
    queries = ["when does staging restart", "what is the build server called", "where do coffee beans come from"]
    hub_top, shown = {}, {}
    for host, agent in (("spoke-2", "main"), ("spoke-1", "main"), ("spoke-1", "b")):
        caught_up(fleet, host)
        with fleet.client(host, agent) as c:
            for q in queries:
                answer = c.memory_search(agent, f"{marker} {q}", limit=5)
                assert answer["degraded"] is False
                hub_top[host, agent, q] = ranked(answer["results"])
                shown[host, agent, q] = _shown(answer["results"])

    assert fleet.hub is not None and fleet.hub.stop() == 0
    try:
        for (host, agent, q), ids in hub_top.items():
            with fleet.client(host, agent) as c:
                answer = c.memory_search(agent, f"{marker} {q}", limit=5)
            assert answer["degraded"] is True and "replica" in answer["reason"], answer
            assert isinstance(answer["replica_age_s"], float)
            assert ranked(answer["results"]) == ids, (host, agent, q, shown[host, agent, q], _shown(answer["results"]))
            for r in answer["results"]:
                assert r["id"] != secret or (host, agent) == ("spoke-1", "b")
                assert r["visibility"] == "public" or r["agent_id"] in (f"{host}/{agent}", "spoke-1/b", "a")
        with fleet.client("spoke-1", "main") as c:
            seen = c.memory_search("main", f"{marker} break-glass account", limit=20)["results"]
        assert secret not in [r["id"] for r in seen]  # its sibling b's project memory: never main's
        with fleet.client("spoke-1", "b") as c:
            seen = c.memory_search("b", f"{marker} break-glass account", limit=20)["results"]
        assert secret in [r["id"] for r in seen]
    finally:
        fleet.hub = DaemonProcess(fleet.hub_config).start()
        wait_reachable(fleet.hub)


def test_a_spoke_killed_resumes_from_its_seq_without_a_rebuild(fleet):
    spoke = fleet.spokes["spoke-2"]
    before = caught_up(fleet, "spoke-2")
    spoke.signal(signal.SIGKILL)
    spoke.proc.wait(timeout=30)
    marker = uuid.uuid4().hex[:8]
    while_away = add(fleet, "hub", "main", f"{marker} written while spoke-2 was down", visibility="public")
    fleet.spokes["spoke-2"] = spoke = DaemonProcess(fleet.configs["spoke-2"]).start()
    wait_reachable(spoke)
    after = caught_up(fleet, "spoke-2")
    assert after["rebuilds"] == before["rebuilds"] and after["seq"] >= before["seq"]
    assert fed(fleet, "spoke-2")[while_away] is not None


def test_after_a_sigkill_a_degraded_search_finds_what_the_replica_applied_since(fleet):
    marker = uuid.uuid4().hex[:8]
    fresh = add(fleet, "hub", "main", f"{marker} the loading dock opens at seven", visibility="public")
    caught_up(fleet, "spoke-2")
    assert fed(fleet, "spoke-2")[fresh] is not None
    assert fleet.hub is not None and fleet.hub.stop() == 0
    try:
        with fleet.client("spoke-2", "main") as c:
            answer = c.memory_search("main", f"{marker} the loading dock opens at seven", limit=5)
        assert answer["degraded"] is True, answer
        assert fresh in [r["id"] for r in answer["results"]], _shown(answer["results"])
    finally:
        fleet.hub = DaemonProcess(fleet.hub_config).start()
        wait_reachable(fleet.hub)


def test_a_hub_restored_from_a_backup_makes_every_spoke_rebuild(fleet):
    before = {host: caught_up(fleet, host)["rebuilds"] for host in fleet.spokes}
    backup = json.loads(run_cli("backup", "--json", config=fleet.hub_config).stdout)["backup"]
    marker = uuid.uuid4().hex[:8]
    later = add(fleet, "hub", "main", f"{marker} written after the backup", visibility="public")
    wait_for(lambda: later in fed(fleet, "spoke-2") and replica(fleet, "spoke-2")["lag"] == 0, timeout=CONVERGE_S)
    started = time.monotonic()
    run_cli("restore-backup", backup, "--json", config=fleet.hub_config)
    for host in fleet.spokes:
        wait_for(
            lambda host=host: replica(fleet, host)["rebuilds"] > before[host],
            timeout=CONVERGE_S,
            what=f"{host} rebuilt after the restore",
        )
    assert later not in snapshot(fleet, "spoke-2")
    print(f"rebuilt after a restore in {time.monotonic() - started:.1f} s")
