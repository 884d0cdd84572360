"""A stock OpenClaw host (a real daemon): the agents ``openclaw.json`` (JSON5) lists (at
``<state-dir>/workspace-<agentId>`` when they name no workspace) are discovered, watched and
committed, and so is every ``workspace-<agentId>`` where no ``openclaw.json`` is; the file is read, never
written, and hostile entries (bad ids, symlinks, relative or state-swallowing paths, a file that
does not parse) cost only themselves; each refusal is one log line."""

from __future__ import annotations

import json

from tests.helpers import LEAN, commits, git, init_root, run_cli, wait_for

OPENCLAW_JSON = """// OpenClaw's own configuration: JSON5
{
  agents: {
    list: [
      {id: "main"},
      {id: "alpha"},                                   // <state-dir>/workspace-alpha
      {id: "beta", workspace: "%(beta)s", agentDir: "~/.openclaw/agents/beta",},
      {id: "Bad/Id", workspace: "%(beta)s"},
      {id: "linked", workspace: "%(linked)s"},
      {id: "relative", workspace: "some/where"},
      {id: "everything", workspace: "/"},
      {id: "later"},                                   // not made yet
    ],
  },
}
"""


def test_openclaw_layout_is_discovered_read_only(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN)
    alpha = tmp_path / "workspace-alpha"  # paths.root is OpenClaw's state dir
    alpha.mkdir()
    (alpha / "MEMORY.md").write_text("# MEMORY\n\n- alpha's own memory\n")
    beta = tmp_path / "elsewhere" / "beta-home"
    beta.mkdir(parents=True)
    (beta / "MEMORY.md").write_text("# MEMORY\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "linked-target").symlink_to(outside)
    (tmp_path / "workspace-gamma").symlink_to(outside)  # no roster lists gamma: nobody's, never followed
    (tmp_path / "workspace-stray").mkdir()  # a stray folder: the roster decides, not the name
    (tmp_path / "workspace-Bad").mkdir()  # not a valid agent id
    text = OPENCLAW_JSON % {"beta": beta, "linked": tmp_path / "linked-target"}
    (tmp_path / "openclaw.json").write_text(text)

    listed = {a["id"]: a["workspace"] for a in json.loads(run_cli("agent", "list", "--json", config=config).stdout)}
    assert listed == {"main": str(tmp_path / "workspace"), "alpha": str(alpha), "beta": str(beta)}
    d = daemons(config)
    wait_for(lambda: commits(alpha) and commits(beta), what="alpha's and beta's workspaces committed")
    (alpha / "memory").mkdir(exist_ok=True)
    (alpha / "memory" / "2026-11-30.md").write_text("# 2026-11-30\n\n- deployed qdrant\n")
    wait_for(lambda: "memory/2026-11-30.md" in git(alpha, "ls-files"), what="an edit in alpha committed (watched)")
    found = json.loads(run_cli("search", "deployed", "--agent", "alpha", "--json", config=config).stdout)
    assert [r["path"] for r in found["results"]] == ["memory/2026-11-30.md"]
    assert {a["id"] for a in d.status()["agents"]} == {"main", "alpha", "beta"}
    assert (tmp_path / "openclaw.json").read_text() == text, "OpenClaw's file is never written"
    assert list(outside.iterdir()) == [], "nothing written through a symlink"
    log = d.log()
    assert "'Bad/Id' is not a valid agent id" in log
    assert f"workspace {tmp_path / 'linked-target'} of agent linked refused: is a symbolic link" in log
    assert "gamma" not in log and "stray" not in log, "a workspace-<id> no roster lists is not looked at"
    assert not (tmp_path / "workspace-stray" / ".git").exists() and list((tmp_path / "workspace-stray").iterdir()) == []
    assert "relative: workspace 'some/where' is not an absolute path" in log
    assert "workspace / of agent everything refused: is the system directory /" in log
    assert "another agent's" not in log, "alpha, listed and found by name at the same place, is one agent"
    assert d.stop() == 0


def test_an_openclaw_json_that_does_not_parse_costs_only_its_own_agents(tmp_path):
    config = init_root(tmp_path, **LEAN)
    (tmp_path / "workspace-alpha").mkdir()
    (tmp_path / "openclaw.json").write_text("{agents: {list: [{id: 'beta',}" + "[" * 5000)
    listed = json.loads(run_cli("agent", "list", "--json", config=config).stdout)
    assert [a["id"] for a in listed] == ["main", "alpha"]
    (tmp_path / "openclaw.json").unlink()
    (tmp_path / "openclaw.json").symlink_to(tmp_path / "memstrata.yaml")
    listed = json.loads(run_cli("agent", "list", "--json", config=config).stdout)
    assert [a["id"] for a in listed] == ["main", "alpha"]
    unknown = run_cli("note", "--agent", "beta", "x", config=config, check=False)
    assert unknown.returncode == 2 and "known agents: main, alpha" in unknown.stderr


def test_an_openclaw_workspace_made_while_running_is_found_and_watched(tmp_path, daemons):
    config = init_root(tmp_path, **{**LEAN, "watch": {**LEAN["watch"], "reconcile_interval_s": 1}})
    d = daemons(config)
    delta = tmp_path / "workspace-delta"
    delta.mkdir()
    (delta / "MEMORY.md").write_text("# MEMORY\n")
    wait_for(lambda: any(a["id"] == "delta" for a in d.status()["agents"]), what="delta found by a reconcile")
    wait_for(lambda: str(delta) in d.status()["watcher"]["roots"], what="delta's workspace watched")
    assert "restarting the watcher: the workspaces to watch changed" in d.log()
    wait_for(lambda: commits(delta), what="delta's workspace committed")
    assert d.stop() == 0
