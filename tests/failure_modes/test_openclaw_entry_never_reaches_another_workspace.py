"""An openclaw.json entry never reaches another agent's workspace, nor a place no workspace may be.

Before the fix (issue 44, items 1 and 2): the checks compared path strings and lstat-ed only the
last component. An entry whose path reached beta's workspace through a symlinked *parent*
(``<root>/link/beta-workspace``, ``link`` → the agents directory) was taken as a new agent:
the daemon wrote a new token into beta's ``.memstrata/token`` (beta then got 401), indexed
beta's MEMORY.md for the newcomer, and both watched and committed one repository. An entry
nested inside beta's workspace, the agents directory, the state directory or a directory the
file's owner does not own was accepted too: ``git init`` there, a token, the skill, a commit
of the ``*.md`` found, served to the newcomer's token; beta's history then showed
``?? memory/``. Two spellings of one directory made two agents of it.

Now every workspace path is resolved once and judged on where it resolves
(daemon/common/workspace_guard.py): each such entry is refused with one log line, audited
(``workspace_refused``), shown in ``memstrata status``, and nothing is written there.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from daemon.front.daemon_client import DaemonClient
from tests.failure_modes.unix_users import chown_tree, second_user
from tests.helpers import LEAN, commits, git, init_root, run_cli, wait_for


def _openclaw_json(root: Path, entries: dict[str, Path]) -> Path:
    listed = ",\n".join(f'    {{id: "{agent_id}", workspace: "{path}"}}' for agent_id, path in entries.items())
    path = root / "openclaw.json"
    path.write_text(f"// OpenClaw's configuration (JSON5)\n{{agents: {{list: [\n{listed},\n]}}}}\n")
    return path


def _token_file(workspace: Path) -> tuple[bytes, int]:
    path = workspace / ".memstrata" / "token"
    return path.read_bytes(), os.lstat(path).st_ino


def _audited(workspace: Path, event: str) -> list[dict]:
    logs = sorted((workspace / "logs" / "security").glob("*.log"))
    return [e for f in logs for line in f.read_text().splitlines() if (e := json.loads(line))["event"] == event]


def _foreign_log(workspace: Path) -> str:
    """``git log`` of a workspace another user owns (git refuses it to root without ``safe.directory``)."""
    cmd = ["git", "-c", f"safe.directory={workspace}", "-C", str(workspace), "log", "--oneline"]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def _search_as(d, token: str, agent: str, query: str) -> list[str]:
    with DaemonClient(d.socket, timeout=10, token=token) as client:
        return [r["path"] for r in client.search(agent, query)["results"]]


def test_an_entry_through_a_symlinked_parent_never_takes_another_agents_workspace(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN)
    run_cli("agent", "add", "beta", config=config)
    agents = tmp_path / "workspace" / "agents"
    beta = agents / "beta-workspace"
    (beta / "MEMORY.md").write_text("# MEMORY\n\n- beta's private launch plan\n")
    git(beta, "add", "MEMORY.md")
    git(beta, "commit", "-qm", "beta's memory")
    before = _token_file(beta)
    (tmp_path / "link").symlink_to(agents)  # a symlinked parent; the last component is real
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "two").symlink_to(tmp_path)  # the same, two levels deep and with `..`
    _openclaw_json(
        tmp_path,
        {
            "gamma": tmp_path / "link" / "beta-workspace",
            "delta": tmp_path / "one" / "two" / "workspace" / "agents" / "beta-workspace",
        },
    )

    d = daemons(config)

    assert {a["id"] for a in d.status()["agents"]} == {"main", "beta"}
    assert _token_file(beta) == before, "beta's token file: the same bytes, the same inode"
    token = before[0].decode().strip()
    assert _search_as(d, token, "beta", "launch plan") == ["MEMORY.md"], "beta's own token still answers (200)"
    assert not (tmp_path / "agents" / "gamma").exists(), "no index was made for gamma"
    log = d.log()
    for agent_id in ("gamma", "delta"):
        lines = [line for line in log.splitlines() if f"of agent {agent_id} refused" in line]
        assert len(lines) == 1, f"said once for {agent_id}: {lines}"
        assert "is agent beta's workspace" in lines[0]
    refused = {(e["agent"], e["reason"].split(" (")[0]) for e in _audited(tmp_path / "workspace", "workspace_refused")}
    assert ("gamma", "is agent beta's workspace") in refused and ("delta", "is agent beta's workspace") in refused
    text = run_cli("status", config=config).stdout
    assert "workspace REFUSED: gamma" in text and "workspace REFUSED: delta" in text
    assert commits(beta)[0]["subject"] == "beta's memory", "no one else committed in beta's repository"
    assert d.stop() == 0


def test_nested_agents_dir_state_dir_and_foreign_owned_entries_are_refused(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN)
    run_cli("agent", "add", "beta", config=config)
    agents = tmp_path / "workspace" / "agents"
    beta = agents / "beta-workspace"
    (beta / "memory" / "2026-11-30.md").write_text("# 2026-11-30\n\n- beta's day\n")
    git(beta, "add", "memory")
    git(beta, "commit", "-qm", "beta's day")
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    roots_own = tmp_path / "roots-own"  # root's directory: the file's owner may not name it
    roots_own.mkdir()
    (roots_own / "notes.md").write_text("root's notes\n")
    mine = tmp_path / "users-own"  # the file owner's own directory: fine
    mine.mkdir()
    (mine / "MEMORY.md").write_text("# MEMORY\n\n- the user's own agent\n")
    with second_user() as user:
        chown_tree(mine, user)
        listed = _openclaw_json(
            tmp_path,
            {"nested": beta / "memory", "agentsdir": agents, "state": state, "rootdir": roots_own, "own": mine},
        )
        os.chown(listed, user.pw_uid, user.pw_gid)

        d = daemons(config)

        assert {a["id"] for a in d.status()["agents"]} == {"main", "beta", "own"}
        wait_for(lambda: _foreign_log(mine), what="the user's own workspace is watched and committed")
        for place in (beta / "memory", agents, state, roots_own):
            assert not (place / ".git").exists() and not (place / ".memstrata").exists(), place
            assert not (place / "skills").exists(), place
        assert git(beta, "status", "--porcelain", "--", "memory") == "", "beta's memory/ stays in beta's history"
        reasons = {e["agent"]: e["reason"] for e in _audited(tmp_path / "workspace", "workspace_refused")}
        assert reasons["nested"].startswith("lies inside agent beta's workspace")
        assert reasons["agentsdir"].startswith("is the agents directory")
        assert reasons["state"].startswith("is the state directory")
        assert reasons["rootdir"].startswith(f"is owned by uid 0, not by uid {user.pw_uid}")
        text = run_cli("status", config=config).stdout
        assert all(f"workspace REFUSED: {a}" in text for a in ("nested", "agentsdir", "state", "rootdir"))
        assert d.stop() == 0
    assert (roots_own / "notes.md").read_text() == "root's notes\n" and sorted(os.listdir(roots_own)) == ["notes.md"]


def test_two_spellings_of_one_directory_make_one_agent(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN)
    shared = tmp_path / "elsewhere" / "shared-home"
    shared.mkdir(parents=True)
    (shared / "MEMORY.md").write_text("# MEMORY\n")
    (tmp_path / "alias").symlink_to(tmp_path / "elsewhere")
    _openclaw_json(
        tmp_path,
        {"first": shared, "second": tmp_path / "alias" / "shared-home", "third": shared / ".." / "shared-home"},
    )

    d = daemons(config)

    assert {a["id"] for a in d.status()["agents"]} == {"main", "first"}
    wait_for(lambda: commits(shared), what="first's workspace committed")
    first = (shared / ".memstrata" / "token").read_text().strip()
    assert _search_as(d, first, "first", "MEMORY") is not None
    reasons = {e["agent"]: e["reason"] for e in _audited(tmp_path / "workspace", "workspace_refused")}
    assert reasons["second"].startswith("is agent first's workspace")
    assert reasons["third"].startswith("is agent first's workspace")
    assert d.stop() == 0


def test_the_cli_never_adds_tokens_or_files_where_a_workspace_is_refused(tmp_path):
    """``agent add``, ``agent token`` and every ``--agent`` command judge the workspace as the daemon does."""
    config = init_root(tmp_path, **LEAN)
    run_cli("agent", "add", "beta", config=config)
    agents = tmp_path / "workspace" / "agents"
    beta = agents / "beta-workspace"
    before = _token_file(beta)
    (tmp_path / "link").symlink_to(agents)
    _openclaw_json(tmp_path, {"gamma": tmp_path / "link" / "beta-workspace"})
    outside = tmp_path / "outside"
    outside.mkdir()
    (agents / "zeta-workspace").symlink_to(outside)  # memstrata's own layout, a symlink planted in it

    token = run_cli("agent", "token", "gamma", config=config, check=False)
    assert token.returncode == 1 and "Traceback" not in token.stderr
    assert "of agent gamma refused: is agent beta's workspace" in token.stderr
    note = run_cli("note", "--agent", "gamma", "into beta's memory?", config=config, check=False)
    assert note.returncode == 1 and "is agent beta's workspace" in note.stderr
    zeta = run_cli("agent", "add", "zeta", config=config, check=False)
    assert zeta.returncode == 1 and "of agent zeta refused: is a symbolic link" in zeta.stderr
    assert list(outside.iterdir()) == [], "no template, token or skill written through the link"
    listed = {a["id"] for a in json.loads(run_cli("agent", "list", "--json", config=config).stdout)}
    assert listed == {"main", "beta"}
    assert _token_file(beta) == before
    assert git(beta, "status", "--porcelain", "--", "memory", "MEMORY.md") == ""


def test_a_watched_workspace_whose_parent_becomes_a_symlink_is_dropped(tmp_path, daemons):
    """The path of an OpenClaw agent's workspace that later reaches beta's (its parent swapped for a
    symlink) stops being watched at the next reconcile; beta keeps its token and its answers."""
    config = init_root(tmp_path, **{**LEAN, "watch": {**LEAN["watch"], "reconcile_interval_s": 1}})
    run_cli("agent", "add", "beta", config=config)
    agents = tmp_path / "workspace" / "agents"
    beta = agents / "beta-workspace"
    (beta / "MEMORY.md").write_text("# MEMORY\n\n- beta's private launch plan\n")
    before = _token_file(beta)
    parent = tmp_path / "parent"
    (parent / "beta-workspace").mkdir(parents=True)
    _openclaw_json(tmp_path, {"gamma": parent / "beta-workspace"})
    d = daemons(config)
    assert {a["id"] for a in d.status()["agents"]} == {"main", "beta", "gamma"}
    assert _token_file(beta) == before

    parent.rename(tmp_path / "parent-was")
    parent.symlink_to(agents)  # gamma's path now reaches beta's workspace
    wait_for(lambda: {a["id"] for a in d.status()["agents"]} == {"main", "beta"}, what="gamma no longer watched")
    assert f"gamma: its path {parent / 'beta-workspace'} now reaches another directory" in d.log()
    wait_for(lambda: "workspace REFUSED: gamma" in run_cli("status", config=config).stdout, what="said in status")
    assert _token_file(beta) == before
    assert _search_as(d, before[0].decode().strip(), "beta", "launch plan") == ["MEMORY.md"]
    assert d.stop() == 0
