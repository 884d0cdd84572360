"""The main agent's ``shared/`` cannot bring a spoke's private notes into every agent's index.

Before: ``agents_dir`` lies inside the main workspace, so ``shared/peer.md ->
../agents/beta-workspace/MEMORY.md`` passed the "inside the workspace" check, and the
shared core, which is indexed into every agent's index and sent in every agent's core
bundle, carried beta's private notes to all of them.

Now no symlink is followed in any component of a memory file's path, and a file with a
second hard link (another file under a second name) is not read: a file of ``shared/``
is a regular file inside ``shared/`` or nothing (a linked file is reported under both names,
and read under neither).  Nothing of beta's workspace enters
another agent's index or core bundle, by any of the three ways in.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.helpers import LEAN, init_root, run_cli, wait_for

MARKER = "zebraquokka" + "betaonly"


def _search(config: Path, agent: str) -> list[str]:
    out = run_cli("search", MARKER, "--agent", agent, "--json", "--mode", "fts", config=config).stdout
    return [r["path"] for r in json.loads(out)["results"]]


def _raw_index_hits(root: Path, agent: str) -> list[str]:
    files = sorted((root / "agents" / agent / "memstrata").glob("index.sqlite*"))
    return [p.name for p in files if MARKER.encode() in p.read_bytes()]


def test_a_shared_file_leading_into_a_spoke_is_never_read(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN)
    ws = tmp_path / "workspace"
    for agent in ("alpha", "beta"):
        run_cli("agent", "add", agent, config=config)
    beta = ws / "agents" / "beta-workspace"
    (beta / "MEMORY.md").write_text(f"# MEMORY\n\n- {MARKER}: beta's private note\n")
    shared = ws / "shared"
    shared.mkdir(exist_ok=True)
    (shared / "rules.md").write_text("# Rules\n\n- the shared core still works\n")
    # 1. a symlink inside shared/ that "stays inside the main workspace"
    (shared / "peer.md").symlink_to("../agents/beta-workspace/MEMORY.md")
    # 2. a second name for a file of beta's (root, or the file's owner, may link it)
    (beta / "memory" / "2026-10-01.md").write_text(f"- {MARKER} in a daily note\n")
    os.link(beta / "memory" / "2026-10-01.md", shared / "linked.md")
    # 3. a directory of shared/ that is a symlink into the spoke
    (shared / "spoke").symlink_to("../agents/beta-workspace")
    d = daemons(config)

    def main_skipped() -> dict:
        skipped = {s["path"]: s["reason"] for s in d.agent("main")["skipped"]}
        return skipped if {"shared/peer.md", "shared/linked.md", "shared/spoke"} <= set(skipped) else {}

    skipped = wait_for(main_skipped, what="the three ways in reported by the main agent")
    assert "symbolic link" in skipped["shared/peer.md"] and "symbolic link" in skipped["shared/spoke"]
    assert "hard links" in skipped["shared/linked.md"]
    wait_for(lambda: _search(config, "beta") == ["MEMORY.md"], what="beta's own note indexed (the check can fail)")
    # the linked file is not read under either name: which name is the "real" one cannot be told
    beta_skipped = {s["path"]: s["reason"] for s in d.agent("beta")["skipped"]}
    assert "hard links" in beta_skipped["memory/2026-10-01.md"]
    wait_for(
        lambda: "shared core still works" in run_cli("core", "--agent", "alpha", config=config).stdout,
        what="the regular shared file reaches alpha",
    )
    for agent in ("main", "alpha"):
        assert _search(config, agent) == [], agent
        assert _raw_index_hits(tmp_path, agent) == [], agent
        assert MARKER not in run_cli("core", "--agent", agent, config=config).stdout
        run_cli("reindex", "--agent", agent, config=config)
        assert _search(config, agent) == [] and _raw_index_hits(tmp_path, agent) == [], f"{agent} after reindex"
    assert d.stop() == 0
