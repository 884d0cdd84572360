"""The hub serves L4 to its spokes (issue 48): enrolment, the peer API, ``conversation.backend: hub``.

Real daemons, two roots and more on one machine: the hub (embedded L4, ``fleet.listen`` on 127.0.0.1 and a
free port) and two spokes whose L4 is the hub's.  A spoke's agents go through their own daemon's socket,
as the CLI, the skill and MCP do; the attacker holding spoke-1's key talks to the peer port directly,
with generated agent names, headers and bodies.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import uuid
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.front.daemon_client import DaemonClient, DaemonRequestError
from tests.helpers import (
    FAST,
    LEAN,
    DaemonProcess,
    audit_events,
    init_root,
    registry_of,
    run_cli,
    token_of,
    wait_for,
    wait_reachable,
)

pytestmark = pytest.mark.slow

SPOKE_1_AGENTS = ("main", "b")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Fleet:
    """hub (agents main, a; a in project infra), spoke-1 (main, b; spoke-1/b in infra on the hub), spoke-2 (main)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.hub_root = tmp / "hub"
        self.hub_config = init_root(self.hub_root, **FAST, fleet={"host": "hub", "listen": f"127.0.0.1:{self.port}"})
        run_cli("agent", "add", "a", "--project", "infra", config=self.hub_config)
        registry = registry_of(self.hub_root)
        data = yaml.safe_load(registry.read_text())
        data["projects"]["infra"]["members"].append("spoke-1/b")  # a spoke's agent, as the hub knows it
        registry.write_text(yaml.safe_dump(data))
        self.keys = {}
        for host, agents in (("spoke-1", SPOKE_1_AGENTS), ("spoke-2", ("main",))):
            self.keys[host] = tmp / f"{host}.key"
            args = [a for agent in agents for a in ("--agent", agent)]
            run_cli("fleet", "add-host", host, *args, "--key-file", str(self.keys[host]), config=self.hub_config)
        self.roots = {host: tmp / host for host in self.keys}
        self.mem0_port = free_port()  # spoke-1's mem0 REST port: mem0's surface on a spoke
        mem0 = {"spoke-1": {"mem0_api": {"enabled": True, "port": self.mem0_port}}}
        self.configs = {
            host: init_root(
                root,
                **FAST,
                vectors={"backend": "off"},  # L3 by its words alone: no model on a spoke for these tests
                fleet={"host": host},
                conversation={
                    "backend": "hub",
                    "hub": {"url": self.url, "key_file": str(self.keys[host])},
                    **mem0.get(host, {}),
                },
            )
            for host, root in self.roots.items()
        }
        run_cli("agent", "add", "b", config=self.configs["spoke-1"])
        self.hub: DaemonProcess | None = None
        self.spokes: dict[str, DaemonProcess] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.hub = DaemonProcess(self.hub_config).start()
        self.spokes = {host: DaemonProcess(config).start() for host, config in self.configs.items()}
        wait_reachable(self.hub)
        for spoke in self.spokes.values():
            wait_reachable(spoke)

    def stop(self) -> None:
        for d in [*self.spokes.values(), self.hub]:
            if d is not None and d.proc is not None and d.proc.poll() is None:
                d.stop()

    def client(self, host: str, agent: str) -> DaemonClient:
        """``agent`` of ``host`` (hub, spoke-1, spoke-2) through its own daemon's socket, with its token."""
        daemon = self.hub if host == "hub" else self.spokes[host]
        root = self.hub_root if host == "hub" else self.roots[host]
        assert daemon is not None
        return DaemonClient(daemon.socket, timeout=60, token=token_of(root, agent))

    def key(self, host: str) -> str:
        return self.keys[host].read_text().strip()

    def peer(self, method: str, path: str, key: str | None, agent: str | None, body: object = None) -> tuple[int, dict]:
        """One request to the hub's peer port, as an attacker would send it."""
        headers = {"Accept": "application/json"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        if agent is not None:
            headers["X-Memstrata-Agent"] = agent
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        return response.status, json.loads(raw) if raw else {}

    def hub_audit(self) -> list[dict]:
        return audit_events(self.hub_root)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    f = Fleet(tmp_path_factory.mktemp("peer"))
    try:
        f.start()
        yield f
    finally:
        f.stop()


def _refused(call) -> DaemonRequestError:
    with pytest.raises(DaemonRequestError) as info:
        call()
    return info.value


# ---------------------------------------------------------------- enrolment


def test_add_host_writes_a_private_key_records_only_its_hash_and_keeps_it_when_run_again(tmp_path):
    config = init_root(tmp_path / "hub", **LEAN)
    key_file = tmp_path / "keys" / "spoke-1.key"
    key_file.parent.mkdir()
    out = run_cli(
        "fleet", "add-host", "spoke-1", "--agent", "main", "--key-file", str(key_file), "--json", config=config
    )
    assert json.loads(out.stdout)["agents"] == ["main"]
    key = key_file.read_text().strip()
    assert oct(key_file.stat().st_mode & 0o777) == "0o600" and len(key) >= 40
    peers = tmp_path / "hub" / "state" / "fleet" / "peers.json"
    text = peers.read_text()
    assert key not in text and oct(peers.stat().st_mode & 0o777) == "0o600"
    record = json.loads(text)["hosts"]["spoke-1"]
    assert record["agents"] == ["main"] and re.fullmatch(r"[0-9a-f]{64}", record["key_sha256"])

    # again with other agents: the key is kept, the agents change
    run_cli(
        "fleet", "add-host", "spoke-1", "--agent", "main", "--agent", "ops", "--key-file", str(key_file), config=config
    )
    assert key_file.read_text().strip() == key
    assert json.loads(peers.read_text())["hosts"]["spoke-1"]["agents"] == ["main", "ops"]
    listed = json.loads(run_cli("fleet", "hosts", "--json", config=config).stdout)["hosts"]
    assert [(h["host"], h["agents"]) for h in listed] == [("spoke-1", ["main", "ops"])]

    # another file for an enrolled host, or a file that holds something else: refused, nothing changed
    other = tmp_path / "keys" / "other.key"
    refused = run_cli(
        "fleet", "add-host", "spoke-1", "--agent", "main", "--key-file", str(other), config=config, check=False
    )
    assert refused.returncode == 1 and "--new-key" in refused.stderr and not other.exists()
    other.write_text("not a key of ours\n")
    refused = run_cli(
        "fleet", "add-host", "spoke-2", "--agent", "main", "--key-file", str(other), config=config, check=False
    )
    assert refused.returncode == 1 and "does not hold" in refused.stderr
    assert other.read_text() == "not a key of ours\n" and "spoke-2" not in peers.read_text()

    # --new-key: a new key in the same file
    run_cli("fleet", "add-host", "spoke-1", "--agent", "main", "--key-file", str(key_file), "--new-key", config=config)
    assert key_file.read_text().strip() != key

    for name, agent in (("shared", "main"), ("Spoke", "main"), ("-x", "main"), ("a/b", "main"), ("spoke-3", "Main")):
        bad = run_cli("fleet", "add-host", name, "--agent", agent, "--key-file", str(tmp_path / f"{uuid.uuid4()}.key"),
                      config=config, check=False)  # fmt: skip
        assert bad.returncode != 0, name
    assert set(json.loads(peers.read_text())["hosts"]) == {"spoke-1"}


def test_a_wildcard_listen_address_is_refused_naming_the_key(tmp_path):
    for address in ("0.0.0.0:7000", "[::]:7000", ":7000"):
        config = init_root(tmp_path / f"hub-{len(address)}", **LEAN, fleet={"listen": address})
        proc = run_cli("run", config=config, check=False)
        assert proc.returncode != 0
        assert "fleet.listen" in proc.stderr and "tailnet address" in proc.stderr, proc.stderr


# ---------------------------------------------------------------- a spoke's agents through the hub


def test_a_spoke_agent_adds_searches_changes_and_deletes_its_own_memories_through_the_hub(fleet):
    with fleet.client("spoke-1", "main") as main:
        added = main.add(
            "main", "spoke-1 main private: the lighthouse key is under the blue stone", visibility="private"
        )
        memory_id = added["results"][0]["id"]
        got = main.get("main", memory_id)
        assert got["agent_id"] == "spoke-1/main" and got["visibility"] == "private"  # the owner, as the hub knows it
        found = main.memory_search("main", "where is the lighthouse key")
        assert found["degraded"] is False and memory_id in [r["id"] for r in found["results"]]
        assert memory_id in [r["id"] for r in main.get_all("main")["results"]]
        main.update("main", memory_id, "spoke-1 main private: the lighthouse key is under the red stone")
        assert "red stone" in main.get("main", memory_id)["memory"]
        assert main.history("main", memory_id)["results"]

        newer = main.add(
            "main", "spoke-1 main private: the lighthouse key moved to the harbour office", supersedes=memory_id
        )
        assert newer["results"][0]["id"] != memory_id
        restored = main.restore_memory("main", memory_id)
        assert restored["restored"] is True and restored["previous_state"] == "superseded"

        main.delete("main", memory_id)
        gone = _refused(lambda: main.get("main", memory_id))
        assert gone.status == 404 and "no memory" in str(gone)
        assert main.delete_all("main")["deleted"] >= 1


def test_private_memories_stay_with_their_owner_across_hosts(fleet):
    with (
        fleet.client("spoke-1", "main") as s1,
        fleet.client("spoke-2", "main") as s2,
        fleet.client("hub", "main") as hub,
    ):
        mine = s1.add("main", "spoke-1 main private: the orchard gate code is 4417", visibility="private")["results"][
            0
        ]["id"]
        hubs = hub.add("main", "hub main private: the orchard gate spare code is 9902", visibility="private")[
            "results"
        ][0]["id"]
        theirs = s2.add("main", "spoke-2 main private: the orchard shed code is 5150", visibility="private")["results"][
            0
        ]["id"]
        missing = str(uuid.uuid4())
        for client, own, others in (
            (s1, mine, (hubs, theirs)),
            (s2, theirs, (mine, hubs)),
            (hub, hubs, (mine, theirs)),
        ):
            results = [r["id"] for r in client.memory_search("main", "orchard gate code", limit=20)["results"]]
            assert own in results and not set(others) & set(results)
            no_such = _refused(lambda c=client: c.get("main", missing))
            for other in others:
                denied = _refused(lambda c=client, o=other: c.get("main", o))
                assert denied.status == no_such.status == 404
                assert str(denied).replace(other, "ID") == str(no_such).replace(missing, "ID")  # not even admitted
                assert _refused(lambda c=client, o=other: c.delete("main", o)).status == 404
                assert _refused(lambda c=client, o=other: c.history("main", o)).status == 404


def test_public_and_project_memories_of_the_hub_reach_the_spokes_agents_that_may_read_them(fleet):
    public = run_cli("add", "fleet notice: the ferry leaves at seven from pier nine", "--agent", "main",
                     "--visibility", "public", "--json", config=fleet.hub_config)  # fmt: skip
    public_id = json.loads(public.stdout)["results"][0]["id"]
    with fleet.client("hub", "a") as a:
        project = a.add("a", "infra project: the ferry's radio relay runs on channel sixteen", visibility="project",
                        project="infra")  # fmt: skip
    project_id = project["results"][0]["id"]
    with (
        fleet.client("spoke-1", "main") as main,
        fleet.client("spoke-1", "b") as b,
        fleet.client("spoke-2", "main") as s2,
    ):
        for client, agent in ((main, "main"), (b, "b"), (s2, "main")):
            found = [r["id"] for r in client.memory_search(agent, "ferry pier radio channel", limit=20)["results"]]
            assert public_id in found
            assert (project_id in found) is (client is b)  # spoke-1/b is a member of infra on the hub
        assert b.get("b", project_id)["project_id"] == "infra"
        assert _refused(lambda: main.get("main", project_id)).status == 404


def test_mem0s_rest_api_on_a_spoke_works_through_the_hub(fleet):
    token = token_of(fleet.roots["spoke-1"], "main")

    def mem0(method: str, path: str, body: object = None) -> tuple[int, object]:
        connection = http.client.HTTPConnection("127.0.0.1", fleet.mem0_port, timeout=60)
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        try:
            connection.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            response = connection.getresponse()
            return response.status, json.loads(response.read() or b"{}")
        finally:
            connection.close()

    text = "mem0 on spoke-1: the night train to the coast leaves at eleven"
    status, added = mem0("POST", "/v3/memories/add/", {"messages": [{"role": "user", "content": text}]})
    assert status == 200, added
    assert isinstance(added, dict)
    memory_id = added["results"][0]["id"]
    status, found = mem0("POST", "/v3/memories/search/", {"query": "night train to the coast"})
    assert status == 200 and isinstance(found, dict) and memory_id in [r["id"] for r in found["results"]]
    status, got = mem0("GET", f"/v1/memories/{memory_id}/")
    assert status == 200 and isinstance(got, dict) and got["memory"] == text and got["agent_id"] == "spoke-1/main"
    status, _ = mem0("DELETE", f"/v1/memories/{memory_id}/")
    assert status == 200 and mem0("GET", f"/v1/memories/{memory_id}/")[0] == 404


def test_status_on_a_spoke_says_the_hub_and_shows_its_url_to_the_administrator_only(fleet):
    spoke = fleet.spokes["spoke-1"]
    section = spoke.status()["conversation"]
    assert section["backend"] == "hub" and section["url"] == fleet.url and section["reachable"] is True
    assert section["hub"]["host"] == "spoke-1"
    agent_view = spoke.status(token=token_of(fleet.roots["spoke-1"], "main"))["conversation"]
    assert agent_view["backend"] == "hub" and "url" not in agent_view
    for command in (("cleanup", "--execute"), ("backup",)):  # a spoke's timers: said, and done (exit 0)
        run = run_cli(*command, config=fleet.configs["spoke-1"])
        assert "run it on the hub" in run.stderr


# ---------------------------------------------------------------- spoke-1's key in an attacker's hands


_printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
_names = st.sampled_from(["a", "admin", "spoke-2/main", "spoke-1/main", "hub/main", "main ", "MAIN", "b/main", ""])


@settings(
    max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(agent=st.one_of(_names, _printable))
def test_a_host_key_acts_only_as_its_own_enrolled_agents(fleet, agent):
    if agent.strip() in SPOKE_1_AGENTS:
        return  # its own agents (a header's spaces are not part of it)
    status, answer = fleet.peer("GET", "/v1/memories", fleet.key("spoke-1"), agent)
    assert status == 403 and "may not act as agent" in answer["error"], (agent, status, answer)


@settings(
    max_examples=200, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(named=st.one_of(_names, _printable, st.integers(), st.none()), route=st.integers(0, 2))
def test_a_request_naming_another_agent_is_refused(fleet, named, route):
    if named is None or named == "main":
        return  # absent or the header's own: allowed (below)
    key = fleet.key("spoke-1")
    if route == 0:
        status, answer = fleet.peer("POST", "/v1/memories", key, "main", {"agent": named, "text": "not written"})
    elif route == 1:
        status, answer = fleet.peer("POST", "/v1/memories/search", key, "main", {"agent": named, "q": "anything"})
    else:
        status, answer = fleet.peer("DELETE", "/v1/memories?" + _query(agent=named), key, "main")
    assert status == 403 and "acts as 'spoke-1/main'" in answer["error"], (named, status, answer)


def _query(**params: object) -> str:
    from urllib.parse import urlencode

    return urlencode({k: str(v) for k, v in params.items()})


def test_the_attacker_reaches_no_other_memory_no_other_route_and_no_key_but_its_own(fleet):
    key = fleet.key("spoke-1")
    with fleet.client("spoke-2", "main") as s2, fleet.client("hub", "main") as hub:
        theirs = s2.add("main", "spoke-2 main private: the vault combination is 3-14-15", visibility="private")
        hubs = hub.add("main", "hub main private: the vault spare combination is 9-26-5", visibility="private")
    others = [theirs["results"][0]["id"], hubs["results"][0]["id"]]
    status, _ = fleet.peer("GET", f"/v1/memories/{uuid.uuid4()}", key, "main")
    assert status == 404
    for other in others:
        for method, path in (("GET", ""), ("GET", "/history"), ("DELETE", ""), ("POST", "/restore")):
            status, answer = fleet.peer(
                method, f"/v1/memories/{other}{path}", key, "main", {} if method == "POST" else None
            )
            assert status == 404 and answer["error"].startswith("no memory"), (method, path, answer)
        status, answer = fleet.peer("PUT", f"/v1/memories/{other}", key, "main", {"text": "overwritten"})
        assert status in (403, 404) and "overwritten" not in json.dumps(answer)
        status, answer = fleet.peer("POST", "/v1/memories", key, "main", {"text": "mine now", "supersedes": other})
        assert status in (403, 404), answer
    status, found = fleet.peer("POST", "/v1/memories/search", key, "main", {"q": "vault combination", "limit": 20})
    assert status == 200 and not set(others) & {r["id"] for r in found["results"]}
    not_served = [("POST", f"/v1/admin/{name}") for name in ("cleanup", "backup", "restore", "consolidate")]
    not_served += [("POST", "/v1/reindex"), ("GET", "/v1/status"), ("POST", "/v1/search"), ("GET", "/v1/search")]
    not_served += [("GET", "/v1/admin/fleet"), ("GET", "/metrics"), ("GET", "/healthz")]
    for method, path in not_served:
        status, answer = fleet.peer(method, path, key, "main", {} if method == "POST" else None)
        assert status in (404, 405), (method, path, status)
    for wrong in ("", "not-a-key", key[:-1], fleet.key("spoke-1") + "x"):
        assert fleet.peer("GET", "/v1/memories", wrong, "main")[0] == 401
    assert fleet.peer("GET", "/v1/memories", None, "main")[0] == 401
    health = {"status": "ok", "host": "spoke-1", "agents": list(SPOKE_1_AGENTS), "infer_default": False}
    assert fleet.peer("GET", "/v1/peer/health", key, None) == (200, health)
    denied = [e for e in fleet.hub_audit() if e.get("event") == "peer_agent_denied"]
    assert denied and denied[-1]["host"] == "spoke-1"


def test_an_enrolment_while_the_hub_runs_counts_from_the_next_request(fleet):
    key_file = fleet.tmp / "spoke-3.key"
    run_cli("fleet", "add-host", "spoke-3", "--agent", "main", "--key-file", str(key_file), config=fleet.hub_config)
    key = key_file.read_text().strip()
    status, page = fleet.peer("GET", "/v1/memories", key, "main")
    assert status == 200 and all(r["visibility"] == "public" for r in page["results"])  # nothing of its own yet
    assert fleet.peer("GET", "/v1/memories", key, "b")[0] == 403
    run_cli("fleet", "remove-host", "spoke-3", config=fleet.hub_config)
    assert fleet.peer("GET", "/v1/memories", key, "main")[0] == 401


# ---------------------------------------------------------------- the hub away


def test_with_the_hub_away_a_spoke_searches_its_l3_degraded_queues_adds_and_refuses_the_rest(tmp_path, daemons):
    key_file = tmp_path / "spoke.key"
    key_file.write_text("a" * 43 + "\n")
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    hub = {"url": url, "key_file": str(key_file), "timeout_s": 2}
    config = init_root(tmp_path / "spoke", **{**LEAN, "conversation": {"backend": "hub", "hub": hub}})
    spoke = daemons(config)
    wait_for(lambda: spoke.status()["conversation"].get("last_error"), timeout=60, what="the hub found away")
    section = spoke.status()["conversation"]
    assert section["reachable"] is False and section["backend"] == "hub" and section["url"] == url
    with DaemonClient(spoke.socket, timeout=60, token=token_of(tmp_path / "spoke", "main")) as main:
        answer = main.memory_search("main", "anything at all")
        assert answer["degraded"] is True and "the hub is unreachable" in answer["reason"]
        queued = main.add("main", "a fact for the hub")  # kept on the spoke for the hub (test_peer_queue.py)
        assert queued["queued"] is True and "the hub is unreachable" in queued["reason"]
        assert spoke.status()["conversation"]["queue"]["depth"] == 1
        refused = _refused(lambda: main.get_all("main"))  # no replica yet: as before it had one
        assert refused.status == 503 and "nothing was changed and nothing was queued" in str(refused)
        assert _refused(lambda: main.get("main", str(uuid.uuid4()))).status == 503
        history = _refused(lambda: main.history("main", str(uuid.uuid4())))
        assert history.status == 503 and "history is the hub's record" in str(history)
        filtered = _refused(lambda: main.memory_search("main", "anything", filters={"user_id": "x"}))
        assert filtered.status == 503


def test_the_hub_stopped_and_started_again_a_spoke_degrades_queues_then_finds_what_it_wrote(fleet):
    """Last in this module: it stops the fleet's hub (and starts it again)."""
    spoke = fleet.spokes["spoke-1"]
    with fleet.client("spoke-1", "main") as main:
        before = spoke.status()["conversation"]["replica"]["seq"]
        kept = main.add("main", "spoke-1 main: the bakery on the corner opens at six", visibility="private")
        kept_id = kept["results"][0]["id"]
        wait_for(
            lambda: (r := spoke.status()["conversation"]["replica"])["seq"] > before and r["lag"] == 0,
            timeout=120,
            what="spoke-1's replica has the memory",
        )
        assert fleet.hub is not None and fleet.hub.stop() == 0
        answer = main.memory_search("main", "when does the bakery open")
        assert answer["degraded"] is True and "the hub is unreachable" in answer["reason"]
        queued = main.add("main", "spoke-1 main: a fact while the hub is away", visibility="private")
        assert queued["queued"] is True
        got = main.get("main", kept_id)  # from spoke-1's replica (test_peer_replica_reads.py)
        assert got["degraded"] is True and got["memory"] == "spoke-1 main: the bakery on the corner opens at six"
        wait_for(lambda: spoke.status()["conversation"]["reachable"] is False, timeout=60, what="the hub seen away")

        fleet.hub = DaemonProcess(fleet.hub_config).start()
        wait_reachable(fleet.hub)
        wait_reachable(spoke)
        assert main.get("main", kept_id)["agent_id"] == "spoke-1/main"  # acknowledged before: on the hub still
        found = main.memory_search("main", "when does the bakery open")
        assert found["degraded"] is False and kept_id in [r["id"] for r in found["results"]]
        wait_for(lambda: spoke.status()["conversation"]["queue"]["depth"] == 0, timeout=180, what="the queue sent")
        texts = [m["memory"] for m in main.get_all("main", limit=500)["results"]]
        assert texts.count("spoke-1 main: a fact while the hub is away") == 1
