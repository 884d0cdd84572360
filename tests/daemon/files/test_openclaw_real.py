"""memstrata beside the real OpenClaw 2026.9.6 (issue 49, items 1, 2 and 4), its layout made by OpenClaw itself.

tests/daemon/files/test_openclaw_roster.py checks discovery against the file OpenClaw wrote
(fixtures/openclaw-2026.9.6.json5); here OpenClaw is run for real (tests/openclaw_install.py:
``make test-deps`` installs it with the Node 24 it needs): ``openclaw onboard --non-interactive``,
``openclaw agents add research --role researcher`` (placed inside main's workspace) and ``openclaw
agents add work --workspace ~/.openclaw/workspace-work``, then ``memstrata init --root`` on its state
dir and the daemon.  Every agent is found, its own; an agent OpenClaw adds while the daemon runs is
found within 20 s; memstrata keeps out of OpenClaw's ``state/`` and out of the pushed repositories;
no file OpenClaw wrote changes; OpenClaw's own ``memory`` and ``skills`` commands still answer.

One scenario, one OpenClaw: each OpenClaw command is seconds of CPU (a minute of wall time on a
loaded machine), so the layout is made once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from daemon.front.daemon_client import DaemonClient
from tests.helpers import LEAN, commits, committed, file_at_head, git, init_root, wait_for
from tests.openclaw_install import OpenClaw, file_hashes, short_home

pytestmark = pytest.mark.slow

NOTES = {"main": "lighthouse", "research": "quokka", "work": "invoice", "writer": "sonnet"}


def _note(workspace: Path, agent: str) -> str:
    """A daily note an agent would write, with a word of its own."""
    (workspace / "memory").mkdir(exist_ok=True)
    (workspace / "memory" / "2026-12-07.md").write_text(f"# 2026-12-07\n\n- {agent} noted the {NOTES[agent]}\n")
    return "memory/2026-12-07.md"


def _search(d, agent: str, workspace: Path, query: str) -> list[str]:
    """L3 search as the agent itself: with the token the daemon wrote in its workspace."""
    token = (workspace / ".memstrata" / "token").read_text().strip()
    with DaemonClient(d.socket, timeout=60, token=token) as client:
        return [r["path"] for r in client.search(agent, query)["results"]]


def _found(d, agent: str, workspace: Path) -> None:
    """Found and provisioned: a token, the repository with a first commit, the token excluded from it."""
    wait_for(
        lambda: (workspace / ".memstrata" / "token").is_file() and commits(workspace),
        timeout=60,
        what=f"{agent}: a token and a first commit in {workspace}\n{d.log()}",
    )
    assert "/.memstrata/" in (workspace / ".git" / "info" / "exclude").read_text().splitlines()
    assert ".memstrata" not in git(workspace, "status", "--porcelain"), f"{agent}: the token is never pushed"


def _owned(d, agent: str, workspace: Path) -> None:
    """Its own note committed, indexed and found by a search as itself."""
    rel = _note(workspace, agent)
    wait_for(lambda: rel in git(workspace, "ls-files"), timeout=60, what=f"{agent}'s note committed")
    wait_for(
        lambda: rel in _search(d, agent, workspace, NOTES[agent]), timeout=60, what=f"{agent}'s note found as {agent}"
    )


def _dreamed(oc: OpenClaw, d, main: Path) -> None:
    """memory-core's dreaming rewrites MEMORY.md atomically (a temp file ``MEMORY.md.promotion.<pid>.<uuid>.tmp``
    renamed over it, as strace showed); ``openclaw memory promote --apply`` runs that same write with no LLM
    (the deep phase's promotion, append-only when no model consolidates).  A search as the operator records
    the recall it promotes.  The daemon commits and indexes the new MEMORY.md as it would any other save."""
    memory = main / "MEMORY.md"
    memory.write_text("# Memory\n\nMain prefers short reports.\n")
    wait_for(lambda: "MEMORY.md" in git(main, "ls-files"), timeout=60, what="main's MEMORY.md committed")
    inode = memory.stat().st_ino
    oc.run("memory", "index", "--agent", "main")
    found = json.loads(oc.run("memory", "search", NOTES["main"], "--agent", "main", "--json").stdout)
    assert any(r["path"] == "memory/2026-12-07.md" for r in found["results"]), found
    thresholds = ["--min-score", "0", "--min-recall-count", "0", "--min-unique-queries", "0"]
    promoted = json.loads(oc.run("memory", "promote", "--agent", "main", "--apply", "--json", *thresholds).stdout)
    content = memory.read_text()
    assert memory.stat().st_ino != inode, "replaced by a rename, not written in place"
    assert "Promoted From Short-Term Memory" in content and NOTES["main"] in content, promoted
    wait_for(lambda: file_at_head(main, "MEMORY.md") == content, timeout=60, what=f"the promotion committed\n{d.log()}")
    assert committed(main, "M", "MEMORY.md")
    assert not [p for p in git(main, "ls-files").splitlines() if ".promotion." in p], "its temp file never committed"
    wait_for(lambda: "MEMORY.md" in _search(d, "main", main, NOTES["main"]), timeout=60, what="the promotion indexed")


@pytest.fixture
def home():
    with short_home() as path:
        yield path


def test_every_agent_the_real_openclaw_makes_is_found_and_openclaw_keeps_working(home, daemons):
    oc = OpenClaw(home).onboard()
    state, main = oc.state, oc.state / "workspace"
    research = Path(oc.add_agent("research", role="researcher")["workspace"])
    work = Path(oc.add_agent("work", workspace="~/.openclaw/workspace-work")["workspace"])
    assert research == main / "research", "OpenClaw 2026.9 nests an agent added without a workspace in main's"
    assert work == state / "workspace-work", "OpenClaw expands ~ with its $HOME"
    assert set(oc.config()["agents"]["entries"]) == {"main", "research", "work"}
    before = file_hashes(state)
    openclaw_state = sorted(os.listdir(state / "state"))

    # the periodic reconcile an hour away: an agent found while the daemon runs was found by the watch
    config = init_root(state, **{**LEAN, "watch": {**LEAN["watch"], "reconcile_interval_s": 3600}})
    assert (state / "memstrata" / "state" / "admin.token").is_file(), "memstrata's state: a folder of its own"
    d = daemons(config)
    workspaces = {"main": main, "research": research, "work": work}
    for agent, workspace in workspaces.items():
        _found(d, agent, workspace)
    assert {a["id"] for a in d.status()["agents"]} == set(workspaces)
    for agent, workspace in workspaces.items():
        _owned(d, agent, workspace)
    assert _search(d, "main", main, NOTES["research"]) == [], "main's index holds none of research's (nested) files"
    assert _search(d, "research", research, NOTES["main"]) == [], "nor research's any of main's"
    assert not [p for p in git(main, "ls-files").splitlines() if p.startswith("research/")]
    assert "/research/" in (main / ".git" / "info" / "exclude").read_text().splitlines()
    assert "research/" not in git(main, "status", "--porcelain"), "research's repository is not main's to list"

    after = file_hashes(state)
    changed = sorted(rel for rel, digest in before.items() if after.get(rel) != digest)
    assert changed == [], f"OpenClaw's files changed by install, daemon and commits: {changed}"
    assert sorted(os.listdir(state / "state")) == openclaw_state, "OpenClaw's state/ holds OpenClaw's files only"

    # an agent OpenClaw adds while the daemon runs: found by the watch on openclaw.json
    writer = Path(oc.add_agent("writer", role="writer")["workspace"])
    _found(d, "writer", writer)  # measured: under a second after OpenClaw renamed its openclaw.json
    _owned(d, "writer", writer)

    # OpenClaw's own commands still answer, and see memstrata's skill as usable
    status = oc.run("memory", "status", "--agent", "main", "--json")
    assert json.loads(status.stdout), status.stdout
    _dreamed(oc, d, main)
    listed = oc.run("skills", "list", "--agent", "research", "--json")
    mine = [s for s in json.loads(listed.stdout)["skills"] if s["name"] == "mem0-integration"]
    assert mine and mine[0]["eligible"] and mine[0]["modelVisible"], listed.stdout
    assert not any(mine[0]["missing"].values()), mine[0]["missing"]
    assert "mem0-integration" not in listed.stderr, f"a warning about the skill: {listed.stderr}"
    assert d.stop() == 0
