"""The L3 index (every memory file's text) was world-readable: 0644 in 0755 directories.

Before: a second Unix user read ``index.sqlite`` (and its -wal) of every agent, the L4
queue's -wal/-shm were 0644, and the state directory with the per-agent records was
0750/0755.  Now every index file, its side files and its directories are 0600/0700
from the first byte, as are the state directory, the per-agent records, the L4 queue
and the status snapshot; an install made by an older version is tightened at start.
Proven with a real second user on a root the user can traverse (0755).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.helpers import FAST, init_root, run_cli, wait_for

USER = f"mstest{os.getpid() % 100000}"


@pytest.fixture
def open_root():
    """A root under a 0755 directory, so only the daemon's own modes keep another user out."""
    old_umask = os.umask(0o022)  # what a root shell and systemd's default give
    root = Path(tempfile.mkdtemp(prefix="memstrata-modes-", dir="/tmp"))
    root.chmod(0o755)
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
    try:
        yield root
    finally:
        subprocess.run(["userdel", USER], check=False)
        shutil.rmtree(root, ignore_errors=True)
        os.umask(old_umask)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _other_user_reads(path: Path) -> bool:
    proc = subprocess.run(["runuser", "-u", USER, "--", "cat", str(path)], capture_output=True)
    return proc.returncode == 0


def _too_open(root: Path, paths: list[Path], levels: int = 99) -> list[str]:
    """Files wider than 0600 and directories wider than 0700, from ``root`` (or ``levels`` up) to each path."""
    wide = []
    for path in paths:
        for p in [path, *path.parents][: levels + 1]:
            if p == root or root not in p.parents:
                break
            limit = 0o700 if p.is_dir() else 0o600
            if p.exists() and _mode(p) & ~limit:
                wide.append(f"{p.relative_to(root)} {oct(_mode(p))}")
    return sorted(set(wide))


def _settled(d) -> None:
    """The L4 store finished opening (a stop while it opens is another failure mode's business)."""
    wait_for(lambda: d.status()["conversation"].get("reachable"), timeout=60, what="L4 store open")


def _daemon_files(root: Path, d) -> list[Path]:
    state = root / "state"
    indexes = [Path(a["index"]["path"]) for a in d.status()["agents"]]
    side = [Path(f"{i}{s}") for i in indexes for s in ("-wal", "-shm") if Path(f"{i}{s}").exists()]
    queue = state / "conversation" / "queue.sqlite"
    queue_side = [Path(f"{queue}{s}") for s in ("-wal", "-shm") if Path(f"{queue}{s}").exists()]
    return [*indexes, *side, queue, *queue_side, *sorted((state / "agents").glob("*.json"))]


def test_index_queue_records_and_snapshot_are_private(open_root, daemons):
    root = open_root
    config = init_root(root, **FAST, vectors={"backend": "off"})  # modes do not depend on vectors
    run_cli("agent", "add", "beta", config=config)
    d = daemons(config)
    (root / "workspace" / "memory" / "2026-11-27.md").write_text("# notes\n\nthe osprey runbook\n")
    wait_for(lambda: d.agent("main")["index"].get("files", 0) >= 2, what="main indexed")
    _settled(d)
    index = Path(d.agent("main")["index"]["path"])
    assert Path(f"{index}-wal").exists(), "the WAL is there while the daemon runs"

    files = _daemon_files(root, d)
    assert _too_open(root, [*files, root / "state"]) == []
    assert _mode(root / "state") == 0o700
    readable = [str(p.relative_to(root)) for p in files if _other_user_reads(p)]
    assert readable == []

    run_cli("reindex", "--rebuild", "--agent", "main", config=config)  # the swapped-in file
    wait_for(lambda: d.agent("main")["index"]["state"] == "ready", what="rebuilt")
    assert _too_open(root, _daemon_files(root, d)) == []

    assert d.stop() == 0
    snapshot = root / "state" / "status.json"
    assert snapshot.exists() and _too_open(root, [snapshot]) == []
    assert not _other_user_reads(snapshot)


def test_an_older_install_is_tightened_at_start(open_root, daemons):
    root = open_root
    config = init_root(root, **FAST, vectors={"backend": "off"})  # modes do not depend on vectors
    d = daemons(config)
    wait_for(lambda: d.agent("main")["index"].get("files", 0) >= 1, what="main indexed")
    _settled(d)
    files = _daemon_files(root, d)
    assert d.stop() == 0
    # What an older version left: 0644 files, 0755 directories.
    for path in files:
        if path.exists():
            path.chmod(0o644)
        for parent in path.parents:
            if parent == root:
                break
            parent.chmod(0o755)
    assert _other_user_reads(files[0]), "the old layout really is readable by another user"

    d = daemons(config)
    _settled(d)
    files = _daemon_files(root, d)
    # Each file and the directory holding it; parents a person may have made stay as they are.
    assert _too_open(root, files, levels=1) == []
    assert _mode(root / "state") == 0o700
    assert [p for p in files if _other_user_reads(p)] == []
