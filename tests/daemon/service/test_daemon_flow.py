"""The daemon as a real subprocess on a temporary root: edits end in the right git commits.

Real inotify (watchdog), real git, a real Unix socket. Every wait has a deadline;
nothing here asserts how fast anything is.
"""

from __future__ import annotations

import os
import signal
import stat
import time

from tests.helpers import (
    FAKE_API_KEY,
    FAST,
    commits,
    committed,
    file_at_head,
    git,
    init_root,
    run_cli,
    wait_for,
)


def test_plain_write_is_committed_with_a_message_naming_the_file(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    ws = tmp_path / "workspace"
    d = daemons(config)
    (ws / "memory" / "2026-11-20.md").write_text("# 2026-11-20\n\n- deployed qdrant on 6333\n")
    wait_for(lambda: committed(ws, "A", "memory/2026-11-20.md"), what="commit of the new daily file")
    newest = commits(ws)[0]
    assert "memory/2026-11-20.md" in newest["subject"]
    assert newest["subject"].startswith("memstrata: ")
    # status is published at the end of the loop turn that made the commit
    wait_for(lambda: d.agent("main")["last_commit"]["subject"] == newest["subject"], what="status names the commit")


def test_atomic_rename_save_commits_the_target_not_the_temp_file(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    ws = tmp_path / "workspace"
    daemons(config)
    tmp = ws / ".MEMORY.md.x7Qz.tmp"  # what editors and atomic writers create next to the target
    tmp.write_text("# MEMORY\n\n## Decisions\n- use Tailscale for the shared store\n")
    os.replace(tmp, ws / "MEMORY.md")
    wait_for(
        lambda: file_at_head(ws, "MEMORY.md") and "Tailscale" in file_at_head(ws, "MEMORY.md"), what="MEMORY.md commit"
    )
    assert not any(".tmp" in path for c in commits(ws) for _, path in c["changes"])


def test_delete_and_move_are_committed(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    ws = tmp_path / "workspace"
    daemons(config)
    (ws / "memory" / "2026-11-01.md").write_text("one\n")
    (ws / "memory" / "2026-11-02.md").write_text("two\n")
    wait_for(lambda: committed(ws, "A", "memory/2026-11-02.md") and committed(ws, "A", "memory/2026-11-01.md"))

    (ws / "memory" / "2026-11-01.md").unlink()
    wait_for(lambda: committed(ws, "D", "memory/2026-11-01.md"), what="commit of the deletion")

    os.rename(ws / "memory" / "2026-11-02.md", ws / "memory" / "2026-11-03.md")
    wait_for(lambda: committed(ws, "A", "memory/2026-11-03.md"), what="commit of the move")
    move = next(c for c in commits(ws) if ("A", "memory/2026-11-03.md") in c["changes"])
    assert ("D", "memory/2026-11-02.md") in move["changes"], "both ends of a move belong to one commit"


def test_moves_into_and_out_of_the_workspace(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    ws = tmp_path / "workspace"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    daemons(config)
    (outside / "2026-10-10.md").write_text("brought in\n")
    os.rename(outside / "2026-10-10.md", ws / "memory" / "2026-10-10.md")
    wait_for(lambda: committed(ws, "A", "memory/2026-10-10.md"), what="file moved in")
    os.rename(ws / "memory" / "2026-10-10.md", outside / "gone.md")
    wait_for(lambda: committed(ws, "D", "memory/2026-10-10.md"), what="file moved out")
    # a whole directory moved in arrives as one event; its files are still found
    (outside / "archive" / "2025").mkdir(parents=True)
    (outside / "archive" / "2025" / "2025-01-02.md").write_text("old\n")
    os.rename(outside / "archive", ws / "memory" / "archive")
    wait_for(lambda: committed(ws, "A", "memory/archive/2025/2025-01-02.md"), what="directory moved in")


def test_change_made_while_stopped_is_committed_after_restart(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    ws = tmp_path / "workspace"
    first = daemons(config)
    assert first.stop() == 0
    (ws / "USER.md").write_text("# USER\n\n- prefers 中文\n")
    before = len(commits(ws))
    d = daemons(config)
    wait_for(lambda: file_at_head(ws, "USER.md") == "# USER\n\n- prefers 中文\n", what="offline edit committed")
    assert len(commits(ws)) == before + 1
    assert d.status()["reconcile"]["repaired"] == 1


def test_new_agent_workspace_is_picked_up_without_restart(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    d = daemons(config)
    run_cli("agent", "add", "beta", "--project", "infra", config=config)
    wait_for(lambda: any(a["id"] == "beta" for a in d.status()["agents"]), what="beta in status")
    beta = tmp_path / "workspace" / "agents" / "beta-workspace"
    run_cli("note", "--agent", "beta", "learned the 6333 port", config=config)
    today = time.strftime("%Y-%m-%d")
    wait_for(lambda: committed(beta, "A", f"memory/{today}.md"), what="beta's note committed in beta's repository")
    # the main repository never sees a spoke's files
    assert not any("agents/" in path for c in commits(tmp_path / "workspace") for _, path in c["changes"])


def test_sigterm_commits_pending_work_and_exits_zero(tmp_path, daemons):
    config = init_root(tmp_path, watch={"debounce_ms": 100}, git={"quiet_period_s": 120, "max_delay_s": 600})
    ws = tmp_path / "workspace"
    d = daemons(config)
    (ws / "memory" / "2026-11-21.md").write_text("pending at shutdown\n")
    wait_for(lambda: d.agent("main")["pending_commit"], what="change seen, commit pending")
    assert not committed(ws, "A", "memory/2026-11-21.md")
    assert d.stop() == 0
    assert committed(ws, "A", "memory/2026-11-21.md")
    assert "stopped" in d.log()


def test_file_with_a_secret_is_held_back_and_named_never_echoed(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    ws = tmp_path / "workspace"
    d = daemons(config)
    (ws / "memory" / "2026-11-22.md").write_text(f"# notes\n\nthe key is {FAKE_API_KEY}\n")
    (ws / "memory" / "2026-11-23.md").write_text("clean note\n")
    wait_for(lambda: committed(ws, "A", "memory/2026-11-23.md"), what="the clean file is committed")
    held = wait_for(lambda: d.agent("main")["held_back"], what="held-back report")
    assert held == [{"path": "memory/2026-11-22.md", "line": 3, "kind": "api_key"}]
    assert not committed(ws, "A", "memory/2026-11-22.md")
    assert "memory/2026-11-22.md" not in git(ws, "ls-files")
    human = run_cli("status", config=config).stdout
    assert "HELD BACK" in human and "memory/2026-11-22.md line 3" in human
    assert FAKE_API_KEY not in human and FAKE_API_KEY not in d.log()
    assert "memory/2026-11-22.md" in d.log()
    # fixing the file releases it
    (ws / "memory" / "2026-11-22.md").write_text("# notes\n\nthe key lives in the vault\n")
    wait_for(lambda: committed(ws, "A", "memory/2026-11-22.md"), what="fixed file committed")
    # status is the loop's last published snapshot: it may trail the commit by one turn
    wait_for(lambda: d.agent("main")["held_back"] == [], what="the held-back report cleared")


def test_socket_is_0660_and_status_works_with_the_daemon_down(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    d = daemons(config)
    assert stat.S_IMODE(d.socket.stat().st_mode) == 0o660
    up = run_cli("status", "--json", config=config)
    assert up.returncode == 0
    assert d.stop() == 0
    assert not d.socket.exists()
    down = run_cli("status", config=config, check=False)
    assert down.returncode == 3
    assert "daemon NOT running" in down.stdout
    assert "main" in down.stdout and "last commit" in down.stdout


def test_stale_index_lock_is_removed_and_a_fresh_one_waited_for(tmp_path, daemons):
    config = init_root(tmp_path, watch={"debounce_ms": 100}, git={"quiet_period_s": 0.2, "stale_lock_s": 30})
    ws = tmp_path / "workspace"
    lock = ws / ".git" / "index.lock"
    lock.write_text("")
    old = time.time() - 3600
    os.utime(lock, (old, old))  # left by a git that crashed an hour ago
    d = daemons(config)
    (ws / "memory" / "2026-11-24.md").write_text("after a crash\n")
    wait_for(lambda: committed(ws, "A", "memory/2026-11-24.md"), what="commit despite the stale lock")
    # the stale lock is gone (the daemon's own git may hold a fresh one a moment after its commit)
    wait_for(lambda: not lock.exists(), timeout=10, what="the stale lock removed")
    assert "stale" in d.log()

    lock.write_text("")  # a git at work right now: wait, do not delete
    (ws / "memory" / "2026-11-25.md").write_text("while locked\n")
    wait_for(lambda: d.agent("main")["last_error"], what="the busy repository is reported")
    assert "index.lock" in d.agent("main")["last_error"]
    assert lock.exists(), "a fresh lock belongs to another git and is left alone"
    lock.unlink()
    wait_for(lambda: committed(ws, "A", "memory/2026-11-25.md"), what="commit after the lock is released")
    wait_for(lambda: d.agent("main")["last_error"] is None, what="error cleared")


def test_missing_repository_is_initialised(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    run_cli("agent", "add", "gamma", config=config)
    gamma = tmp_path / "workspace" / "agents" / "gamma-workspace"
    import shutil

    shutil.rmtree(gamma / ".git")
    daemons(config)
    wait_for(lambda: (gamma / ".git").exists() and committed(gamma, "A", "MEMORY.md"), what="repository re-created")
    assert "agents/gamma-workspace" not in git(tmp_path / "workspace", "ls-files")


def test_sighup_reloads_configuration_and_keeps_it_when_broken(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    ws = tmp_path / "workspace"
    d = daemons(config)
    text = config.read_text()
    config.write_text(
        text.replace("never_store:\n", "never_store:\n  - name: codename\n    pattern: PROJECT-BLUEBIRD\n", 1)
    )
    d.signal(signal.SIGHUP)
    wait_for(lambda: "configuration reloaded" in d.log(), what="reload")
    (ws / "memory" / "2026-11-26.md").write_text("the PROJECT-BLUEBIRD plan\n")
    wait_for(lambda: d.agent("main")["held_back"], what="new pattern applied after reload")
    assert d.agent("main")["held_back"][0]["kind"] == "codename"

    config.write_text(config.read_text() + "\nbogus_section: 1\n")
    d.signal(signal.SIGHUP)
    wait_for(lambda: "reload failed" in d.log(), what="a broken file is refused")
    assert "bogus_section" in d.log()
    assert d.status()["daemon"]["running"]


def test_old_daily_files_are_archived_with_a_git_move_when_enabled(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, daily={"archive_after_days": 30})
    ws = tmp_path / "workspace"
    (ws / "memory" / "2020-03-04.md").write_text("very old\n")
    git(ws, "add", "memory/2020-03-04.md")
    git(ws, "commit", "-qm", "a person's own commit")
    today = time.strftime("%Y-%m-%d")
    (ws / "memory" / f"{today}.md").write_text("today\n")
    daemons(config)
    wait_for(lambda: committed(ws, "A", "memory/archive/2020/2020-03-04.md"), what="archive commit")
    assert (ws / "memory" / "archive" / "2020" / "2020-03-04.md").read_text() == "very old\n"
    assert (ws / "memory" / f"{today}.md").exists(), "recent files stay"
    history = run_cli("history", "--agent", "main", "memory/archive/2020/2020-03-04.md", config=config).stdout
    assert "a person's own commit" in history, "history follows the file across the move"
