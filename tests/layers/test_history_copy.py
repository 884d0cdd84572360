"""layers/daily/git/history_copy.py: every commit copied out of the workspace; a lost history found, kept and
restorable."""

from __future__ import annotations

import shutil
import stat
import subprocess

import pytest

from layers.daily import workspace_repo as daily
from layers.daily.git.history_copy import HistoryCopy


def _git(ws, *args):
    return subprocess.run(["git", "-C", str(ws), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path):
    r = daily.WorkspaceRepo(tmp_path / "ws", copy=HistoryCopy(tmp_path / "state" / "history" / "main.git"))
    r.ensure()
    return r


def _facts(repo, n: int) -> list[str]:
    shas = []
    for i in range(n):
        with (repo.path / "MEMORY.md").open("a") as fh:
            fh.write(f"- fact {i}\n")
        shas.append(repo.commit(["MEMORY.md"], f"fact {i}").sha)
    return shas


def _forget(ws) -> None:
    _git(ws, "reflog", "expire", "--expire=now", "--all")
    _git(ws, "gc", "-q", "--prune=now")


def test_every_commit_is_copied_and_the_copy_is_private(repo):
    shas = _facts(repo, 3)
    copy = repo.copy
    assert copy.last() == shas[-1]
    assert stat.S_IMODE(copy.path.parent.stat().st_mode) == 0o700 and stat.S_IMODE(copy.path.stat().st_mode) == 0o700
    shutil.rmtree(repo.path / ".git")  # the copy needs nothing of the workspace's repository
    assert copy.read_at(shas[0], "MEMORY.md") == b"- fact 0\n"
    assert repo.history_check().why.startswith("the workspace's repository (.git) was removed")


def test_a_reset_and_gc_is_found_once_and_every_version_stays_restorable(repo):
    shas = _facts(repo, 4)
    _git(repo.path, "reset", "-q", "--hard", "HEAD~3")
    _forget(repo.path)
    found = repo.history_check()
    assert found is not None and found.lost == shas[-1] and found.commit.subject == "fact 3"
    assert "no longer contains it" in found.why and found.head == shas[0]
    assert repo.history_check() is None, "said once: the copy now follows the workspace"
    assert [lost.commit.sha for lost in repo.copy.lost()] == [shas[-1]]
    assert [c.subject for c in repo.kept_elsewhere()] == ["fact 3", "fact 2", "fact 1"]
    done = repo.restore("MEMORY.md", shas[2][:10])
    assert done.from_copy and (repo.path / "MEMORY.md").read_text() == "- fact 0\n- fact 1\n- fact 2\n"
    assert repo.copy.last() == done.commit.sha, "the restore's own commit is copied too"


def test_a_history_rewritten_to_one_orphan_commit(repo):
    shas = _facts(repo, 3)
    ws = repo.path
    _git(ws, "checkout", "-q", "--orphan", "fresh")
    _git(ws, "commit", "-qm", "one commit, nothing before it")
    branch = _git(ws, "for-each-ref", "--format=%(refname:short)", "refs/heads/").split()
    for name in branch:
        if name != "fresh":
            _git(ws, "branch", "-q", "-D", name)
    _forget(ws)
    found = repo.history_check()
    assert found is not None and found.lost == shas[-1]
    assert repo.copy.read_at(shas[1], "MEMORY.md") == b"- fact 0\n- fact 1\n"
    _facts(repo, 1)  # the daemon goes on committing on top of the new history
    assert repo.history_check() is None and len(repo.copy.lost()) == 1


def test_a_removed_repository_is_made_anew_and_the_old_history_kept(repo):
    shas = _facts(repo, 2)
    shutil.rmtree(repo.path / ".git")
    found = repo.history_check()
    assert found is not None and found.head is None and found.lost == shas[-1]
    assert repo.copy.last() is None
    new = _facts(repo, 1)  # commit() makes the repository anew
    assert repo.copy.last() == new[0] and repo.history_check() is None
    assert [c.subject for c in repo.kept_elsewhere()] == ["fact 1", "fact 0"]


def test_a_commit_is_in_the_copy_before_the_workspace_shows_it(repo):
    """A ``.git`` removed the moment HEAD moved loses nothing: the copy took the commit before HEAD moved.

    Before, the copy was made after the commit (and by the daemon's job only after its last
    batch): ``rm -rf .git`` in between, as an agent reading HEAD could do, lost that commit.
    """
    seen_in_copy: list[bool] = []
    (repo.path / "MEMORY.md").write_text("- the fact zqbefore\n")
    original = repo.copy.store

    def store(objects, sha):
        original(objects, sha)
        head = subprocess.run(["git", "-C", str(repo.path), "rev-parse", "-q", "--verify", "HEAD"], capture_output=True)
        seen_in_copy.append(head.stdout.decode().strip() != sha)  # HEAD does not show it yet

    repo.copy.store = store
    done = repo.commit_checked(["MEMORY.md"], "the fact", keep=False)  # as the daemon's job commits
    shutil.rmtree(repo.path / ".git")
    assert seen_in_copy == [True]
    assert repo.copy.resolve(done.info.sha) == done.info.sha
    assert repo.copy.read_at(done.info.sha, "MEMORY.md") == b"- the fact zqbefore\n"


def test_commits_of_one_batch_are_each_packed_once(repo):
    """A batch moves the copy's reference once, at its end; each commit's store packs only what is new."""
    for i in range(4):
        (repo.path / f"part-{i}.md").write_text(f"- part {i}\n")
        repo.commit_checked([f"part-{i}.md"], f"part {i}", keep=False)
    copy = repo.copy.path
    packed = 0
    for idx in (copy / "objects" / "pack").glob("*.idx"):
        listing = subprocess.run(["git", "show-index"], stdin=idx.open("rb"), capture_output=True, check=True)
        packed += len(listing.stdout.splitlines())
    distinct = subprocess.run(
        ["git", f"--git-dir={copy}", "cat-file", "--batch-all-objects", "--batch-check"],
        capture_output=True,
        check=True,
    ).stdout.splitlines()
    assert packed == len(distinct), "an object of an earlier commit of the batch was packed again"
