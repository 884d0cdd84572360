"""A workspace owned by the agent's own Unix user is committed by the daemon (root).

Before the fix, git refused every command there ("detected dubious ownership in
repository"), the log said so once, nothing was ever committed and status showed
nothing wrong.  Now each git command trusts exactly that workspace
(``-c safe.directory=…``, the global git config is never written), and a workspace
whose commits fail is shown in status, with reason, attempts and since when,
until a commit succeeds.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.failure_modes.unix_users import chown_tree, second_user
from tests.helpers import LEAN, init_root, run_cli, wait_for


def _git(ws: Path, *args: str) -> str:
    """git as the test (root) sees the repository: trusting it on this command line only."""
    cmd = ["git", "-c", f"safe.directory={ws}", "-C", str(ws), *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def _head_of(ws: Path, rel: str) -> str | None:
    proc = subprocess.run(
        ["git", "-c", f"safe.directory={ws}", "-C", str(ws), "show", f"HEAD:{rel}"], capture_output=True, text=True
    )
    return proc.stdout if proc.returncode == 0 else None


def _global_git_config(home: Path) -> dict:
    files = [home / ".gitconfig", home / ".config" / "git" / "config", Path("/root/.gitconfig"), Path("/etc/gitconfig")]
    return {str(p): (p.read_bytes() if p.exists() else None) for p in files}


def test_workspace_owned_by_another_user_is_committed_and_failures_are_shown(tmp_path, daemons):
    home = tmp_path / "home"
    home.mkdir()
    config = init_root(tmp_path, **LEAN)
    ws = tmp_path / "workspace"
    with second_user() as user:
        chown_tree(ws, user)
        before = _global_git_config(home)
        plain = subprocess.run(["git", "-C", str(ws), "status"], capture_output=True, text=True)
        assert "dubious ownership" in plain.stderr, "the condition is real: git refuses this repository as root"

        d = daemons(config, env={"HOME": str(home)})
        (ws / "USER.md").write_text("# USER\n\n- owned by the agent's own user\n")
        wait_for(lambda: _head_of(ws, "USER.md") == "# USER\n\n- owned by the agent's own user\n", what="commit")
        agent = d.agent("main")
        assert agent["commits_failing"] is None and agent["last_error"] is None
        assert Path(ws).stat().st_uid == user.pw_uid and (ws / "USER.md").stat().st_uid == user.pw_uid
        assert _global_git_config(home) == before, "no global or system git config was written"

        # A repository git cannot use: status says so, with reason, attempts and since when ...
        git_config = ws / ".git" / "config"
        good = git_config.read_bytes()
        git_config.write_bytes(good + b"[broken\n")
        (ws / "MEMORY.md").write_text("# MEMORY\n\n- written while commits fail\n")

        def failing():
            f = d.agent("main")["commits_failing"]
            return f if f and f["attempts"] >= 2 else None

        f = wait_for(failing, what="commits_failing in status")
        assert "bad config" in f["reason"] and f["since"]
        text = run_cli("status", config=config).stdout
        assert "COMMITS FAILING since" in text and "bad config" in text
        offline_json = json.loads(run_cli("status", "--json", config=config).stdout)
        assert next(a for a in offline_json["agents"] if a["id"] == "main")["commits_failing"]["attempts"] >= 2

        # ... until a commit succeeds
        git_config.write_bytes(good)
        wait_for(lambda: _head_of(ws, "MEMORY.md") == "# MEMORY\n\n- written while commits fail\n", what="recovery")
        wait_for(lambda: d.agent("main")["commits_failing"] is None, what="the failure leaves status")
        assert "COMMITS FAILING" not in run_cli("status", config=config).stdout
        assert "dubious ownership" not in d.log()
        d.stop()
        assert _global_git_config(home) == before
        assert (
            "safe.directory"
            not in subprocess.run(
                ["git", "config", "--global", "--list"], capture_output=True, text=True, env={"HOME": "/root"}
            ).stdout
        )
