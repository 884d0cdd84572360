"""`memstrata restore` over uncommitted edits: the edits are committed first, never destroyed.

Before the fix, `restore --at HEAD` with uncommitted edits in MEMORY.md wrote HEAD's
content over them, committed nothing and printed "already matches …; nothing to
restore": the edits were in no file and no git object.
"""

from __future__ import annotations

import json
import subprocess

from tests.helpers import FAKE_API_KEY, commits, git, init_root, run_cli


def _objects_holding(ws, text: str) -> bool:
    """Whether any object in the repository (reachable or not) holds ``text``."""
    listing = git(ws, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)")
    for line in listing.splitlines():
        sha, kind = line.split()
        if kind == "blob":
            blob = subprocess.run(["git", "-C", str(ws), "cat-file", "blob", sha], capture_output=True).stdout
            if text.encode() in blob:
                return True
    return False


def test_restore_at_head_commits_the_edits_it_replaces(tmp_path):
    config = init_root(tmp_path)
    ws = tmp_path / "workspace"
    (ws / "MEMORY.md").write_text("committed version\n")
    git(ws, "commit", "-qam", "v1")
    (ws / "MEMORY.md").write_text("an edit nobody committed\n")
    before = len(commits(ws))

    out = json.loads(run_cli("restore", "--agent", "main", "MEMORY.md", "--at", "HEAD", "--json", config=config).stdout)

    assert (ws / "MEMORY.md").read_text() == "committed version\n"
    assert out["changed"] is True and out["kept_edits_commit"] and out["commit"]
    assert git(ws, "show", f"{out['kept_edits_commit']}:MEMORY.md") == "an edit nobody committed\n"
    log = commits(ws)
    assert len(log) == before + 2
    assert log[0]["sha"] == out["commit"] and log[0]["subject"].startswith("memstrata: restore MEMORY.md")
    assert log[1]["sha"] == out["kept_edits_commit"]
    assert log[1]["subject"].startswith("memstrata: keep uncommitted edits of MEMORY.md before restoring it to")
    assert git(ws, "status", "--porcelain", "--", "MEMORY.md") == ""


def test_restore_says_truthfully_what_it_did(tmp_path):
    config = init_root(tmp_path)
    ws = tmp_path / "workspace"
    (ws / "MEMORY.md").write_text("v1\n")
    git(ws, "commit", "-qam", "v1")
    (ws / "MEMORY.md").write_text("v2\n")
    git(ws, "commit", "-qam", "v2")
    (ws / "MEMORY.md").write_text("v3, not committed\n")

    text = run_cli("restore", "--agent", "main", "MEMORY.md", "--at", "HEAD~1", config=config).stdout
    assert "kept the uncommitted edits of MEMORY.md as commit" in text
    assert "restored MEMORY.md from" in text and "nothing to restore" not in text
    assert (ws / "MEMORY.md").read_text() == "v1\n"
    assert _objects_holding(ws, "v3, not committed")

    again = run_cli("restore", "--agent", "main", "MEMORY.md", "--at", "HEAD", "--json", config=config).stdout
    again = json.loads(again)
    assert again == {**again, "changed": False, "commit": None, "kept_edits_commit": None}
    plain = run_cli("restore", "--agent", "main", "MEMORY.md", "--at", "HEAD", config=config).stdout
    assert "already matches" in plain and "kept" not in plain


def test_uncommitted_edits_holding_a_secret_are_refused_not_committed(tmp_path):
    config = init_root(tmp_path)
    ws = tmp_path / "workspace"
    (ws / "MEMORY.md").write_text("v1\n")
    git(ws, "commit", "-qam", "v1")
    (ws / "MEMORY.md").write_text(f"work in progress\nkey {FAKE_API_KEY}\n")
    before = len(commits(ws))

    proc = run_cli("restore", "--agent", "main", "MEMORY.md", "--at", "HEAD", config=config, check=False)

    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "uncommitted edits" in proc.stderr and "line 2" in proc.stderr and "nothing was restored" in proc.stderr
    assert FAKE_API_KEY not in proc.stderr + proc.stdout
    assert (ws / "MEMORY.md").read_text() == f"work in progress\nkey {FAKE_API_KEY}\n", "the edits are untouched"
    assert len(commits(ws)) == before and not _objects_holding(ws, FAKE_API_KEY)
