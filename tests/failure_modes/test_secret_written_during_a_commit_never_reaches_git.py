"""A key appended to a file while the daemon's commit is under way never reaches git.

Before the fix the commit checked each file by reading it, then ran ``git add``
and ``git commit -- PATHS``, which takes the files from the work tree once more:
a key written after the check (here, while the commit reads a 32 MB file that
sorts after it) went into history, and status listed nothing held back.  Now
the commit is built from what git staged: every staged blob is read back from
git's object store and scanned (layers/daily/git/commit.py, daemon/files/commits.py), and a
blob with a key is held back, whatever the file held when it was checked.

Deterministic without hooks (the daemon never runs an agent's hooks): the test
watches the big file's opens with inotify; the edit flow's read comes first and
is followed by quiet, and the next open is the commit's (git hashing the file,
in index order, before the small file that sorts after it).  The key is
appended at that moment.
"""

from __future__ import annotations

import subprocess

from inotify_simple import INotify, flags

from tests.helpers import FAKE_API_KEY, committed, git, init_root, run_cli, wait_for

BIG = "memory/0-big.md"  # new, and first in git's order
SMALL = "memory/a.md"  # committed before; edited now, and again while the commit runs


def _in_git_anywhere(repo_args: list[str], needle: str) -> bool:
    out = subprocess.run(
        ["git", *repo_args, "log", "--all", "-p"], capture_output=True, text=True, errors="replace"
    ).stdout
    return needle in out


def test_a_key_written_while_the_commit_runs_is_held_back_not_committed(tmp_path, daemons):
    config = init_root(
        tmp_path,
        watch={"debounce_ms": 100, "max_file_mb": 64},  # under the limit: the big file is read once and versioned
        git={"quiet_period_s": 3, "max_delay_s": 60},
        vectors={"backend": "off"},
        conversation={"enabled": False},
    )
    ws = tmp_path / "workspace"
    (ws / SMALL).write_text("# a\n")
    git(ws, "add", SMALL)
    git(ws, "commit", "-qm", "a person's commit")
    d = daemons(config)

    line = "- a long list of ordinary notes about the staging box, nothing secret in it\n"
    # not UTF-8 (a Latin-1 byte first): versioned, not indexed, so the test waits on git, not on FTS5
    # written outside the workspace and watched before it moves in: written in place, the daemon could
    # read it before the watch was set, and the first open seen was then the commit's (1 run in 3 here)
    outside = tmp_path / "big.tmp"
    outside.write_bytes(b"caf\xe9\n" + (line * (32_000_000 // len(line))).encode())
    watch = INotify()
    watch.add_watch(str(outside), flags.OPEN)  # an inode watch: it follows the file into the workspace
    outside.rename(ws / BIG)
    with (ws / SMALL).open("a") as fh:
        fh.write("- a clean note\n")
    assert watch.read(timeout=20_000), "the edit flow reads the new file"
    while watch.read(timeout=1_000):
        pass  # its reads are over; the commit comes after the quiet period
    assert watch.read(timeout=60_000), "the commit reads the big file"
    with (ws / SMALL).open("a") as fh:  # while the commit is under way
        fh.write(f"- the key {FAKE_API_KEY}\n")
    watch.close()

    wait_for(lambda: committed(ws, "A", BIG), timeout=60, what="the big file committed")
    wait_for(lambda: SMALL in [h["path"] for h in d.agent("main")["held_back"]], timeout=30, what="held back")
    assert not _in_git_anywhere(["-C", str(ws)], FAKE_API_KEY), "the key is in the workspace's history"
    assert not _in_git_anywhere([f"--git-dir={d.state_dir / 'history' / 'main.git'}"], FAKE_API_KEY)
    assert f"HELD BACK from git: {SMALL}" in run_cli("status", config=config).stdout
    assert FAKE_API_KEY not in d.log()

    # the key goes, and the note is committed as the file now holds it
    (ws / SMALL).write_text("# a\n- a clean note\n- the key is in the vault now\n")
    wait_for(lambda: "in the vault" in git(ws, "show", f"HEAD:{SMALL}"), timeout=30, what="committed once clean")
    wait_for(lambda: not d.agent("main")["held_back"], what="nothing held back any more")
