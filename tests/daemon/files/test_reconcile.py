"""daemon/files/reconcile.py, daemon/service/storage_retry.py: what the watcher missed is found, indexed, committed."""

from __future__ import annotations

import logging
import shutil
import time

from daemon.files.routing import MISS_GRACE_S
from protocol.operations import Search
from tests.helpers import commits


def test_reconcile_finds_a_file_the_watcher_missed_and_indexes_it(service):
    d = service.daemon
    (service.workspace / "memory").mkdir(exist_ok=True)
    (service.workspace / "memory" / "2026-11-30.md").write_text("# 2026-11-30\nthe quarterly kumquat review\n")
    d.reconciler.all()
    assert d.reconciler.last["repaired"] >= 1 and d.reconciler.last["time"]
    assert "memory/2026-11-30.md" in d.trackers["main"].files.items()
    hits = d.search(Search("main", "kumquat"))["results"]
    assert [h["path"] for h in hits] == ["memory/2026-11-30.md"], "the real index holds it"
    assert d.reconciler.next_at > 0


def test_reconcile_adds_new_workspaces_and_drops_vanished_ones(service):
    d = service.daemon
    beta = service.spoke_workspace("beta\n")
    d.reconciler.all()
    assert set(d.trackers) == {"main", "beta"}
    shutil.rmtree(beta)
    d.reconciler.all()
    assert set(d.trackers) == {"main"}


def test_a_reconciled_change_is_committed_when_its_quiet_period_has_passed(service):
    d = service.daemon
    (service.workspace / "MEMORY.md").write_text("# MEMORY\na fact found by reconcile\n")
    before = len(commits(service.workspace))
    d.reconciler.all()
    tracker = d.trackers["main"]
    deadline = tracker.commit_deadline()
    assert deadline is not None, "the change waits for its commit"
    tracker.commit(deadline)
    d.storage_retry.note_commit(tracker)
    assert len(commits(service.workspace)) == before + 1
    assert not d.storage.failing("git", "main")


def test_a_file_the_watcher_reported_is_brought_up_to_date_by_a_reconcile_and_not_counted_as_missed(service, caplog):
    d = service.daemon
    d.reconciler.all()  # the first reconcile (at start) counts what changed while the daemon was down
    path = service.workspace / "memory" / "2026-11-29.md"
    path.parent.mkdir(exist_ok=True)
    path.write_text("# 2026-11-29\nthe persimmon harvest\n")
    d.router.on_change(str(path), False)
    d.router.take(time.monotonic())  # in its debounce: the watcher saw it
    d.reconciler.all()
    assert "memory/2026-11-29.md" in d.trackers["main"].files.items(), "brought up to date all the same"
    assert d.reconciler.last["repaired"] == 0
    assert d.router.missed_due(time.monotonic() + 60) == []


def test_a_change_no_event_names_within_the_grace_is_said_to_be_missed_by_the_watcher(service, caplog):
    d = service.daemon
    d.reconciler.all()
    memory = service.workspace / "memory"
    memory.mkdir(exist_ok=True)
    (memory / "2026-11-28.md").write_text("# 2026-11-28\nno event for this one\n")
    (memory / "2026-11-27.md").write_text("# 2026-11-27\nits event comes late\n")
    d.reconciler.all()
    assert d.reconciler.last["repaired"] == 2
    d.router.on_change(str(memory / "2026-11-27.md"), False)  # the save ran during the re-check
    now = time.monotonic()
    d.router.take(now)
    assert d.router.missed_due(now) == [], "not yet: an event may still be on its way"
    missed = d.router.missed_due(now + MISS_GRACE_S + 1)
    assert missed == [("main", "memory/2026-11-28.md")]
    with caplog.at_level(logging.WARNING):
        d.reconciler.missed(missed)
    assert "the watcher missed 1 file change(s), found by a re-check: main:memory/2026-11-28.md" in caplog.text
