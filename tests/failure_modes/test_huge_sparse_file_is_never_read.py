"""A 1 GB or 6 GB sparse file in ``memory/`` costs the daemon nothing but a line in status.

Before: a newline-free 6 GB file grew the daemon by ~130 MB/s (11 GB after 80 s, then it
was killed), SIGTERM was ignored and every agent stalled; a 1 GB file peaked at 3.6 GB.
The file was hashed whole, and the secret scan read it line by line (one 6 GB line).

Now a file over ``watch.max_file_mb`` is decided on the fstat of its open fd and never
read: it is reported (``skipped``, text status), neither versioned nor indexed, and every
read the daemon makes of a workspace file is bounded.  The daemon's peak resident memory
(VmHWM, read from /proc) must not move by more than 100 MB over idle.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.helpers import LEAN, committed, git, init_root, run_cli, wait_for

RSS_BUDGET_KB = 100 * 1024
SIZES = {"memory/2026-11-01.md": 1 << 30, "memory/2026-11-02.md": 6 << 30}


def _peak_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_sparse_gigabyte_files_are_reported_not_read(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN)
    ws = tmp_path / "workspace"
    d = daemons(config)
    (ws / "MEMORY.md").write_text("# MEMORY\n\n- before the big files\n")
    wait_for(lambda: "before the big files" in git(ws, "show", "HEAD:MEMORY.md"), what="idle daemon")
    assert d.proc is not None
    idle = _peak_kb(d.proc.pid)
    for rel, size in SIZES.items():
        with open(ws / rel, "wb") as fh:  # sparse: no newline in 6 GB
            fh.truncate(size)
    (ws / "memory" / "2026-11-03.md").write_text("- written beside the big files\n")
    wait_for(lambda: committed(ws, "A", "memory/2026-11-03.md"), timeout=60, what="other work goes on")

    def both_skipped() -> dict:
        skipped = {s["path"]: s["reason"] for s in d.agent("main")["skipped"]}
        return skipped if set(SIZES) <= set(skipped) else {}

    skipped = wait_for(both_skipped, timeout=60, what="both files reported")
    for rel in SIZES:
        assert "larger than watch.max_file_mb" in skipped[rel] and "not read" in skipped[rel]
    text = run_cli("status", config=config).stdout
    assert "2026-11-02.md" in text and "larger than watch.max_file_mb" in text
    tracked = git(ws, "ls-files")
    assert all(Path(rel).name not in tracked for rel in SIZES)
    run_cli("reindex", "--agent", "main", config=config)  # a full re-check reads nothing of them either
    grown = _peak_kb(d.proc.pid) - idle
    assert grown < RSS_BUDGET_KB, f"peak RSS grew by {grown / 1024:.0f} MB"
    started = time.monotonic()
    assert d.stop(timeout=30) == 0
    assert time.monotonic() - started < 10
    for rel in SIZES:
        os.unlink(ws / rel)
