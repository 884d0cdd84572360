"""A spoke's adds survive the hub being away (issue 48): queued on the spoke, replayed to the hub exactly once.

Real daemons on one machine, as tests/daemon/api/test_peer_api.py: the hub (embedded L4, ``fleet.listen`` on
127.0.0.1) and spoke-1 (agents main, b, c) whose L4 is the hub's.  The hub is stopped and started under the
spoke; what the spoke's agents were told (``queued``) is counted on the hub by their own listings.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest

from daemon.front.daemon_client import DaemonClient, DaemonRequestError
from tests.daemon.api.test_peer_api import free_port
from tests.helpers import (
    FAKE_API_KEY,
    FAST,
    DaemonProcess,
    audit_events,
    init_root,
    run_cli,
    token_of,
    wait_for,
    wait_reachable,
)

pytestmark = pytest.mark.slow

AGENTS = ("main", "b", "c")
DRAIN_S = 180  # generous: the machine is shared with test suites and benchmarks


class HubAndSpoke:
    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.hub_root = tmp / "hub"
        self.hub_config = init_root(self.hub_root, **FAST, fleet={"host": "hub", "listen": f"127.0.0.1:{self.port}"})
        self.key_file = tmp / "spoke-1.key"
        self.enrol(*AGENTS)
        self.root = tmp / "spoke-1"
        hub = {"url": f"http://127.0.0.1:{self.port}", "key_file": str(self.key_file), "timeout_s": 60}
        self.config = init_root(
            self.root,
            **FAST,
            vectors={"backend": "off"},
            fleet={"host": "spoke-1"},
            conversation={"backend": "hub", "hub": hub, "probe_interval_s": 1},
        )
        for agent in AGENTS[1:]:
            run_cli("agent", "add", agent, config=self.config)
        self.hub: DaemonProcess | None = None
        self.spoke: DaemonProcess | None = None

    def enrol(self, *agents: str) -> None:
        """spoke-1 may act as ``agents`` on the hub (the same key: the file holds it)."""
        args = [a for agent in agents for a in ("--agent", agent)]
        run_cli("fleet", "add-host", "spoke-1", *args, "--key-file", str(self.key_file), config=self.hub_config)

    def start_hub(self) -> None:
        self.hub = DaemonProcess(self.hub_config).start()
        wait_reachable(self.hub)

    def stop_hub(self) -> None:
        assert self.hub is not None and self.hub.stop() == 0
        wait_for(lambda: self.section()["reachable"] is False, timeout=60, what="the hub seen away")

    def start_spoke(self) -> None:
        self.spoke = DaemonProcess(self.config).start()

    def kill_spoke(self) -> None:
        assert self.spoke is not None and self.spoke.proc is not None
        self.spoke.signal(signal.SIGKILL)
        self.spoke.proc.wait(timeout=30)

    def stop(self) -> None:
        for d in (self.spoke, self.hub):
            if d is not None and d.proc is not None and d.proc.poll() is None:
                d.stop()

    def section(self) -> dict:
        assert self.spoke is not None
        return self.spoke.status()["conversation"]

    def depth(self) -> int:
        return self.section()["queue"]["depth"]

    def drained(self) -> dict:
        wait_for(lambda: self.depth() == 0, timeout=DRAIN_S, interval=0.5, what="the spoke's queue drained")
        return self.section()

    def client(self, agent: str) -> DaemonClient:
        assert self.spoke is not None
        return DaemonClient(self.spoke.socket, timeout=60, token=token_of(self.root, agent))

    def listed(self, agent: str, marker: str) -> list[dict]:
        """``agent``'s memories on the hub holding ``marker``, through the spoke (the hub's listing)."""
        with self.client(agent) as c:
            page = c.get_all(agent, limit=500)["results"]
        return [m for m in page if marker in m["memory"]]

    def delivered_in_order(self, agent: str, texts: list[str], marker: str) -> None:
        """Each of ``texts`` on the hub exactly once, written in their order (created_at never goes back)."""
        listed = self.listed(agent, marker)
        assert sorted(m["memory"] for m in listed) == sorted(texts), listed
        created = {m["memory"]: m["created_at"] for m in listed}
        assert [created[t] for t in texts] == sorted(created[t] for t in texts), created
        assert all(m["agent_id"] == f"spoke-1/{agent}" for m in listed)

    def audit(self) -> list[dict]:
        return audit_events(self.root)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    f = HubAndSpoke(tmp_path_factory.mktemp("peer-queue"))
    try:
        f.start_hub()
        f.start_spoke()
        assert f.spoke is not None
        wait_reachable(f.spoke)
        yield f
    finally:
        f.stop()


def _refused(call) -> DaemonRequestError:
    with pytest.raises(DaemonRequestError) as info:
        call()
    return info.value


def _text(marker: str, agent: str, i: int) -> str:
    return f"{marker} {agent} note {i:02d}: the lantern on shelf {i} is for {agent}"


def test_adds_with_the_hub_stopped_are_queued_then_on_the_hub_once_each_in_order_and_changes_are_refused(fleet):
    marker = f"q{uuid.uuid4().hex[:8]}"
    with fleet.client("main") as main:
        kept = main.add("main", f"{marker} main: written while the hub was there", visibility="private")
    kept_id = kept["results"][0]["id"]
    fleet.stop_hub()

    answers = []
    for i in range(10):
        for agent in ("main", "b"):
            with fleet.client(agent) as c:
                answers.append(c.add(agent, _text(marker, agent, i), visibility="private"))
    assert all(a["queued"] is True and a["write_id"] for a in answers), answers
    assert [a["ahead"] for a in answers] == list(range(20))  # each behind the ones before it
    assert fleet.depth() == 20

    with fleet.client("main") as main:  # changes need the hub's memories as they are: refused, nothing queued
        for call in (
            lambda: main.update("main", kept_id, f"{marker} main: changed while away"),
            lambda: main.delete("main", kept_id),
            lambda: main.restore_memory("main", kept_id),
            lambda: main.add("main", f"{marker} main: a superseding write", supersedes=kept_id),
        ):
            refused = _refused(call)
            assert refused.status == 503 and "nothing was changed and nothing was queued" in str(refused)
        secret = _refused(lambda: main.add("main", f"{marker} main: the gateway key is {FAKE_API_KEY}"))
        assert secret.status == 422 and "api_key" in str(secret)  # never kept in the spoke's queue file
    section = fleet.section()
    assert section["queue"]["depth"] == 20 and section["queue"]["oldest_age_s"] is not None
    files = (fleet.spoke.state_dir / "conversation").glob("queue.sqlite*")  # the file and its WAL
    assert not any(FAKE_API_KEY.encode() in path.read_bytes() for path in files)
    assert section["reachable"] is False
    shown = run_cli("status", config=fleet.config, check=False).stdout
    assert "queued writes: 20" in shown, shown

    fleet.start_hub()
    section = fleet.drained()
    queue = section["queue"]  # a send whose answer a loaded machine lost was sent again: already there
    assert queue["replayed"] + queue["skipped_already_written"] >= 20 and queue["set_aside"] == 0, section
    for agent in ("main", "b"):
        fleet.delivered_in_order(agent, [_text(marker, agent, i) for i in range(10)], f"{marker} {agent} note")
    with fleet.client("main") as main:
        assert main.get("main", kept_id)["memory"] == f"{marker} main: written while the hub was there"


def test_a_spoke_killed_with_adds_queued_and_again_while_it_replays_delivers_each_once(fleet):
    marker = f"k{uuid.uuid4().hex[:8]}"
    texts = [_text(marker, "main", i) for i in range(30)]
    fleet.stop_hub()
    with fleet.client("main") as main:
        for text in texts[:6]:
            assert main.add("main", text, visibility="private")["queued"] is True
    fleet.kill_spoke()
    fleet.start_spoke()
    assert fleet.depth() == 6  # synced before the answer: the kill lost none
    with fleet.client("main") as main:
        for text in texts[6:]:
            assert main.add("main", text, visibility="private")["queued"] is True

    fleet.start_hub()
    wait_for(lambda: fleet.depth() < 30, timeout=DRAIN_S, interval=0.02, what="the replay under way")
    fleet.kill_spoke()  # at any point of the replay: sent, answered, not yet removed, ...
    fleet.start_spoke()
    fleet.drained()
    fleet.delivered_in_order("main", texts, f"{marker} main note")


def test_a_retried_add_with_the_same_write_id_is_one_memory(fleet):
    marker = f"r{uuid.uuid4().hex[:8]}"
    text = f"{marker} main: the ladder is in the barn"
    write_id = f"retry-{uuid.uuid4().hex}"
    with fleet.client("main") as main:
        first = main.add("main", text, visibility="private", write_id=write_id)
        memory_id = first["results"][0]["id"]
        again = main.add("main", text, visibility="private", write_id=write_id)  # the first answer "lost"
        assert [r["id"] for r in again["results"]] == [memory_id]
        fleet.stop_hub()
        queued = main.add("main", text, visibility="private", write_id=write_id)  # retried with the hub away
        assert queued["queued"] is True and queued["write_id"] == write_id
        twice = main.add("main", text, visibility="private", write_id=write_id)
        assert twice["queued"] is True and "already queued" in twice["reason"]
        assert fleet.depth() == 1
        skipped = fleet.section()["queue"]["skipped_already_written"]
    fleet.start_hub()
    section = fleet.drained()
    assert section["queue"]["skipped_already_written"] == skipped + 1  # the hub answered EXISTS
    assert [m["id"] for m in fleet.listed("main", marker)] == [memory_id]


def test_an_add_the_hub_refuses_at_replay_is_set_aside_said_and_audited_and_the_others_are_delivered(fleet):
    marker = f"s{uuid.uuid4().hex[:8]}"
    fleet.stop_hub()
    with fleet.client("main") as main, fleet.client("c") as c:
        first = main.add("main", _text(marker, "main", 0), visibility="private")
        refused = c.add("c", _text(marker, "c", 0), visibility="private")
        last = main.add("main", _text(marker, "main", 1), visibility="private")
    assert first["queued"] and refused["queued"] and last["queued"]
    fleet.enrol("main", "b")  # c is no longer one of spoke-1's agents on the hub
    try:
        fleet.start_hub()
        section = fleet.drained()
    finally:
        fleet.enrol(*AGENTS)
    queue = section["queue"]
    assert queue["set_aside"] == 1
    aside = queue["set_aside_recent"][0]
    assert aside["write_id"] == refused["write_id"] and aside["agent_id"] == "c" and "403" in aside["reason"]
    fleet.delivered_in_order("main", [_text(marker, "main", i) for i in range(2)], f"{marker} main note")
    events = [e for e in fleet.audit() if e.get("event") == "queued_write_set_aside"]
    assert events and events[-1]["write_id"] == refused["write_id"] and events[-1]["agent"] == "c"
    shown = run_cli("status", config=fleet.config, check=False).stdout
    assert "set aside: 1" in shown
