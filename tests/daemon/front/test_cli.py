"""The CLI as users run it (real subprocesses): agents, ids, notes, core bundle, history, restore."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from tests.helpers import FAKE_AWS_KEY, commits, git, init_root, registry_of, run_cli


@pytest.mark.parametrize("bad_id", ["../evil", "Alpha", "-x", "a/b", ".hidden", "", "x" * 65, "main;rm", "ä"])
def test_invalid_agent_ids_are_refused(tmp_path, bad_id):
    config = init_root(tmp_path)
    proc = run_cli("agent", "add", "--", bad_id, config=config, check=False)
    assert proc.returncode != 0
    assert "invalid agent id" in proc.stderr
    assert sorted(p.name for p in (tmp_path / "workspace" / "agents").iterdir()) == []
    assert not list(tmp_path.parent.glob("*-workspace")) and not list(tmp_path.glob("*-workspace"))


def test_agent_add_creates_workspace_with_git_and_records_registry(tmp_path):
    config = init_root(tmp_path)
    run_cli("agent", "add", "ops-1", "--project", "infra", "--project", "web", config=config)
    ws = tmp_path / "workspace" / "agents" / "ops-1-workspace"
    for name in ("CORE_INDEX.md", "IDENTITY.md", "SOUL.md", "USER.md", "AGENTS.md", "TOOLS.md", "MEMORY.md"):
        assert (ws / name).is_file(), name
    assert not (ws / "shared").exists(), "the shared core lives only in the main workspace"
    assert commits(ws), "the workspace starts with a commit"
    registry = yaml.safe_load(registry_of(tmp_path).read_text())
    assert registry["agents"]["ops-1"]["projects"] == ["infra", "web"]
    assert registry["projects"]["infra"]["members"] == ["ops-1"]
    listed = json.loads(run_cli("agent", "list", "--json", config=config).stdout)
    assert {"id": "ops-1", "workspace": str(ws), "projects": ["infra", "web"]} in listed
    again = run_cli("agent", "add", "ops-1", config=config)
    assert "exists" in again.stdout


def test_unknown_agent_is_a_clear_error(tmp_path):
    config = init_root(tmp_path)
    proc = run_cli("note", "--agent", "nobody", "hello", config=config, check=False)
    assert proc.returncode == 2  # a usage error (daemon/front/failures.py)
    assert "unknown agent 'nobody'" in proc.stderr and "known agents: main" in proc.stderr


def test_note_appends_timestamped_lines_to_todays_file(tmp_path):
    config = init_root(tmp_path)
    run_cli("note", "--agent", "main", "部署了", "Qdrant", config=config)
    run_cli("note", "--agent", "main", config=config, input="from stdin\nsecond line\n")
    path = tmp_path / "workspace" / "memory" / f"{time.strftime('%Y-%m-%d')}.md"
    lines = path.read_text().splitlines()
    assert lines[0] == f"# {time.strftime('%Y-%m-%d')}"
    assert lines[2].endswith(" 部署了 Qdrant") and lines[2].startswith("- ")
    assert lines[3].endswith(" from stdin") and lines[4] == "  second line"


def test_core_bundle_order_budget_and_missing_files(tmp_path):
    config = init_root(tmp_path)
    ws = tmp_path / "workspace"
    (ws / "USER.md").unlink()
    (ws / "SOUL.md").write_text("# SOUL\n" + "记住用户的偏好。\n" * 400)
    out = run_cli("core", "--agent", "main", "--budget", "800", config=config)
    text = out.stdout
    order = [text.index("=== shared/CLUSTER.md"), text.index("=== CORE_INDEX.md"), text.index("=== IDENTITY.md")]
    assert order == sorted(order)
    assert "truncated to the 800-token budget" in text
    assert "missing core files: USER.md" in text
    assert "USER.md" in out.stderr
    data = json.loads(run_cli("core", "--agent", "main", "--budget", "800", "--json", config=config).stdout)
    soul = next(s for s in data["sections"] if s["name"] == "SOUL.md")
    assert data["truncated"] and data["tokens"] <= 800 and soul["truncated"]
    assert soul["text"].endswith("记住用户的偏好。\n"), "cut at a line boundary"
    full = json.loads(run_cli("core", "--agent", "main", "--all", "--budget", "100000", "--json", config=config).stdout)
    names = [s["name"] for s in full["sections"]]
    assert names[-2:] == ["AGENTS.md", "TOOLS.md"] and not full["truncated"]


def test_history_and_restore_bring_back_an_old_version_as_a_new_commit(tmp_path):
    config = init_root(tmp_path)
    ws = tmp_path / "workspace"
    (ws / "MEMORY.md").write_text("version one\n")
    git(ws, "commit", "-qam", "v1")
    (ws / "MEMORY.md").write_text("version two\n")
    git(ws, "commit", "-qam", "v2")
    history = json.loads(run_cli("history", "--agent", "main", "MEMORY.md", "--json", config=config).stdout)
    assert [h["subject"] for h in history[:2]] == ["v2", "v1"]
    out = run_cli("restore", "--agent", "main", "MEMORY.md", "--at", history[1]["sha"][:8], config=config)
    assert "restored MEMORY.md" in out.stdout
    assert (ws / "MEMORY.md").read_text() == "version one\n"
    newest = commits(ws)[0]
    assert newest["subject"].startswith("memstrata: restore MEMORY.md") and ("M", "MEMORY.md") in newest["changes"]
    assert [c["subject"] for c in commits(ws)][1:3] == ["v2", "v1"], "history is never rewritten"


def test_restore_refuses_escapes_bad_revisions_and_secret_versions(tmp_path):
    config = init_root(tmp_path)
    ws = tmp_path / "workspace"
    for args in (["../../etc/passwd", "--at", "HEAD"], ["MEMORY.md", "--at", "--help"], ["MEMORY.md", "--at", "nope"]):
        proc = run_cli("restore", "--agent", "main", *args, config=config, check=False)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, args
    (ws / "TOOLS.md").write_text(f"aws {FAKE_AWS_KEY}\n")
    git(ws, "commit", "-qam", "a person committed a key")
    (ws / "TOOLS.md").write_text("clean\n")
    git(ws, "commit", "-qam", "removed it")
    proc = run_cli("restore", "--agent", "main", "TOOLS.md", "--at", "HEAD~1", config=config, check=False)
    assert proc.returncode == 1 and "aws_access_key" in proc.stderr and FAKE_AWS_KEY not in proc.stderr
    assert (ws / "TOOLS.md").read_text() == "clean\n"


def test_help_explains_every_command(tmp_path):
    top = run_cli("--help").stdout
    for command in ("init", "agent", "run", "status", "core", "note", "history", "restore"):
        assert command in top
    assert "--budget" in run_cli("core", "--help").stdout
