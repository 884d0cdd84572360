"""layers/daily/git/repair.py: a workspace repository a power cut broke is found and repaired from the history copy.

Each case breaks a real repository the way a cut of unsynced git writes leaves it (research for
issue 45: HEAD's commit object an empty file, a branch file emptied, the index missing or cut
short) and checks that the repair ends with ``git fsck --full --strict`` clean, every commit
the daemon made reachable again, and the work tree's uncommitted edit untouched.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from layers.daily import workspace_repo as daily
from layers.daily.git import repair as gitrepair
from layers.daily.git.history_copy import HistoryCopy


def _git(ws: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ws), *args], capture_output=True, text=True, check=check)


@pytest.fixture
def repo(tmp_path):
    r = daily.WorkspaceRepo(tmp_path / "ws", copy=HistoryCopy(tmp_path / "state" / "history" / "main.git"))
    r.ensure()
    for i in range(3):
        with (r.path / "MEMORY.md").open("a") as fh:
            fh.write(f"- fact {i}\n")
        r.commit(["MEMORY.md"], f"fact {i}")
    with (r.path / "MEMORY.md").open("a") as fh:
        fh.write("- not committed yet\n")
    return r


def _loose(ws: Path, sha: str) -> Path:
    return ws / ".git" / "objects" / sha[:2] / sha[2:]


def _empty_head_objects(ws: Path) -> None:
    head = _git(ws, "rev-parse", "HEAD").stdout.strip()
    tree = _git(ws, "rev-parse", "HEAD^{tree}").stdout.strip()
    for sha in (head, tree):
        _loose(ws, sha).chmod(0o644)
        _loose(ws, sha).write_bytes(b"")


def _empty_branch(ws: Path) -> None:
    (ws / ".git" / "refs" / "heads" / "master").write_bytes(b"")


def _no_index(ws: Path) -> None:
    (ws / ".git" / "index").unlink()


def _short_index(ws: Path) -> None:
    index = ws / ".git" / "index"
    index.write_bytes(index.read_bytes()[:30])


def _everything(ws: Path) -> None:
    _empty_head_objects(ws)
    _empty_branch(ws)
    _short_index(ws)


@pytest.mark.parametrize(
    "breaks", [_empty_head_objects, _empty_branch, _no_index, _short_index, _everything], ids=lambda f: f.__name__
)
def test_a_broken_repository_is_repaired_from_the_copy(repo, breaks):
    ws = repo.path
    subjects = _git(ws, "log", "--format=%s").stdout.split("\n")[:3]
    breaks(ws)
    assert repo.damage(), "the damage is found"
    if breaks is not _no_index:
        assert _git(ws, "fsck", "--full", check=False).returncode != 0 or _git(ws, "status", check=False).returncode

    repaired = repo.repair()

    assert repaired is not None and repaired.actions and repaired.left == ""
    assert _git(ws, "fsck", "--full", "--strict").returncode == 0
    assert _git(ws, "log", "--format=%s").stdout.split("\n")[:3] == subjects == ["fact 2", "fact 1", "fact 0"]
    assert (ws / "MEMORY.md").read_text().endswith("- fact 2\n- not committed yet\n"), "the work tree is untouched"
    assert [c.path for c in repo.changes(["MEMORY.md"])] == ["MEMORY.md"], "the edit is still to be committed"
    assert repo.commit(["MEMORY.md"], "after the repair") is not None
    assert repo.damage(thorough=True) == []


def test_a_sound_repository_is_left_alone(repo):
    before = sorted(p.name for p in (repo.path / ".git" / "objects").rglob("*"))
    assert repo.damage(thorough=True) == [] and repo.repair(thorough=True) is None
    assert sorted(p.name for p in (repo.path / ".git" / "objects").rglob("*")) == before


def test_git_errors_of_a_broken_repository_are_told_from_others():
    from layers.daily.git.run import GitFailed

    assert gitrepair.looks_corrupt(GitFailed("commit-tree", 128, "error: object file .git/objects/ab/cd is empty"))
    assert gitrepair.looks_corrupt(GitFailed("status", 128, "fatal: index file smaller than expected"))
    assert not gitrepair.looks_corrupt(GitFailed("update-ref", 128, "fatal: cannot lock ref 'HEAD'"))
