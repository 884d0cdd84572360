"""daemon/files/tracker.py: one agent's files, held-back secrets and batched commits, on a real git workspace."""

from __future__ import annotations

import pytest

from daemon.common.config import load_config
from daemon.common.guard import SecretGuard
from daemon.common.settings import guard_from
from daemon.common.workspaces import discover
from daemon.files.tracker import make_tracker, settings_from
from tests.helpers import FAKE_API_KEY, commits, file_at_head


@pytest.fixture
def tracker(service_root):
    config = load_config(service_root)
    (main,) = [a for a in discover(config) if a.id == "main"]
    t = make_tracker(config, main, guard_from(config), None)
    t.reconcile()
    if t.pending:
        t.commit()
    return t


def test_edits_are_committed_in_one_batch(tracker):
    ws = tracker.workspace
    before = len(commits(ws))
    (ws / "memory").mkdir(exist_ok=True)
    (ws / "memory" / "2026-11-30.md").write_text("# 2026-11-30\none\n")
    (ws / "MEMORY.md").write_text("# MEMORY\ntwo\n")
    assert tracker.process("memory/2026-11-30.md") and tracker.process("MEMORY.md")
    assert tracker.pending and tracker.commit_deadline() is not None
    info = tracker.commit()
    assert info is not None and len(commits(ws)) == before + 1
    assert file_at_head(ws, "memory/2026-11-30.md") == "# 2026-11-30\none\n"
    assert not tracker.pending and tracker.report()["last_commit"]["sha"] == info.short


def test_a_file_holding_a_secret_is_held_back_and_withheld(tracker):
    ws = tracker.workspace
    (ws / "MEMORY.md").write_text(f"# MEMORY\nthe key is {FAKE_API_KEY}\n")
    tracker.process("MEMORY.md")
    assert "MEMORY.md" in tracker.withheld, "never indexed"
    tracker.commit()
    assert FAKE_API_KEY not in (file_at_head(ws, "MEMORY.md") or ""), "never committed"
    held = tracker.report()["held_back"]
    assert held and held[0]["path"] == "MEMORY.md" and FAKE_API_KEY not in str(held)


def test_reconfigure_applies_a_new_guard_and_settings(tracker, service_root):
    config = load_config(service_root)
    guard = guard_from(config)
    tracker.reconfigure(guard, settings_from(config), 99.0)
    assert tracker.guard is guard and tracker.repo.stale_lock_s == 99.0


def test_a_secret_written_after_the_edit_flow_looked_is_held_back_by_the_staged_check(tracker):
    ws = tracker.workspace
    (ws / "memory" / "2026-12-01.md").write_text("# clean so far\n")
    tracker.process("memory/2026-12-01.md")
    assert "memory/2026-12-01.md" not in tracker.withheld
    with (ws / "memory" / "2026-12-01.md").open("a") as fh:  # no event processed since: the verdict is stale
        fh.write(f"the key is {FAKE_API_KEY}\n")
    tracker.commit()
    assert file_at_head(ws, "memory/2026-12-01.md") is None, "never committed"
    assert [h["path"] for h in tracker.report()["held_back"]] == ["memory/2026-12-01.md"]


def test_a_reload_while_a_commit_runs_applies_to_what_it_stages_after(tracker, service_root):
    """The commit began with the old patterns; a file written after the reload is checked with the new ones."""
    ws = tracker.workspace
    config = load_config(service_root)
    job = tracker.begin_commit()
    patterns = [*config.guard.never_store, ("codename", "PROJECT-KESTREL")]
    tracker.reconfigure(SecretGuard(patterns), settings_from(config), 60.0)
    (ws / "memory" / "2026-12-02.md").write_text("the PROJECT-KESTREL plan\n")
    tracker.finish_commit(job, job())
    assert file_at_head(ws, "memory/2026-12-02.md") is None
    assert tracker.report()["held_back"] == [{"path": "memory/2026-12-02.md", "line": 1, "kind": "codename"}]
