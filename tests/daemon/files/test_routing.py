"""daemon/files/routing.py: where a file event goes, on a real root (real workspaces, git, index)."""

from __future__ import annotations

import shutil
import time


def test_an_event_for_a_memory_file_settles_after_the_debounce(service):
    router = service.daemon.router
    router.on_change(str(service.workspace / "memory" / "2026-11-30.md"), False)
    now = time.monotonic()
    assert router.take(now) is False  # no agent dropped
    assert router.waiting and router.settling
    assert router.pop_due(now) == [], "still inside watch.debounce_ms"
    assert router.pop_due(now + 1.0) == [("main", "memory/2026-11-30.md")]
    assert not router.waiting


def test_an_event_for_a_file_outside_the_memory_paths_goes_nowhere(service):
    router = service.daemon.router
    router.on_change(str(service.workspace / "notes.txt"), False)
    router.on_change(str(service.root / "elsewhere" / "MEMORY.md"), False)
    router.take(time.monotonic())
    assert router.pop_all() == []


def test_a_directory_event_stands_for_the_memory_files_under_it(service):
    memory = service.workspace / "memory"
    memory.mkdir(exist_ok=True)
    (memory / "2026-11-29.md").write_text("one\n")
    (memory / "2026-11-30.md").write_text("two\n")
    router = service.daemon.router
    router.on_change(str(memory), True)
    router.take(time.monotonic())
    assert sorted(router.pop_all()) == [("main", "memory/2026-11-29.md"), ("main", "memory/2026-11-30.md")]


def test_a_new_spoke_workspace_is_found_by_its_first_event_and_reconciled_whole(service):
    d = service.daemon
    beta = d.config.paths.agents_dir / "beta-workspace"
    (beta / "memory").mkdir(parents=True)
    (beta / "MEMORY.md").write_text("# beta\nthe beta agent remembers qdrant\n")
    d.router.on_change(str(beta / "MEMORY.md"), False)
    d.router.take(time.monotonic())
    assert "beta" in d.trackers, "discovered on its first event"
    assert d.router.pop_all() == [], "its files were covered by the reconcile, not debounced one by one"
    tracker = d.trackers["beta"]
    assert "MEMORY.md" in tracker.files.items()
    assert (beta / ".memstrata" / "token").is_file(), "provisioned: it got its API token"
    assert (beta / ".git").is_dir(), "provisioned: its git repository"


def test_an_event_under_a_name_that_is_gone_asks_for_an_early_reconcile(service):
    router = service.daemon.router
    router.on_change(str(service.daemon.config.paths.agents_dir / "beta-tmp123" / "MEMORY.md"), False)
    before = time.monotonic()
    router.take(before)
    assert router.recheck_at is not None and router.recheck_at > before
    assert router.recheck_due(router.recheck_at) and router.recheck_at is None


def test_a_workspace_that_disappeared_is_dropped_at_its_next_event(service):
    d = service.daemon
    beta = service.spoke_workspace("beta\n")
    d.reconciler.all()
    assert "beta" in d.trackers
    shutil.rmtree(beta)
    d.router.on_change(str(beta / "MEMORY.md"), False)
    assert d.router.take(time.monotonic()) is True, "an agent was dropped: the status changes"
    assert "beta" not in d.trackers
    assert d.indexer.report("beta") == {"state": "not open"}, "its index connection was closed and forgotten"


def test_a_settled_file_written_again_before_its_turn_settles_again_and_the_loop_goes_on(service):
    """Under load (issue 51's soak) the daemon exited with 'generator raised StopIteration': an agent's
    only settled file, written again before the loop reached it, left an empty queue behind."""
    router = service.daemon.router
    path = str(service.workspace / "memory" / "2026-11-30.md")
    other = str(service.workspace / "memory" / "2026-11-29.md")
    now = time.monotonic()
    router.on_change(path, False)
    router.take(now)
    router.settle(now + 1.0)  # settled, waiting for its turn (the loop's budget ran out)
    router.on_change(path, False)  # written again meanwhile
    router.take(now + 1.0)
    assert list(router.ready()) == [], "nothing settled now: it waits for its debounce again"
    router.on_change(other, False)
    router.take(now + 1.0)
    assert router.pop_due(now + 5.0) == [("main", "memory/2026-11-30.md"), ("main", "memory/2026-11-29.md")]
