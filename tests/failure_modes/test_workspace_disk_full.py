"""A workspace's disk is full, or its ``.git`` read-only: commits fail, are retried, and land by themselves.

The edit itself needs no new space (it rewrites a file in place, as a person
on a full disk still can); git does (a new blob), so the commit fails with
ENOSPC, or EROFS under a read-only bind mount of ``.git``.  The daemon keeps
the change pending, shows why in ``status``, logs it once, and commits it when
the disk takes writes again.
"""

from __future__ import annotations

import pytest

from tests.failure_modes import filesystems
from tests.failure_modes.filesystems import admin_status, bind_readonly, storage_places, unmount
from tests.helpers import FAST, committed, file_at_head, init_root, run_cli, wait_for

NOTE = "memory/2026-11-30.md"
RECOVERY_S = 90


@pytest.fixture
def tmpfs():
    yield from filesystems.mounts()


def _rewrite_in_place(path, old: str, new: str) -> None:
    """Same length, same blocks: possible on a disk with not one free byte."""
    text = path.read_text(encoding="utf-8")
    assert len(old.encode()) == len(new.encode())
    with open(path, "r+b") as fh:
        fh.write(text.replace(old, new).encode("utf-8"))


def _prepare(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, conversation={"enabled": False}, vectors={"backend": "off"})
    ws = tmp_path / "workspace"
    d = daemons(config)
    (ws / NOTE).write_text("# 提交\n\n版本 version-one 的笔记\n", encoding="utf-8")
    wait_for(lambda: committed(ws, "A", NOTE), what="the first version committed")
    return config, ws, d


def _git_failing(d, state, *reasons: str) -> bool:
    """Status names git as failing for lack of space, with git's own reason on the agent."""
    status = admin_status(d, state)
    main = next(a for a in status["agents"] if a["id"] == "main")
    return "git" in storage_places(status) and any(r in (main["last_error"] or "") for r in reasons)


def test_a_full_workspace_disk_delays_the_commit_until_space_returns(tmp_path, tmpfs, daemons):
    disk = tmpfs(tmp_path / "workspace", size="4m")
    config, ws, d = _prepare(tmp_path, daemons)
    state = tmp_path / "state"

    disk.fill()
    _rewrite_in_place(ws / NOTE, "version-one", "version-two")
    full = ("No space left on device", "Out of diskspace")  # git's words differ by the step that failed
    wait_for(lambda: _git_failing(d, state, *full), what="the commit failure shown")
    assert d.proc.poll() is None
    text = run_cli("status", config=config).stdout
    assert "STORAGE: writes failing: git for main" in text and "(changes waiting to be committed)" in text
    wait_for(lambda: admin_status(d, state)["storage"]["problems"][0]["failures"] >= 4, timeout=40, what="retried")
    logged = [line.partition("): ")[2] for line in d.log().splitlines() if "main: commit failed" in line]
    assert len(logged) == len(set(logged)) < 4, d.log()  # each of git's messages once, not once per retry
    assert "version-two" not in file_at_head(ws, NOTE)

    disk.free()
    wait_for(lambda: "version-two" in (file_at_head(ws, NOTE) or ""), timeout=RECOVERY_S, what="the commit landed")
    wait_for(lambda: not admin_status(d, state)["storage"]["problems"], what="status clear")
    assert next(a for a in admin_status(d, state)["agents"] if a["id"] == "main")["last_error"] is None
    assert "Traceback" not in d.log()
    assert d.stop() == 0


def test_a_read_only_git_directory_is_reported_and_recovers(tmp_path, daemons):
    config, ws, d = _prepare(tmp_path, daemons)
    state = tmp_path / "state"

    bind_readonly(ws / ".git")
    try:
        (ws / NOTE).write_text("# 提交\n\n版本 version-two 的笔记，.git 只读时写的\n", encoding="utf-8")
        wait_for(lambda: _git_failing(d, state, "Read-only file system"), what="the EROFS failure shown")
        assert d.proc.poll() is None
        assert "STORAGE: writes failing: git for main" in run_cli("status", config=config).stdout
    finally:
        unmount(ws / ".git")
    wait_for(lambda: "version-two" in (file_at_head(ws, NOTE) or ""), timeout=RECOVERY_S, what="the commit landed")
    wait_for(lambda: not admin_status(d, state)["storage"]["problems"], what="status clear")
    assert d.stop() == 0
