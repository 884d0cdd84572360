"""daemon/common/memtrace.py: allocation snapshots on demand name the line whose memory grows."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.helpers import REPO_ROOT, wait_for


def test_off_unless_asked(monkeypatch):
    from daemon.common import memtrace

    monkeypatch.delenv(memtrace.ENV_MINUTES, raising=False)
    assert memtrace.start_from_env() is None
    monkeypatch.setenv(memtrace.ENV_MINUTES, "not a number")
    assert memtrace.start_from_env() is None


def test_the_growing_line_is_named_in_the_diffs(tmp_path):
    script = textwrap.dedent(
        """
        import os, time
        from daemon.common.memtrace import start_from_env

        tracer = start_from_env()
        kept = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(os.listdir(os.environ["MEMSTRATA_TRACEMALLOC_DIR"])) < 4:
            kept.append("x" * 1000 + str(len(kept)))  # the growing line
            time.sleep(0.001)
        """
    )
    env = {"MEMSTRATA_TRACEMALLOC_MIN": "0.01", "MEMSTRATA_TRACEMALLOC_DIR": str(tmp_path)}
    env["PYTHONPATH"] = str(REPO_ROOT)
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120, cwd=tmp_path)
    files = wait_for(lambda: sorted(tmp_path.glob("tracemalloc-*.txt")), what="snapshots")
    assert len(files) >= 4
    last = files[2].read_text()  # complete: the one after it was begun (the process may end inside the last)
    assert "by growth since the first snapshot" in last and "by growth since the previous snapshot" in last
    top = last.splitlines()[2]  # the first line grown since the first snapshot
    assert top.endswith("<string>:9") and "+" in top, last
