"""What the daemon committed outlives anything an agent does to its ``.git``, and a rewrite is said.

Before the fix ``git reset --hard HEAD~3`` followed by ``reflog expire`` and
``gc``, ``rm -rf .git``, or a history rewritten to one orphan commit lost the
facts the daemon had committed for good; nothing was logged or audited, status
kept showing a commit that no longer existed, and ``restore --at`` it answered
"no commit".  Now every commit is copied to ``state_dir/history/<agent>.git``
(0700, root's), out of the agent's reach; a history that no longer holds the
daemon's last commit is found (on the ``.git`` change, at reconcile, before each
commit), logged, audited and shown in status; ``history`` lists what only the
copy still has and ``restore --at`` brings any of it back.
"""

from __future__ import annotations

import json
import shutil
import stat
import subprocess

import pytest

from tests.failure_modes.unix_users import chown_tree, second_user
from tests.helpers import LEAN, git, init_root, run_cli, wait_for

FACTS = [f"- fact {i}: zqfact{i}" for i in range(4)]


def _write_facts(ws, d) -> list[str]:
    """Four facts, each committed by the daemon; their commits, oldest first."""
    shas = []
    for i, fact in enumerate(FACTS):
        with (ws / "MEMORY.md").open("a") as fh:
            fh.write(fact + "\n")
        wait_for(lambda i=i: f"zqfact{i}" in git(ws, "show", "HEAD:MEMORY.md"), timeout=30, what=f"fact {i}")
        shas.append(git(ws, "rev-parse", "HEAD").strip())

    def done() -> bool:  # status shows HEAD as soon as it moves: the daemon's commit job may still hold the index
        main = d.agent("main")
        return (main["last_commit"] or {}).get("sha") == shas[-1][:10] and not main.get("committing")

    wait_for(done, what="the daemon done with its last commit")
    return shas


def _forget(ws) -> None:
    git(ws, "reflog", "expire", "--expire=now", "--all")
    git(ws, "gc", "-q", "--prune=now")


def _reset_three(ws) -> None:
    git(ws, "reset", "-q", "--hard", "HEAD~3")
    _forget(ws)


def _remove_git(ws) -> None:
    # in one step, as `mv .git /elsewhere` does: an rmtree in place takes long enough for the daemon
    # to make a new .git and commit into it while the old one is still being removed, and then that
    # new history is lost as well (kept and said too, but it is a second loss, not this test's one)
    gone = ws.parent / "removed.git"
    (ws / ".git").rename(gone)
    shutil.rmtree(gone)


def _one_orphan_commit(ws) -> None:
    git(ws, "checkout", "-q", "--orphan", "rewritten")
    git(ws, "commit", "-qm", "history, rewritten to one commit")
    for branch in git(ws, "for-each-ref", "--format=%(refname:short)", "refs/heads/").split():
        if branch != "rewritten":
            git(ws, "branch", "-q", "-D", branch)
    _forget(ws)


def _root_owned(tree) -> bool:
    for path in tree.rglob("*"):
        try:
            if path.lstat().st_uid == 0:
                return True
        except FileNotFoundError:  # a lock file git removed meanwhile
            continue
    return False


def _audit(config_dir) -> list[dict]:
    logs = sorted((config_dir / "workspace" / "logs" / "security").glob("*.log"))
    return [json.loads(line) for f in logs for line in f.read_text().splitlines()]


@pytest.mark.parametrize("rewrite", [_reset_three, _remove_git, _one_orphan_commit], ids=lambda f: f.__name__[1:])
def test_a_rewritten_history_is_found_said_and_every_fact_restorable(tmp_path, daemons, rewrite):
    config = init_root(tmp_path, **LEAN)
    ws = tmp_path / "workspace"
    d = daemons(config)
    shas = _write_facts(ws, d)

    rewrite(ws)
    lost = wait_for(lambda: d.agent("main")["history_lost"], timeout=30, what="the rewrite found")
    assert lost[0]["commit"] == shas[-1][:10]
    for sha in shas[1:]:
        assert subprocess.run(["git", "-C", str(ws), "cat-file", "-e", sha], capture_output=True).returncode != 0
    assert "HISTORY REWRITTEN" in d.log() and shas[-1][:10] in d.log()
    events = [e for e in _audit(tmp_path) if e["event"] == "history_rewritten"]
    assert len(events) == 1 and events[0]["agent"] == "main" and events[0]["lost_commit"] == shas[-1]

    def shown_commit_exists() -> bool:  # status never shows a commit the workspace does not have
        shown = d.agent("main")["last_commit"]
        if shown is None:
            return True
        return subprocess.run(["git", "-C", str(ws), "cat-file", "-e", shown["sha"]]).returncode == 0

    wait_for(shown_commit_exists, what="status showing an existing commit")
    text = run_cli("status", config=config).stdout
    assert "HISTORY REWRITTEN (found" in text and shas[-1][:10] in text

    listing = run_cli("history", "--agent", "main", config=config).stdout
    assert "no longer in the workspace's history, kept in the daemon's copy" in listing
    assert all(sha[:10] in listing for sha in shas[1:])
    answer = run_cli("restore", "--agent", "main", "MEMORY.md", "--at", shas[2][:10], "--json", config=config)
    done = json.loads(answer.stdout)
    assert done["from_copy"] is True and done["from"] == shas[2]
    restored = (ws / "MEMORY.md").read_text()
    assert all(fact in restored for fact in FACTS[:3]) and FACTS[3] not in restored
    wait_for(lambda: "zqfact2" in git(ws, "show", "HEAD:MEMORY.md"), what="the restored version committed")
    assert len([e for e in _audit(tmp_path) if e["event"] == "history_rewritten"]) == 1, "said once"


def test_the_copy_is_out_of_the_agents_reach(tmp_path, daemons):
    """An agent with its own Unix user owns its workspace and .git, and cannot read the copy."""
    config = init_root(tmp_path, **LEAN)
    run_cli("agent", "add", "beta", config=config)
    beta_ws = tmp_path / "workspace" / "agents" / "beta-workspace"
    with second_user() as user:
        chown_tree(beta_ws, user)
        d = daemons(config)
        (beta_ws / "MEMORY.md").write_text("# beta\n\n- beta's fact zqbeta\n")
        trusted = ["-c", f"safe.directory={beta_ws}"]  # git as root refuses the agent's repository otherwise
        wait_for(lambda: "zqbeta" in git(beta_ws, *trusted, "show", "HEAD:MEMORY.md"), timeout=30, what="commit")
        copy = d.state_dir / "history" / "beta.git"
        wait_for(lambda: (copy / "refs" / "heads" / "daemon").exists(), what="the copy made")
        for path in (d.state_dir / "history", copy):
            st = path.stat()
            assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o700, path
        seen = subprocess.run(
            ["runuser", "-u", user.pw_name, "--", "git", f"--git-dir={copy}", "log", "--oneline"],
            capture_output=True,
            text=True,
        )
        assert seen.returncode != 0 and "zqbeta" not in seen.stdout
        # what the commit wrote as root is handed over once the commit job ends
        wait_for(lambda: not _root_owned(beta_ws / ".git"), timeout=30, what="the agent's .git its own")
        d.stop()
