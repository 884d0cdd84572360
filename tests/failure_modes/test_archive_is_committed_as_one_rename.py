"""Archiving old daily files: each move is one rename commit, nothing left staged.

Before the fix, the archive commit held only `A memory/archive/…`; the deletion of
the old path stayed staged (`D  memory/…` in `git status`) and later commits named
the old path.
"""

from __future__ import annotations

import time

from tests.helpers import LEAN, git, init_root, run_cli, wait_for

OLD = "memory/2020-03-04.md"
NEW = "memory/archive/2020/2020-03-04.md"


def _rename_commit(ws, src: str, dst: str) -> str | None:
    """The sha of a commit whose only change is the rename src → dst (rename detection on)."""
    out = git(ws, "log", "-M", "--format=\x1e%H", "--name-status")
    for block in out.split("\x1e")[1:]:
        sha, _, rest = block.partition("\n")
        lines = [line.split("\t") for line in rest.strip().splitlines() if line.strip()]
        if len(lines) == 1 and lines[0][0].startswith("R") and lines[0][1:] == [src, dst]:
            return sha
    return None


def test_archive_move_is_one_rename_and_history_follows_it(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN, daily={"archive_after_days": 30})
    ws = tmp_path / "workspace"
    (ws / OLD).write_text("very old\n")
    git(ws, "add", OLD)
    git(ws, "commit", "-qm", "a person's own commit")
    (ws / "memory" / "2020-05-06.md").write_text("old, never committed\n")
    d = daemons(config)

    sha = wait_for(lambda: _rename_commit(ws, OLD, NEW), what="a rename commit")
    show = git(ws, "show", "-M", "--name-status", "--format=%s", sha)
    assert f"R100\t{OLD}\t{NEW}" in show and show.startswith("memstrata: archive")
    assert git(ws, "log", "--follow", "--format=%s", "--", NEW).splitlines()[-1] == "a person's own commit"
    # the file that was never committed is archived too, and committed at its new place only
    wait_for(lambda: git(ws, "log", "--format=%H", "--", "memory/archive/2020/2020-05-06.md"), what="archived")
    assert not (ws / "memory" / "2020-05-06.md").exists()
    wait_for(lambda: git(ws, "status", "--porcelain", "--", "memory") == "", what="nothing left staged")

    # later commits never name the old paths again
    run_cli("note", "--agent", "main", "a later note", config=config)
    today = f"memory/{time.strftime('%Y-%m-%d')}.md"
    wait_for(lambda: git(ws, "log", "--format=%H", "--", today), what="the note committed")
    later = git(ws, "log", "-1", "--name-status", "--format=", "--", today)
    assert OLD not in later and "2020-05-06" not in later
    assert git(ws, "status", "--porcelain", "--", "memory") == ""
    history = run_cli("history", "--agent", "main", NEW, config=config).stdout
    assert "a person's own commit" in history and "memstrata: archive" in history
    assert not d.agent("main")["pending_commit"]
