"""The common room's in-process tests: tokens, the audit log, echoing, limits, workspaces, reads, the skill.

What every other room (and the front) relies on, called directly on temporary
directories and on a root ``memstrata init`` made: real files with their modes,
real git for new workspaces, real flocks on the state lock.  tests/daemon/common/
test_config.py, test_guard.py, test_jobs.py and test_storage.py cover the
configuration, the secret guard, the jobs and the storage health.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from daemon.common import skill
from daemon.common.audit import AuditLog
from daemon.common.config import load_config
from daemon.common.daemon_limits import MAX_ECHO_CHARS, MAX_QUERY_CHARS, QueryTooLongError, check_query
from daemon.common.domain_errors import DaemonError, StateUnreadableError
from daemon.common.echo import capped, cut, shown
from daemon.common.fileread import NOT_UTF8, SKIP_LINKED, SKIP_SYMLINK, peek, read_version
from daemon.common.guard import SecretGuard
from daemon.common.settings import acquire_state_lock
from daemon.common.tokens import ADMIN, TOKEN_ENV, TokenStore, caller_token, own_token
from daemon.common.workspaces import (
    UnknownAgentError,
    create_workspace,
    discover,
    get_agent,
    is_editor_temp,
    is_memory_path,
    spoke_id,
)
from layers.common.ids import InvalidIdError
from layers.common.safefs import UnsafePathError
from tests.helpers import FAKE_API_KEY, commits


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ---------------------------------------------------------------- tokens


def test_a_token_identifies_its_agent_until_a_new_one_is_issued(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store = TokenStore(tmp_path / "state")
    store.ensure_admin()
    assert store.ensure("alpha", workspace) is True and store.ensure("alpha", workspace) is False
    token = (workspace / ".memstrata" / "token").read_text().strip()
    assert _mode(workspace / ".memstrata" / "token") == 0o600 and _mode(workspace / ".memstrata") == 0o700
    assert _mode(tmp_path / "state" / "tokens.json") == 0o600 and _mode(store.admin_path) == 0o600
    assert token not in (tmp_path / "state" / "tokens.json").read_text(), "only its digest is kept"
    checker = TokenStore(tmp_path / "state")  # the daemon's, reading what the CLI wrote
    assert checker.identify(token) == "alpha" and checker.identify(store.admin_path.read_text().strip()) == ADMIN
    assert checker.identify("forged") is None and checker.identify(None) is None and checker.identify("") is None
    new = store.issue("alpha", workspace)
    assert checker.identify(new) == "alpha" and checker.identify(token) is None, "the old one stops at once"


def test_a_token_is_never_written_or_read_through_a_symlink(tmp_path):
    workspace, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    workspace.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, workspace / ".memstrata")
    with pytest.raises(UnsafePathError):
        TokenStore(tmp_path / "state").ensure("alpha", workspace)
    assert list(elsewhere.iterdir()) == []
    token, why = own_token(tmp_path / "state", "alpha", workspace)
    assert token is None and "never read through a symlink" in why


def test_an_unreadable_tokens_file_says_how_to_fix_it(tmp_path):
    store = TokenStore(tmp_path)
    (tmp_path / "tokens.json").write_text("{not json")
    with pytest.raises(StateUnreadableError, match="memstrata agent token"):
        store.identify("anything")


def test_which_token_a_client_presents(tmp_path, monkeypatch):
    state, workspace = tmp_path / "state", tmp_path / "ws"
    workspace.mkdir()
    store = TokenStore(state)
    agent_token = store.issue("alpha", workspace)
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert caller_token(state, workspace) == agent_token
    store.ensure_admin()
    admin = store.admin_path.read_text().strip()
    assert caller_token(state, workspace) == admin, "whoever can read the state acts as the administrator"
    assert own_token(state, "alpha", workspace) == (agent_token, None), "a per-agent front never does"
    monkeypatch.setenv(TOKEN_ENV, admin)
    token, why = own_token(state, "alpha", workspace)
    assert token is None and "administrator's token" in why and admin not in why
    monkeypatch.setenv(TOKEN_ENV, "given-by-the-caller")
    assert caller_token(state, workspace) == "given-by-the-caller"


# ---------------------------------------------------------------- the audit log and what is echoed


def _events(directory: Path) -> list[dict]:
    return [json.loads(line) for p in sorted(directory.glob("*.log")) for line in p.read_text().splitlines()]


def test_the_audit_log_cuts_redacts_and_folds_what_it_is_given(tmp_path):
    guard = SecretGuard([("api_key", r"sk-[A-Za-z0-9]{20,}")])
    audit = AuditLog(tmp_path / "audit", guard=lambda: guard)
    audit.record("write_denied", agent="alpha", project="p" * 100_000)
    audit.record("write_denied", agent="alpha", project="p" * 100_000)
    audit.record("secret_refused", agent="alpha", value=f"the key {FAKE_API_KEY}")
    (first, secret) = _events(tmp_path / "audit")
    assert len(first["project"]) < MAX_ECHO_CHARS + 40 and first["project"].endswith("(100,000 characters)")
    assert FAKE_API_KEY not in json.dumps(secret) and "[redacted" in secret["value"]
    audit.flush()
    folded = _events(tmp_path / "audit")[-1]
    assert folded["event"] == "write_denied" and folded["repeated"] == 1 and "since" in folded


def test_an_audit_log_inside_a_workspace_never_follows_its_symlinks(tmp_path):
    workspace, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    workspace.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, workspace / "logs")
    audit = AuditLog(workspace / "logs" / "security", confine=workspace)
    with pytest.raises(UnsafePathError):
        audit.ensure_directory()
    audit.record("impersonation_denied", caller="beta", agent="alpha")  # logged as an error, never raised
    assert list(elsewhere.iterdir()) == []


def test_echoed_values_are_short_and_say_what_they_were():
    assert cut("short") == "short"
    long = cut("x" * 5_000_000)
    assert long.startswith("x" * MAX_ECHO_CHARS) and long.endswith("… (5,000,000 characters)")
    redact = SecretGuard([("api_key", r"sk-[A-Za-z0-9]{20,}")]).redact
    tail = cut("a" * (MAX_ECHO_CHARS - 10) + FAKE_API_KEY, redact)
    assert "sk-" not in tail and "testkey" not in tail, "a secret cut by the limit is still recognised whole"
    assert shown({"a": 1}) == "an object" and shown([1]) == "a list" and shown("x") == "'x'" and shown(None) == "None"
    big = capped({"k": list(range(100)), "deep": {"a": {"b": {"c": {"d": 1}}}}})
    assert big["k"][-1] == "… 84 more items" and big["deep"]["a"]["b"] == "(an object of 1 keys)"


def test_a_query_over_the_limit_is_refused_with_both_figures():
    check_query("x" * MAX_QUERY_CHARS)
    with pytest.raises(
        QueryTooLongError, match=f"{MAX_QUERY_CHARS + 1:,} characters; the limit is {MAX_QUERY_CHARS:,}"
    ):
        check_query("x" * (MAX_QUERY_CHARS + 1))


# ---------------------------------------------------------------- workspaces


def test_which_paths_of_a_workspace_are_memory():
    for rel in ("MEMORY.md", "SOUL.md", "memory/2026-11-30.md", "memory/archive/2025/x.md", "shared/TEAM.md"):
        assert is_memory_path(rel), rel
    for rel in ("skills/x.py", "logs/a.log", "memory/.git/HEAD", "../MEMORY.md", "memory/.x.md.swp", "memory/"):
        assert not is_memory_path(rel), rel
    assert is_editor_temp("4913") and is_editor_temp("#MEMORY.md#") and not is_editor_temp("MEMORY.md")
    assert spoke_id("alpha-workspace") == "alpha"
    assert spoke_id("main-workspace") is None and spoke_id("Alpha-workspace") is None and spoke_id("alpha") is None


def test_a_spoke_workspace_is_made_from_the_template_once_with_git(service_root):
    config = load_config(service_root)
    agent, created = create_workspace(config, "ops-1")
    assert created and agent.workspace == config.paths.agents_dir / "ops-1-workspace"
    assert (agent.workspace / "MEMORY.md").is_file() and not (agent.workspace / "shared").exists()
    assert len(commits(agent.workspace)) == 1
    (agent.workspace / "MEMORY.md").write_text("mine\n")
    assert create_workspace(config, "ops-1") == (agent, False), "an existing workspace is never overwritten"
    assert (agent.workspace / "MEMORY.md").read_text() == "mine\n"
    assert [a.id for a in discover(config)] == ["main", "ops-1"]
    assert not [p for p in config.paths.agents_dir.iterdir() if p.name.startswith(".new-")], "staged, then renamed"


def test_an_unknown_or_invalid_agent_is_a_clear_error(service_root):
    config = load_config(service_root)
    with pytest.raises(UnknownAgentError, match=r"unknown agent 'nobody'.*known agents: main"):
        get_agent(config, "nobody")
    with pytest.raises(InvalidIdError):
        get_agent(config, "../main")


# ---------------------------------------------------------------- one read per file version


def test_a_file_is_read_once_from_its_fd_or_said_why_not(tmp_path):
    (tmp_path / "memory").mkdir()
    (tmp_path / "MEMORY.md").write_text("# MEMORY\nplain\n")
    first = read_version(tmp_path, "MEMORY.md", 1024)
    assert first.usable and first.text() == "# MEMORY\nplain\n" and first.sha256
    again = read_version(tmp_path, "MEMORY.md", 1024, known=(first.identity, first.sha256))
    assert again.data is None and again.sha256 == first.sha256, "the same version is not read again"
    assert peek(tmp_path, "MEMORY.md", 1024).identity == first.identity

    os.symlink(tmp_path / "MEMORY.md", tmp_path / "memory" / "link.md")
    os.link(tmp_path / "MEMORY.md", tmp_path / "memory" / "hard.md")
    (tmp_path / "memory" / "big.md").write_bytes(b"x" * 2048)
    (tmp_path / "memory" / "latin.md").write_bytes(b"caf\xe9\n")
    assert read_version(tmp_path, "memory/link.md", 1024).skip == SKIP_SYMLINK
    assert read_version(tmp_path, "memory/hard.md", 1024).skip == SKIP_LINKED
    assert "larger than watch.max_file_mb" in read_version(tmp_path, "memory/big.md", 1024).skip
    latin = read_version(tmp_path, "memory/latin.md", 1024)
    assert latin.usable and latin.index_skip == NOT_UTF8 and latin.text() is None
    assert read_version(tmp_path, "memory/gone.md", 1024).exists is False


# ---------------------------------------------------------------- the state lock


def test_one_process_at_a_time_owns_the_state_and_the_refusal_names_the_holder(tmp_path):
    held = acquire_state_lock(tmp_path / "state", "memstrata backup")
    try:
        assert _mode(tmp_path / "state") == 0o700
        with pytest.raises(DaemonError, match=r"\(memstrata backup\) is already running"):
            acquire_state_lock(tmp_path / "state", "memstrata reindex")
    finally:
        held.close()
    acquire_state_lock(tmp_path / "state", "memstrata reindex").close()


# ---------------------------------------------------------------- the skill in a workspace


def test_the_skill_is_installed_refreshed_with_a_backup_of_edits_and_never_through_a_symlink(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    launcher = skill.Launcher("/venv/bin/python", str(skill.CHECKOUT), "/etc/memstrata.yaml", "alpha")
    assert skill.sync_skill(workspace, launcher)
    target = workspace / skill.SKILL_REL
    written = json.loads((target / skill.LAUNCHER).read_text())
    assert (written["python"], written["agent"]) == ("/venv/bin/python", "alpha")
    assert skill.sync_skill(workspace, launcher) == [], "a second sync changes nothing"

    (target / "mem0_client.py").write_text("# the agent's own edit\n")
    assert skill.sync_skill(workspace, launcher)
    (backup_file,) = target.glob("mem0_client.py.bak-*")
    assert backup_file.read_text() == "# the agent's own edit\n"
    assert (target / "mem0_client.py").read_bytes() == (skill.source_dir() / "mem0_client.py").read_bytes()

    other, elsewhere = tmp_path / "other", tmp_path / "elsewhere"
    other.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, other / "skills")
    with pytest.raises(UnsafePathError):
        skill.sync_skill(other, launcher)
    assert list(elsewhere.iterdir()) == []
