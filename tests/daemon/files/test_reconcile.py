"""daemon/files/reconcile.py, daemon/service/storage_retry.py: what the watcher missed is found, indexed, committed."""

from __future__ import annotations

import shutil

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
