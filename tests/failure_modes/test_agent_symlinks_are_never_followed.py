"""Symlinks an agent plants where the daemon (root) writes its own files are never followed.

Before the fix: a `.memstrata` symlink to an outside directory got that directory
chowned to the agent's user and a token written into it; a `memory/archive`
symlink made archiving move files out of the workspace; a symlinked daily file
made `memstrata note` append to root's file, and a restore wrote through a
symlinked MEMORY.md.  Now each is refused, logged, audited, shown in status
("REFUSED"), and nothing outside the workspace changes: owner, mode, content.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.failure_modes.unix_users import chown_tree, second_user
from tests.helpers import LEAN, git, init_root, run_cli, wait_for


def _outside(tmp_path: Path, name: str) -> Path:
    """A root-owned directory outside every workspace, with a file someone cares about."""
    outside = tmp_path / name
    outside.mkdir(mode=0o750)
    (outside / "secret.txt").write_text("root's own file\n")
    (outside / "secret.txt").chmod(0o600)
    return outside


def _snapshot(directory: Path) -> dict:
    """Owner, mode and content of a directory and everything in it."""
    found = {}
    for path in [directory, *sorted(directory.rglob("*"))]:
        st = os.lstat(path)
        content = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        found[str(path.relative_to(directory))] = (st.st_uid, st.st_gid, st.st_mode, content)
    return found


def test_symlinked_token_dir_and_archive_dir_are_refused_audited_and_shown(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN, daily={"archive_after_days": 30})
    ws = tmp_path / "workspace"
    run_cli("agent", "add", "beta", config=config)
    beta = ws / "agents" / "beta-workspace"
    out_token, out_archive = _outside(tmp_path, "outside-token"), _outside(tmp_path, "outside-archive")
    before = {"token": _snapshot(out_token), "archive": _snapshot(out_archive)}
    with second_user() as user:
        chown_tree(beta, user)  # the daemon would chown what it creates here to this user
        for p in (beta / ".memstrata").iterdir():
            p.unlink()
        (beta / ".memstrata").rmdir()
        (beta / ".memstrata").symlink_to(out_token)
        (ws / "memory" / "2020-03-04.md").write_text("very old\n")
        git(ws, "add", "memory/2020-03-04.md")
        git(ws, "commit", "-qm", "old file")
        (ws / "memory" / "archive").symlink_to(out_archive)

        d = daemons(config)

        def refused(agent: str) -> dict:
            return {r["path"]: r["reason"] for r in d.agent(agent)["refused"]}

        assert "symbolic link" in wait_for(lambda: refused("beta").get(".memstrata"), what="token refusal")
        assert "symbolic link" in wait_for(lambda: refused("main").get("memory/archive"), what="archive refusal")
        text = run_cli("status", config=config).stdout
        assert "REFUSED: .memstrata: is a symbolic link" in text and "REFUSED: memory/archive" in text
        assert (ws / "memory" / "2020-03-04.md").read_text() == "very old\n", "not moved anywhere"
        assert git(ws, "status", "--porcelain", "--", "memory/2020-03-04.md") == ""
        (ws / "MEMORY.md").write_text("# MEMORY\n\n- the daemon keeps working\n")
        wait_for(lambda: "keeps working" in git(ws, "show", "HEAD:MEMORY.md"), what="other work goes on")

        logs = sorted((ws / "logs" / "security").glob("*.log"))
        audit = [json.loads(line) for f in logs for line in f.read_text().splitlines()]
        refusals = {(e["agent"], e["path"]) for e in audit if e["event"] == "symlink_refused"}
        assert {("beta", ".memstrata"), ("main", "memory/archive")} <= refusals
        assert len([e for e in audit if e["event"] == "symlink_refused"]) == 2, "audited once, not every reconcile"

        proc = run_cli("agent", "token", "beta", config=config, check=False)
        assert proc.returncode == 1 and "symbolic link" in proc.stderr and "Traceback" not in proc.stderr
        assert d.stop() == 0
    assert _snapshot(out_token) == before["token"] and _snapshot(out_archive) == before["archive"]


def test_note_restore_and_template_never_write_through_a_symlink(tmp_path):
    config = init_root(tmp_path, **LEAN)
    ws = tmp_path / "workspace"
    run_cli("agent", "add", "beta", config=config)
    beta = ws / "agents" / "beta-workspace"
    outside = _outside(tmp_path, "outside")
    before = _snapshot(outside)

    # a daily file that is a symlink to root's file
    today = ws / "memory" / f"{time.strftime('%Y-%m-%d')}.md"
    today.symlink_to(outside / "secret.txt")
    proc = run_cli("note", "--agent", "main", "appended where?", config=config, check=False)
    assert proc.returncode == 1 and "symbolic link" in proc.stderr and "Traceback" not in proc.stderr
    # a memory/ directory that is a symlink
    (beta / "memory").rmdir()
    (beta / "memory").symlink_to(outside)
    proc = run_cli("note", "--agent", "beta", "and here?", config=config, check=False)
    assert proc.returncode == 1 and "memory: is a symbolic link" in proc.stderr
    # a restore onto a symlinked file
    (ws / "USER.md").unlink()
    (ws / "USER.md").symlink_to(outside / "secret.txt")
    proc = run_cli("restore", "--agent", "main", "USER.md", "--at", "HEAD", config=config, check=False)
    assert proc.returncode == 1 and "symbolic link" in proc.stderr and "Traceback" not in proc.stderr
    # completing a workspace from the template goes around the symlinked memory/
    (beta / "TOOLS.md").unlink()
    run_cli("agent", "add", "beta", config=config)
    assert (beta / "TOOLS.md").is_file() and not (beta / "TOOLS.md").is_symlink()

    assert _snapshot(outside) == before
    assert (outside / "secret.txt").read_text() == "root's own file\n"


def test_audit_log_in_the_main_workspace_never_writes_through_a_symlink(tmp_path, caplog):
    """The default audit dir is ``{workspace}/logs/security``: the main agent controls ``logs``."""
    from daemon.common.audit import audit_log
    from daemon.common.config import load_config

    config = load_config(init_root(tmp_path, **LEAN))
    ws = config.paths.workspace
    assert ws in config.paths.audit_dir.parents
    outside = _outside(tmp_path, "outside-logs")
    before = _snapshot(outside)
    logs = ws / "logs"
    if logs.exists():
        for p in sorted(logs.rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        logs.rmdir()
    logs.symlink_to(outside)

    audit = audit_log(config)
    audit.record("write_denied", agent="beta", reason="test")
    assert _snapshot(outside) == before, "nothing was written or created outside the workspace"
    assert "audit log" in caplog.text and "never followed" in caplog.text

    logs.unlink()  # the agent takes its symlink back: the log is written where it belongs
    audit.record("write_denied", agent="beta", reason="after")
    lines = [json.loads(x) for f in config.paths.audit_dir.glob("*.log") for x in f.read_text().splitlines()]
    assert [e["reason"] for e in lines] == ["after"]
