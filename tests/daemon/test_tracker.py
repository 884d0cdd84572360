"""daemon/tracker.py: one agent's files, held-back secrets and batched commits, on a real git workspace."""

from __future__ import annotations

import pytest

from daemon.config import load_config
from daemon.wiring import guard_from, make_tracker, settings_from
from daemon.workspaces import discover
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
