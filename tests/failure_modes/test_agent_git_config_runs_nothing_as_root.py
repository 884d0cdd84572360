"""What an agent writes into its .git/config (and attributes, hooks) never runs as root.

The daemon and the CLI run git as root in the agent's repository.  Before the
fix, a hook, an fsmonitor command, a clean filter or a signing program planted
by the agent ran as root on the next status or commit.  Now every git command
overrides them on its command line (hooks path /dev/null, fsmonitor off, no
signing, every configured filter emptied) and names the work tree explicitly.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

from tests.helpers import LEAN, init_root, run_cli, wait_for

HOOKS = ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "reference-transaction", "post-index-change")


def _plant(ws: Path, evil: Path, marks: Path, elsewhere: Path) -> None:
    """Everything a hostile agent can put in its repository to make git run a program."""
    evil.mkdir()
    (evil / "hooks").mkdir()
    marks.mkdir()
    elsewhere.mkdir()
    (elsewhere / "MEMORY.md").write_text("ELSEWHERE\n")
    run = evil / "run.sh"
    run.write_text(f'#!/bin/sh\necho "$(id -u) $*" >> {marks}/ran\ncat >/dev/null 2>&1\necho FILTERED\nexit 0\n')
    run.chmod(0o755)
    for hook in HOOKS:
        for where in (evil / "hooks", ws / ".git" / "hooks"):
            (where / hook).write_text(f'#!/bin/sh\necho "$(id -u) hook {hook}" >> {marks}/ran\n')
            (where / hook).chmod(0o755)
    (evil / "included.config").write_text(f'[filter "inc"]\n\tclean = {run} include-clean\n')
    (evil / "attributes").write_text("*.md filter=evil\n")
    with open(ws / ".git" / "config", "a") as fh:
        fh.write(
            f"[core]\n\thooksPath = {evil}/hooks\n\tfsmonitor = {run} fsmonitor\n\tpager = {run} pager\n"
            f"\teditor = {run} editor\n\tworktree = {elsewhere}\n\tattributesFile = {evil}/attributes\n"
            f"[commit]\n\tgpgSign = true\n[gpg]\n\tprogram = {run} gpg\n"
            f'[filter "evil"]\n\tclean = {run} clean\n\tsmudge = {run} smudge\n\trequired = true\n'
            f'[filter "odd=name.x"]\n\tclean = {run} odd-clean\n'
            f'[filter "proc"]\n\tprocess = {run} process\n[diff "evil"]\n\ttextconv = {run} textconv\n'
            f"[gc]\n\tauto = 1\n[include]\n\tpath = {evil}/included.config\n"
        )
    (ws / ".git" / "info").mkdir(exist_ok=True)
    (ws / ".git" / "info" / "attributes").write_text(
        "MEMORY.md filter=evil diff=evil\nUSER.md filter=inc\nmemory/** filter=proc\nSOUL.md filter=odd=name.x\n"
    )
    (ws / ".gitattributes").write_text("*.md filter=evil\n")


def _show(ws: Path, rel: str) -> str | None:
    proc = subprocess.run(["git", f"--git-dir={ws}/.git", "show", f"HEAD:{rel}"], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def test_hooks_fsmonitor_filters_and_signing_planted_by_the_agent_never_run(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN)
    ws = tmp_path / "workspace"
    marks = tmp_path / "marks"
    _plant(ws, tmp_path / "evil", marks, tmp_path / "elsewhere")
    ran = marks / "ran"

    d = daemons(config)
    (ws / "MEMORY.md").write_text("# MEMORY\n\n- raw content, not filtered\n")
    (ws / "USER.md").write_text("# USER\n\n- also raw\n")
    (ws / "SOUL.md").write_text("# SOUL\n\n- odd filter name\n")
    run_cli("note", "--agent", "main", "a daily note", config=config)
    today = f"memory/{time.strftime('%Y-%m-%d')}.md"
    wait_for(lambda: _show(ws, "MEMORY.md") == "# MEMORY\n\n- raw content, not filtered\n", what="MEMORY.md commit")
    wait_for(lambda: _show(ws, today) and _show(ws, "SOUL.md"), what="note and SOUL.md committed")
    assert _show(ws, "USER.md") == "# USER\n\n- also raw\n"
    assert "a daily note" in _show(ws, today)
    assert d.agent("main")["last_error"] is None

    # the CLI runs git as root too
    run_cli("history", "--agent", "main", "MEMORY.md", config=config)
    (ws / "MEMORY.md").write_text("edit before a restore\n")
    run_cli("restore", "--agent", "main", "MEMORY.md", "--at", "HEAD~1", config=config)
    d.stop()
    run_cli("status", config=config, check=False)  # offline survey: git status in the workspace

    assert not ran.exists(), f"git ran the agent's programs as root: {ran.read_text()}"
    assert (tmp_path / "elsewhere" / "MEMORY.md").read_text() == "ELSEWHERE\n"
    assert not any(os.stat(p).st_mode & stat.S_ISUID for p in (tmp_path / "evil").iterdir())


def test_a_dot_git_pointing_elsewhere_is_refused_not_used(tmp_path):
    """A `.git` gitfile (or symlink) would make root commit into, or read from, another repository."""
    config = init_root(tmp_path, **LEAN)
    ws = tmp_path / "workspace"
    other = tmp_path / "roots-own-repo"
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    (ws / ".git").rename(tmp_path / "moved-git")
    (ws / ".git").write_text(f"gitdir: {other}/.git\n")
    proc = run_cli("history", "--agent", "main", config=config, check=False)
    assert proc.returncode == 1 and "not a directory" in proc.stderr and "Traceback" not in proc.stderr
    (ws / ".git").unlink()
    (ws / ".git").symlink_to(other / ".git")
    (ws / "MEMORY.md").write_text("edit\n")
    proc = run_cli("restore", "--agent", "main", "MEMORY.md", "--at", "HEAD", config=config, check=False)
    assert proc.returncode == 1 and "symbolic link" in proc.stderr
    assert (ws / "MEMORY.md").read_text() == "edit\n"
    assert not list((other / ".git" / "objects").glob("??")), "nothing was written into the other repository"
