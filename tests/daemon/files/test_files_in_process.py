"""The files room's in-process tests: the watcher, the tracker, its record, the committer and provisioning.

Each part is called directly on a root ``memstrata init`` made (tests/daemon/conftest.py):
real inotify and polling observers, real git in the workspace, the record as a
real file, the committer's real worker threads.  tests/daemon/service/test_daemon_flow.py
takes the same paths through a daemon subprocess.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from daemon.common.config import load_config
from daemon.common.settings import guard_from
from daemon.common.tokens import TokenStore
from daemon.common.workspaces import get_agent
from daemon.files.committer import Committer
from daemon.files.starting import StartProgress
from daemon.files.tracker import make_tracker
from daemon.files.watcher import Watcher
from tests.helpers import FAKE_API_KEY, commits, committed, file_at_head, wait_for


@pytest.fixture
def config(service_root):
    return load_config(service_root)


def _tracker(config, record: Path | None = None):
    """The main agent's tracker, its workspace first brought in step (the start's reconcile and commit)."""
    tracker = make_tracker(config, get_agent(config, "main"), guard_from(config), record)
    tracker.reconcile()
    if tracker.pending:
        tracker.commit()
    return tracker


# ---------------------------------------------------------------- the watcher


@pytest.mark.parametrize("mode", ["inotify", "polling"])
def test_the_watcher_reports_changed_paths_and_leaves_out_git_objects(tmp_path, mode):
    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    (workspace / ".git" / "objects").mkdir(parents=True)
    seen: list[str] = []
    lock = threading.Lock()

    def on_change(path: str, is_directory: bool) -> None:
        with lock:
            seen.append(path)

    watcher = Watcher([workspace], on_change, mode, poll_interval=0.1)
    watcher.start()
    try:
        assert watcher.mode == mode and watcher.healthy()
        (workspace / ".git" / "objects" / "ab").write_text("an object")
        (workspace / "memory" / "2026-12-01.md").write_text("# note\n")
        (workspace / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        wait_for(lambda: str(workspace / ".git" / "HEAD") in seen, timeout=20, what="the events arrive")
        wait_for(lambda: str(workspace / "memory" / "2026-12-01.md") in seen, timeout=20, what="the note's event")
        with lock:
            assert not [p for p in seen if "/objects/" in p], "git's object writes are noise"
    finally:
        watcher.stop()
    assert watcher.mode == "stopped" and not watcher.healthy()


# ---------------------------------------------------------------- the tracker


def test_a_deleted_file_is_committed_and_leaves_the_record(config):
    tracker = _tracker(config)
    ws = tracker.workspace
    (ws / "memory" / "2026-11-29.md").write_text("# gone soon\n")
    tracker.process("memory/2026-11-29.md")
    tracker.commit()
    assert "memory/2026-11-29.md" in tracker.files.paths()
    (ws / "memory" / "2026-11-29.md").unlink()
    assert tracker.process("memory/2026-11-29.md") is True
    assert "memory/2026-11-29.md" not in tracker.files.paths() and tracker.pending
    tracker.commit()
    assert committed(ws, "D", "memory/2026-11-29.md") and not tracker.pending


def test_a_secret_removed_from_a_held_back_file_lets_it_be_committed(config):
    tracker = _tracker(config)
    ws = tracker.workspace
    (ws / "USER.md").write_text(f"# USER\ntoken {FAKE_API_KEY}\n")
    tracker.process("USER.md")
    tracker.commit()
    assert [h["path"] for h in tracker.report()["held_back"]] == ["USER.md"]
    assert FAKE_API_KEY not in (file_at_head(ws, "USER.md") or "")
    (ws / "USER.md").write_text("# USER\nthe token lives in the vault\n")
    tracker.process("USER.md")
    tracker.commit()
    assert tracker.report()["held_back"] == [] and "USER.md" not in tracker.withheld
    assert file_at_head(ws, "USER.md") == "# USER\nthe token lives in the vault\n"


def test_what_is_never_read_or_never_indexed_is_said_in_the_report(config, tmp_path):
    tracker = _tracker(config)
    ws = tracker.workspace
    outside = tmp_path / "outside.md"
    outside.write_text("another agent's words\n")
    os.symlink(outside, ws / "memory" / "2026-11-28.md")
    (ws / "memory" / "2026-11-27.md").write_bytes(b"# latin-1 \xe9t\xe9\n")
    (ws / "memory" / "notes-from-the-call.md").write_text("# oddly named\n")
    for rel in ("memory/2026-11-28.md", "memory/2026-11-27.md", "memory/notes-from-the-call.md"):
        tracker.process(rel)
    tracker.commit()
    report = tracker.report()
    skipped = {s["path"]: s["reason"] for s in report["skipped"]}
    assert "symbolic link" in skipped["memory/2026-11-28.md"]
    assert {"path": "memory/2026-11-27.md", "reason": "not valid UTF-8: versioned, not indexed"} in report[
        "not_indexed"
    ]
    assert committed(ws, "A", "memory/2026-11-27.md"), "versioned all the same"
    assert not committed(ws, "A", "memory/2026-11-28.md"), "a symlink is never committed"
    assert report["naming_violations"] == ["memory/notes-from-the-call.md"]


def test_the_offline_survey_reports_without_writing_or_committing(config):
    tracker = _tracker(config)
    ws = tracker.workspace
    head = commits(ws)[0]["sha"]
    (ws / "MEMORY.md").write_text("# MEMORY\nedited while the daemon was down\n")
    (ws / "TOOLS.md").write_text(f"# TOOLS\n{FAKE_API_KEY}\n")
    survey = make_tracker(config, tracker.agent, guard_from(config), record=None)
    survey.survey()
    report = survey.report()
    assert report["pending_commit"] is True
    assert [h["path"] for h in report["held_back"]] == ["TOOLS.md"]
    assert commits(ws)[0]["sha"] == head, "nothing committed"


def test_the_record_survives_a_restart_and_reconcile_finds_what_changed_meanwhile(config):
    record = config.paths.state_dir / "agents" / "main.json"
    first = _tracker(config, record)
    assert record.is_file() and stat.S_IMODE(record.stat().st_mode) == 0o600, "the record names every memory file"
    assert stat.S_IMODE(record.parent.stat().st_mode) == 0o700

    again = _tracker(config, record)  # a restart with nothing changed
    assert again.files.items() == first.files.items() and again.reconcile() == 0

    (first.workspace / "MEMORY.md").write_text("# MEMORY\nwritten while the daemon was stopped\n")
    restarted = make_tracker(config, first.agent, guard_from(config), record)
    assert restarted.reconcile() == 1, "one repair: the file the watcher could not see"
    assert restarted.pending


# ---------------------------------------------------------------- the committer


def test_the_committer_runs_git_off_the_calling_thread_and_hands_back_what_it_did(config):
    tracker = _tracker(config)
    (tracker.workspace / "MEMORY.md").write_text("# MEMORY\ncommitted by a worker\n")
    tracker.process("MEMORY.md")
    woken = threading.Event()
    committer = Committer(woken.set)
    try:
        assert committer.start(tracker) is True
        assert committer.start(tracker) is False, "one commit per agent at a time"
        assert tracker.committing is not None and tracker.report()["committing"] is not None
        assert committer.wait(time.monotonic() + 30), "the job ended"
        assert woken.wait(5), "the loop is woken to apply it"
        assert committer.collect() == [tracker]
    finally:
        committer.close()
    assert tracker.committing is None and not tracker.pending
    assert file_at_head(tracker.workspace, "MEMORY.md") == "# MEMORY\ncommitted by a worker\n"
    assert tracker.report()["last_commit"]["subject"].startswith("memstrata:")


# ---------------------------------------------------------------- agents, provisioning, the start


def test_a_new_spoke_is_provisioned_with_git_a_private_token_and_the_skill(service):
    d = service.daemon
    beta = service.spoke_workspace("# beta\n")
    d.reconciler.all()
    tracker = d.agents.get("beta")
    assert tracker is not None and (beta / ".git").is_dir()
    token = beta / ".memstrata" / "token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and stat.S_IMODE(token.parent.stat().st_mode) == 0o700
    assert TokenStore(d.config.paths.state_dir).identify(token.read_text().strip()) == "beta"
    assert (beta / "skills" / "mem0-integration" / "memstrata-install.json").is_file()
    assert d.agents.agent_of("beta") == tracker.agent and d.agents.agent_of("nobody") is None


def test_a_token_path_that_is_a_symlink_is_refused_and_shown(service, tmp_path):
    d = service.daemon
    beta = service.spoke_workspace("# beta\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, beta / ".memstrata")
    d.reconciler.all()
    refused = d.agents.get("beta").report()["refused"]
    assert [r["path"] for r in refused] == [".memstrata"] and "no API token written" in refused[0]["reason"]
    assert list(elsewhere.iterdir()) == [], "nothing written through it"


def test_the_start_progress_counts_every_file_and_says_where_it_is(service):
    trackers = service.daemon.agents.all()
    progress = StartProgress.of(trackers)
    files = len(trackers[0].paths_under(""))
    assert progress.total == files > 0
    assert progress.describe() == f"starting: 0 of {files:,} files checked"
    service.daemon.reconciler.all(progress)
    report = progress.report()
    assert report["checked"] == files and report["agent"] == "main" and report["step"] == "indexing"
    assert report["text"].startswith(f"starting: {files:,} of {files:,} files checked")
