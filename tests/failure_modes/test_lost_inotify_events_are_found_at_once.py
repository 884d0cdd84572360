"""When inotify drops events (its queue overflowed), the daemon looks at the disk at once.

Before the fix, 20,000 files written at once on a loaded host overflowed the
kernel's queue; watchdog rebuilt its watches and reported nothing, and 11,000 of
the files stayed unindexed (``files: 8634``) until the periodic reconcile, five
minutes later.  Here the queue is made small (``fs.inotify.max_queued_events``,
read by the kernel when the daemon's inotify instance is made, and put back at
once) so that it overflows for certain, and the periodic reconcile is an hour
away: every file must still be found, searchable, within seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import LEAN, init_root, run_cli, wait_for

QUEUE_LIMIT = Path("/proc/sys/fs/inotify/max_queued_events")
N = 2_000


# serial: while the limit is small, a daemon another worker started would get a small queue too
@pytest.mark.serial
def test_files_whose_events_were_dropped_are_indexed_without_waiting_for_the_periodic_reconcile(tmp_path, daemons):
    config = init_root(tmp_path, **{**LEAN, "watch": {**LEAN["watch"], "reconcile_interval_s": 3600}})
    ws = tmp_path / "workspace"
    usual = QUEUE_LIMIT.read_text()
    QUEUE_LIMIT.write_text("16\n")  # the test runs as root, as make test does (tests/system boots containers)
    try:
        d = daemons(config)
    finally:
        QUEUE_LIMIT.write_text(usual)
    before = d.agent("main")["files"]
    for i in range(N):
        (ws / "memory" / f"2026-01-01-lost-{i:04d}.md").write_text(f"- lost event {i} zqlost{i}\n")

    wait_for(lambda: "inotify dropped events" in d.log(), timeout=30, what="the overflow seen")
    wait_for(lambda: d.agent("main")["files"] == before + N, timeout=120, interval=1, what=f"all {N} files found")
    answer = json.loads(run_cli("search", f"zqlost{N - 1}", "--agent", "main", "--json", config=config).stdout)
    assert [r["path"] for r in answer["results"]][:1] == [f"memory/2026-01-01-lost-{N - 1:04d}.md"]
