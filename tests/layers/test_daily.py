"""L2: daily-file convention, archiving plan, and the workspace repository (real git)."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import date, datetime

import pytest

from layers.daily import workspace_repo as daily


def _git(ws, *args):
    return subprocess.run(["git", "-C", str(ws), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path):
    ws = tmp_path / "ws"
    r = daily.WorkspaceRepo(ws, ("memstrata", "memstrata@localhost"), stale_lock_s=30)
    assert r.ensure() is True
    assert r.ensure() is False
    return r


def test_append_note_creates_the_day_file_with_heading(tmp_path):
    now = datetime(2026, 11, 29, 14, 3, 12)
    path = daily.append_note(tmp_path, "first", now)
    daily.append_note(tmp_path, "second\nwith detail", now)
    assert path == tmp_path / "memory" / "2026-11-29.md"
    assert path.read_text() == "# 2026-11-29\n\n- 14:03:12 first\n- 14:03:12 second\n  with detail\n"
    with pytest.raises(ValueError):
        daily.append_note(tmp_path, "   ", now)


def test_append_note_repairs_a_missing_final_newline(tmp_path):
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "2026-11-29.md").write_text("# hand written")
    daily.append_note(tmp_path, "x", datetime(2026, 11, 29, 9, 0, 0))
    assert (tmp_path / "memory" / "2026-11-29.md").read_text() == "# hand written\n- 09:00:00 x\n"


def test_naming_violations_are_reported_and_nothing_is_renamed(tmp_path):
    mem = tmp_path / "memory"
    (mem / "archive" / "2025").mkdir(parents=True)
    for name in ("2026-11-29.md", "notes.md", "2026-13-01.md", "2026-11-29.txt", "26-11-29.md"):
        (mem / name).write_text("x")
    (mem / "archive" / "2025" / "2025-03-01.md").write_text("x")
    (mem / "archive" / "2025" / "2024-03-01.md").write_text("x")  # wrong year folder
    assert daily.naming_violations(tmp_path) == [
        "memory/2026-11-29.txt",
        "memory/2026-13-01.md",
        "memory/26-11-29.md",
        "memory/notes.md",
        "memory/archive/2025/2024-03-01.md",
    ]
    assert (mem / "notes.md").exists()


def test_a_memory_dir_that_is_a_symlink_reports_no_names_from_where_it_leads(tmp_path):
    """``memory -> /etc`` made status list a hundred "naming" problems named after /etc's files."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "passwd").write_text("x")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "memory").symlink_to(elsewhere)
    assert daily.naming_violations(ws) == []


def test_archive_plan_moves_only_old_conventional_files(tmp_path):
    mem = tmp_path / "memory"
    mem.mkdir()
    for name in ("2026-01-01.md", "2026-11-20.md", "notes.md"):
        (mem / name).write_text("x")
    plan = daily.archive_plan(tmp_path, 30, date(2026, 11, 29))
    assert plan == [("memory/2026-01-01.md", "memory/archive/2026/2026-01-01.md")]


def test_commit_takes_only_the_given_paths_and_leaves_staged_work_alone(repo):
    ws = repo.path
    (ws / "MEMORY.md").write_text("m\n")
    (ws / "notes-of-a-person.txt").write_text("p\n")
    _git(ws, "add", "notes-of-a-person.txt")  # a person's staged work
    changes = repo.changes(["MEMORY.md", "memory"])
    assert changes == [daily.Change("MEMORY.md", "added")]
    info = repo.commit(["MEMORY.md"], daily.commit_message(changes))
    assert info is not None and info.subject == "memstrata: update MEMORY.md"
    assert _git(ws, "show", "--name-only", "--format=", "HEAD").split() == ["MEMORY.md"]
    assert "A  notes-of-a-person.txt" in _git(ws, "status", "--porcelain")
    assert repo.commit(["MEMORY.md"], "nothing") is None


def test_commit_records_deletions(repo):
    ws = repo.path
    (ws / "memory").mkdir()
    (ws / "memory" / "2026-11-01.md").write_text("x\n")
    repo.commit(["memory/2026-11-01.md"], "add")
    (ws / "memory" / "2026-11-01.md").unlink()
    changes = repo.changes(["memory"])
    assert changes == [daily.Change("memory/2026-11-01.md", "deleted")]
    repo.commit([c.path for c in changes], daily.commit_message(changes))
    assert "memory/2026-11-01.md" not in _git(ws, "ls-files")


def test_stale_lock_is_removed_once_and_a_fresh_lock_is_busy(repo):
    ws = repo.path
    lock = ws / ".git" / "index.lock"
    (ws / "MEMORY.md").write_text("m\n")
    lock.write_text("")
    with pytest.raises(daily.RepoBusyError):
        repo.commit(["MEMORY.md"], "blocked")
    assert lock.exists()
    old = time.time() - 120
    os.utime(lock, (old, old))
    assert repo.commit(["MEMORY.md"], "after stale lock") is not None
    assert not lock.exists()


def test_log_follows_renames_and_read_at_returns_old_content(repo):
    ws = repo.path
    (ws / "memory").mkdir()
    (ws / "memory" / "2020-01-01.md").write_text("v1\n")
    first = repo.commit(["memory/2020-01-01.md"], "v1")
    moved = repo.move("memory/2020-01-01.md", "memory/archive/2020/2020-01-01.md", "archive")
    assert moved is not None and repo.changes(["memory"]) == [], "the move is one commit, nothing left staged"
    history = repo.log("memory/archive/2020/2020-01-01.md")
    assert [c.subject for c in history] == ["archive", "v1"]
    assert repo.read_at(first.sha, "memory/2020-01-01.md") == b"v1\n"
    with pytest.raises(ValueError):
        repo.resolve("--all")
    with pytest.raises(ValueError):
        repo.read_at(first.sha, "nope.md")


def test_head_of_an_empty_repository_is_none(repo):
    assert repo.head() is None
    assert repo.log() == []


def test_exclude_adds_its_line_once_and_never_writes_through_a_symlink(repo, tmp_path):
    """``.memstrata/`` kept out of an agent's repository through ``.git/info/exclude`` (issue 49), the
    user's own lines kept; a ``.git/info`` the agent turned into a symlink is refused, nothing written."""
    exclude = repo.path / ".git" / "info" / "exclude"
    exclude.parent.mkdir(exist_ok=True)
    exclude.write_text("# the user's own\n*.bak")
    assert repo.exclude("/.memstrata/")
    assert not repo.exclude("/.memstrata/"), "once"
    assert exclude.read_text() == "# the user's own\n*.bak\n/.memstrata/\n"
    (repo.path / ".memstrata").mkdir()
    (repo.path / ".memstrata" / "token").write_text("secret\n")
    assert ".memstrata" not in _git(repo.path, "status", "--porcelain")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = daily.WorkspaceRepo(tmp_path / "other", ("t", "t@example.org"))
    other.ensure()
    info = other.path / ".git" / "info"
    subprocess.run(["rm", "-rf", str(info)], check=True)
    info.symlink_to(elsewhere)
    with pytest.raises(OSError):
        other.exclude("/.memstrata/")
    assert list(elsewhere.iterdir()) == []
