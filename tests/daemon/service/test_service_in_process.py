"""The service room's in-process tests: the composed MemoryDaemon driven through its public face.

The daemon is built on a real root (tests/daemon/conftest.py) without its socket,
watcher or threads: the watcher's events are handed to ``on_change``, the loop is
turned by hand (``loop.turn``), and reload, shutdown and the offline reindex are
called as ``memstrata run`` and ``memstrata reindex`` call them.  systemd's side
of the notify protocol is a real datagram socket the test reads.  The parts'
own constructors are not used here: only MemoryDaemon and what it exposes.
tests/daemon/service/test_daemon_flow.py runs the whole daemon as a subprocess.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import uuid
from collections.abc import Iterator

import pytest

from daemon.common.config import load_config
from daemon.common.domain_errors import DaemonError
from daemon.front.status import offline_status
from daemon.service.memory_daemon import MemoryDaemon
from daemon.service.notify import Notifier
from protocol.operations import Search
from tests.daemon.conftest import Service
from tests.helpers import FAKE_API_KEY, commits, committed, file_at_head, wait_for


def _turns_until(d: MemoryDaemon, condition, timeout: float = 30.0):
    """Turn the loop until ``condition()`` holds (a deadline, never a sleep to assert on)."""

    def step():
        d.loop.turn()
        return condition()

    return wait_for(step, timeout=timeout, interval=0.05)


class Systemd:
    """The receiving end of sd_notify: an abstract datagram socket, read after each step."""

    def __init__(self) -> None:
        self.name = f"memstrata-test-{uuid.uuid4().hex}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + self.name)
        self.sock.setblocking(False)

    @property
    def notifier(self) -> Notifier:
        return Notifier({"NOTIFY_SOCKET": "@" + self.name})

    def messages(self) -> list[str]:
        out = []
        while True:
            try:
                out.append(self.sock.recv(65536).decode())
            except BlockingIOError:
                return out

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def systemd() -> Iterator[Systemd]:
    s = Systemd()
    yield s
    s.close()


@pytest.fixture
def notified(service_root, systemd) -> Iterator[Service]:
    """A service whose notifier talks to the test's socket."""
    s = Service(service_root.parent, service_root, systemd.notifier).open()
    yield s
    s.close()


# ---------------------------------------------------------------- the loop


def test_a_deleted_file_goes_from_its_event_to_a_commit_and_out_of_the_index(service):
    d = service.daemon
    note = service.workspace / "memory" / "2026-11-26.md"
    note.write_text("# 2026-11-26\nthe carambola delivery\n")
    d.on_change(str(note), False)
    _turns_until(d, lambda: committed(service.workspace, "A", "memory/2026-11-26.md"))
    _turns_until(d, lambda: d.search(Search("main", "carambola"))["results"] != [])
    note.unlink()
    d.on_change(str(note), False)
    _turns_until(d, lambda: committed(service.workspace, "D", "memory/2026-11-26.md"))
    assert d.search(Search("main", "carambola"))["results"] == []


def test_a_file_holding_a_secret_is_held_back_unsearchable_and_said_in_the_summary(service):
    d = service.daemon
    tools = service.workspace / "TOOLS.md"
    before = file_at_head(service.workspace, "TOOLS.md")
    tools.write_text(f"# TOOLS\nthe durian api key is {FAKE_API_KEY}\n")
    d.on_change(str(tools), False)
    _turns_until(d, lambda: d.status()["agents"][0]["held_back"] != [])
    (main_agent,) = d.status()["agents"]
    assert main_agent["held_back"][0]["path"] == "TOOLS.md" and FAKE_API_KEY not in json.dumps(main_agent)
    assert d.status()["daemon"]["summary"].endswith(", 1 held back")
    assert d.search(Search("main", "durian"))["results"] == [], "never indexed"
    assert file_at_head(service.workspace, "TOOLS.md") == before, "never committed"


def test_a_new_spoke_found_by_its_first_event_is_watched_indexed_and_committed(service):
    d = service.daemon
    beta = service.spoke_workspace("# beta\nthe breadfruit list\n")
    d.on_change(str(beta / "MEMORY.md"), False)
    _turns_until(d, lambda: "beta" in d.trackers and bool(commits(beta)))
    _turns_until(d, lambda: [h["path"] for h in d.search(Search("beta", "breadfruit"))["results"]] == ["MEMORY.md"])
    assert [a["id"] for a in d.status()["agents"]] == ["main", "beta"]


def test_before_the_first_publish_the_status_says_the_daemon_is_starting(service_root):
    s = Service(service_root.parent, service_root)  # built, not yet opened: nothing published
    try:
        early = s.daemon.status()
        assert early["daemon"]["running"] is True and early["daemon"]["starting"]["text"] == "starting"
        assert "agents" not in early, "agents are shown once every workspace has been checked"
        assert early["watcher"]["mode"] == "starting"
    finally:
        s.daemon.release()


# ---------------------------------------------------------------- reload and stop, as systemd sees them


def test_a_reload_is_announced_and_ends_ready_with_the_summary(notified, systemd):
    d = notified.daemon
    d.board.publish()
    systemd.messages()
    d.reload()
    said = systemd.messages()
    assert said[0] == "RELOADING=1"
    assert said[-1].startswith("READY=1\nSTATUS=1 agent, ") and f"MAINPID={os.getpid()}" in said[-1]


def test_a_shutdown_makes_the_final_commit_and_leaves_its_last_status_for_the_offline_survey(notified, systemd):
    d = notified.daemon
    d.board.publish()
    systemd.messages()
    (notified.workspace / "MEMORY.md").write_text("# MEMORY\nwritten just before the stop\n")
    d.on_change(str(notified.workspace / "MEMORY.md"), False)  # not even settled yet
    d.shutdown()
    said = systemd.messages()
    assert said[0] == "STOPPING=1\nSTATUS=stopping: final commits"
    assert "written just before the stop" in file_at_head(notified.workspace, "MEMORY.md")
    assert d.status()["daemon"]["running"] is False
    survey = offline_status(load_config(notified.config_path), "no daemon socket")
    assert survey["daemon"]["last_seen"], "the stop's time, saved for `memstrata status`"
    assert survey["agents"][0]["pending_commit"] is False


# ---------------------------------------------------------------- the offline paths (`memstrata reindex`)


def test_an_offline_reindex_waits_for_no_one_and_rebuilds_when_the_state_is_free(service, service_root):
    offline = MemoryDaemon(load_config(service_root))
    try:
        with pytest.raises(DaemonError, match=r"\(tests\) is already running"):
            offline.offline_prepare()  # the service holds the state
    finally:
        offline.release()
    (service.workspace / "MEMORY.md").write_text("# MEMORY\nthe rollinia seeds\n")
    service.close()

    offline = MemoryDaemon(load_config(service_root))
    try:
        offline.offline_prepare()
        answer = offline.reindex(None, rebuild=True)
        assert answer["main"]["rebuilt"] is True and answer["main"]["files"] > 0
        assert [h["path"] for h in offline.search(Search("main", "rollinia"))["results"]] == ["MEMORY.md"]
        record = json.loads((service_root.parent / "state" / "agents" / "main.json").read_text())
        new = hashlib.sha256((service.workspace / "MEMORY.md").read_bytes()).hexdigest()
        assert record["files"]["MEMORY.md"] != new, "records stay in memory: the next start still sees the change"
    finally:
        offline.indexer.close()
        offline.release()
