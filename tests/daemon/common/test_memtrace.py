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
    assert last.splitlines()[1].startswith("native: malloc in use ")
    top = last.splitlines()[4]  # the first line grown since the first snapshot (after 3 header lines and a title)
    assert top.endswith("<string>:9") and "+" in top, last


def test_frames_zero_writes_the_native_figures_alone_and_counts_sqlite_page_caches(tmp_path):
    """Native growth (SQLite's page caches here) is what tracemalloc cannot see: with no frames the snapshot
    is that line alone, and it counts the open connections and what they cache."""
    script = textwrap.dedent(
        """
        import os, time, apsw
        from daemon.common.memtrace import start_from_env

        db = apsw.Connection(os.path.join(os.environ["MEMSTRATA_TRACEMALLOC_DIR"], "x.sqlite"))
        db.execute("CREATE TABLE t(v)")
        with db:
            db.executemany("INSERT INTO t VALUES (?)", [("y" * 500,) for _ in range(2000)])  # ~1 MB cached
        tracer = start_from_env()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(list(os.scandir(os.environ["MEMSTRATA_TRACEMALLOC_DIR"]))) < 3:
            time.sleep(0.01)
        """
    )
    env = {"MEMSTRATA_TRACEMALLOC_MIN": "0.01", "MEMSTRATA_TRACEMALLOC_DIR": str(tmp_path)}
    env.update(MEMSTRATA_TRACEMALLOC_FRAMES="0", PYTHONPATH=str(REPO_ROOT))
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120, cwd=tmp_path)
    files = wait_for(lambda: sorted(tmp_path.glob("tracemalloc-*.txt")), what="snapshots")
    text = files[0].read_text()
    assert "tracemalloc:" not in text and "by growth" not in text, text
    native = text.splitlines()[1]
    assert "1 connections caching" in native, native
    cached = float(native.split("caching ")[1].split(" MiB")[0])
    assert cached >= 0.9, native
