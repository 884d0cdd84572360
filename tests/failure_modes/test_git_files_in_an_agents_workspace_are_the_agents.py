"""What git writes as root in a workspace owned by its agent's Unix user goes to that user.

Found by booting the unit (tests/system): the token and the skill were the agent's, but
every object, ref and the index the daemon's commits wrote were root's, 0640 in 0750
directories, so the agent could not read its own history.  The daemon now hands what
it created in ``.git`` to the workspace's owner after each commit, never through a
symlink and never a file with other hard links (a file elsewhere on the machine).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.failure_modes.unix_users import chown_tree, second_user
from tests.helpers import LEAN, init_root, run_cli, wait_for

PLANTED = {".git/planted-link", ".git/planted-symlink"}


def _not_owned_by(ws: Path, uid: int) -> list[str]:
    """Entries of ``ws`` (its .git included) that are not ``uid``'s, the planted ones aside."""
    found = []
    for dirpath, dirs, files in os.walk(ws):
        for name in (*dirs, *files):
            rel = str((Path(dirpath) / name).relative_to(ws))
            if rel not in PLANTED and os.lstat(ws / rel).st_uid != uid:
                found.append(rel)
    return found


def _head_of(ws: Path, rel: str) -> str:
    cmd = ["git", "-c", f"safe.directory={ws}", "-C", str(ws), "show", f"HEAD:{rel}"]
    return subprocess.run(cmd, capture_output=True, text=True).stdout


def test_commits_in_an_agents_workspace_leave_its_repository_to_the_agent(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN)
    run_cli("agent", "add", "beta", config=config)
    beta = tmp_path / "workspace" / "agents" / "beta-workspace"
    outside = tmp_path / "root-only.txt"
    outside.write_text("root's\n")
    with second_user() as user:
        chown_tree(beta, user)
        # planted by the agent: a hard link to a root file, a symlink to another (never to be handed over)
        os.link(outside, beta / ".git" / "planted-link")
        os.symlink(outside, beta / ".git" / "planted-symlink")
        d = daemons(config)

        (beta / "MEMORY.md").write_text("# MEMORY\n\n- committed for beta\n")
        wait_for(lambda: "committed for beta" in _head_of(beta, "MEMORY.md"), what="the commit")
        # handed over right after the commit (which is visible a moment earlier)
        wait_for(lambda: _not_owned_by(beta, user.pw_uid) == [], timeout=10, what="the repository handed over")

        assert outside.stat().st_uid == 0, "a hard-linked file from elsewhere keeps its owner"
        assert os.lstat(beta / ".git" / "planted-symlink").st_uid == 0, "a symlink is not handed over"
        assert d.stop() == 0


def test_what_the_daemon_made_before_a_workspace_was_chowned_becomes_the_agents(tmp_path, daemons):
    """A workspace made by hand (``mkdir``, then ``chown -R``) can be found between the two: the daemon
    then makes ``skills/`` and ``.memstrata/`` as root, and ``chown -R`` may walk past them (seen once in
    the booted-systemd test).  After its first commit the daemon hands them over, ``skills/`` itself
    included; what else ``skills/`` holds is not the daemon's to give."""
    config = init_root(tmp_path, **LEAN)
    run_cli("agent", "add", "beta", config=config)  # skill and token made for root, as for a root-owned workspace
    beta = tmp_path / "workspace" / "agents" / "beta-workspace"
    admins = beta / "skills" / "admins-own"
    admins.mkdir()
    with second_user() as user:
        chown_tree(beta, user)
        for made_by_root in (beta / "skills", beta / ".memstrata", beta / ".memstrata" / "token", admins):
            os.chown(made_by_root, 0, 0)  # what chown -R walked past
        d = daemons(config)

        (beta / "MEMORY.md").write_text("# MEMORY\n\n- committed for beta\n")
        wait_for(lambda: "committed for beta" in _head_of(beta, "MEMORY.md"), what="the commit")
        wait_for(lambda: _not_owned_by(beta, user.pw_uid) == ["skills/admins-own"], timeout=10, what="handed over")
        assert d.stop() == 0
