"""daemon/service/loop.py, stop.py and snapshot.py: a turn takes an edit to a commit; a stop commits what is left."""

from __future__ import annotations

import json
import threading
import time

from protocol.operations import Search
from tests.helpers import commits, file_at_head, wait_for


def _turns_until(d, condition, timeout: float = 20.0):
    def step():
        d.loop.turn()
        return condition()

    return wait_for(step, timeout=timeout, interval=0.05)


def test_an_edit_goes_from_its_event_to_a_commit_and_the_index_in_loop_turns(service):
    d = service.daemon
    before = len(commits(service.workspace))
    (service.workspace / "MEMORY.md").write_text("# MEMORY\nthe loop carried this persimmon\n")
    d.on_change(str(service.workspace / "MEMORY.md"), False)
    _turns_until(d, lambda: len(commits(service.workspace)) > before, timeout=30)
    assert "persimmon" in file_at_head(service.workspace, "MEMORY.md")
    assert [h["path"] for h in d.search(Search("main", "persimmon"))["results"]] == ["MEMORY.md"]
    _turns_until(d, lambda: d.status()["agents"][0]["last_commit"] is not None)


def test_a_call_from_another_thread_runs_in_the_next_turn(service):
    d = service.daemon
    answer: dict = {}
    caller = threading.Thread(target=lambda: answer.update(r=d.call_in_loop(lambda: d.reindex("main"), timeout=30)))
    caller.start()
    _turns_until(d, lambda: "r" in answer)
    caller.join(5)
    assert answer["r"]["main"]["rebuilt"] is False and answer["r"]["main"]["files"] > 0


def test_the_loop_sleeps_until_its_next_deadline(service):
    d = service.daemon
    d.loop.turn()
    assert 0.0 < d.loop.timeout() <= 30.0, "idle: until the next reconcile, at most 30 s"
    d.on_change(str(service.workspace / "MEMORY.md"), False)
    d.router.take(time.monotonic())
    assert d.loop.timeout() <= d.config.watch.debounce_ms / 1000 + 0.01, "a settling file wakes it"


def test_a_stop_makes_the_final_commits_and_saves_the_records(service):
    d = service.daemon
    before = len(commits(service.workspace))
    (service.workspace / "MEMORY.md").write_text("# MEMORY\nwritten just before SIGTERM\n")
    d.on_change(str(service.workspace / "MEMORY.md"), False)  # not even settled yet
    d.stopper.final_commits(time.monotonic() + 10)
    assert len(commits(service.workspace)) == before + 1
    assert "just before SIGTERM" in file_at_head(service.workspace, "MEMORY.md")
    record = json.loads((d.config.paths.state_dir / "agents" / "main.json").read_text())
    assert record, "the processed-files record is on disk"


def test_the_status_document_keeps_its_sections_and_summary(service):
    d = service.daemon
    d.board.publish()
    doc = d.status()
    assert set(doc) == {"daemon", "watcher", "reconcile", "limits", "vectors", "conversation", "agents", "storage"}
    assert doc["daemon"]["running"] is True and doc["daemon"]["uptime_s"] >= 0
    assert doc["daemon"]["summary"] == d.board.line and d.board.line.startswith("1 agent, ")
    assert doc["watcher"]["mode"] == "stopped" and doc["vectors"] == {"backend": "off"}
    assert doc["conversation"] == {"enabled": False, "backend": d.config.conversation.backend}
    assert [a["id"] for a in doc["agents"]] == ["main"] and "index" in doc["agents"][0]
    assert set(doc["reconcile"]) == {"time", "repaired", "duration_ms", "interval_s"}
