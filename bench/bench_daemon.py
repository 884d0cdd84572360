"""Daemon benchmarks: save → commit latency, and idle memory with 10 × 200-file workspaces.

Baselines, measured in the same run:
- commit latency: a direct ``git add`` + ``git commit`` of the same kind of file
  (the work itself), plus the configured waiting (debounce + quiet period);
- idle RSS: a bare Python interpreter.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from tests.helpers import DaemonProcess, init_root, run_cli, wait_for


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _reflog_size(ws: Path) -> int:
    try:
        return (ws / ".git" / "logs" / "HEAD").stat().st_size
    except FileNotFoundError:
        return 0


def _direct_git_commit_ms(ws: Path, samples: int) -> float:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@b",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@b",
    }
    times = []
    for i in range(samples):
        (ws / "memory" / f"baseline-{i}.md").write_text(f"baseline {i}\n")
        start = time.perf_counter()
        subprocess.run(["git", "-C", str(ws), "add", "--", f"memory/baseline-{i}.md"], check=True, env=env)
        subprocess.run(
            ["git", "-C", str(ws), "commit", "-qm", "baseline", "--", f"memory/baseline-{i}.md"], check=True, env=env
        )
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _save_to_commit(root: Path, quiet: float, samples: int) -> list[float]:
    config = init_root(root, git={"quiet_period_s": quiet})
    ws = root / "workspace"
    daemon = DaemonProcess(config).start()
    try:
        latencies = []
        for i in range(samples):
            before = _reflog_size(ws)
            path = ws / "memory" / f"2026-01-{i + 1:02d}.md"
            start = time.perf_counter()
            path.write_text(f"# day {i}\n\n- a memory worth keeping\n")
            wait_for(lambda b=before: _reflog_size(ws) > b, timeout=120, interval=0.002, what="commit")
            latencies.append((time.perf_counter() - start) * 1000)
            time.sleep(0.2)
        return latencies
    finally:
        daemon.stop()


def bench_commit_latency(quick: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base_ws = Path(tmp) / "baseline"
        subprocess.run(["git", "init", "-q", str(base_ws)], check=True)
        (base_ws / "memory").mkdir()
        direct = _direct_git_commit_ms(base_ws, 10)
        print(f"baseline: direct git add+commit          p50 {direct:7.1f} ms")
        debounce_ms = 300
        for quiet, samples in ((5.0, 3 if quick else 8), (0.0, 5 if quick else 20)):
            lat = _save_to_commit(Path(tmp) / f"q{quiet:g}", quiet, samples)
            p50, p95 = statistics.median(lat), _percentile(lat, 0.95)
            floor = debounce_ms + quiet * 1000
            overhead = p50 - floor
            print(
                f"save → commit, quiet {quiet:g} s (n={samples:2d}):   p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  "
                f"| configured wait {floor:.0f} ms, beyond it {overhead:6.1f} ms "
                f"= {overhead / direct:4.2f}× a direct commit"
            )


def _bare_python_rss() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    time.sleep(0.5)
    rss = psutil.Process(proc.pid).memory_info().rss
    proc.stdin.close()
    proc.wait()
    return rss


def bench_idle_rss(quick: bool) -> None:
    agents, files = (3, 50) if quick else (10, 200)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # Vectors off: idle means idle.  The model's footprint, and that unloading it gives
        # the memory back, are measured by the index benchmark.
        config = init_root(root, vectors={"backend": "off"})
        for a in range(agents - 1):
            run_cli("agent", "add", f"agent{a}", config=config)
        workspaces = [root / "workspace", *sorted((root / "workspace" / "agents").glob("*-workspace"))]
        for ws in workspaces:
            for f in range(files):
                (ws / "memory" / f"2025-{f // 28 + 1:02d}-{f % 28 + 1:02d}.md").write_text(
                    f"# {f}\n\n" + "- 记忆条目 memory entry about the cluster and its agents\n" * 20
                )
        daemon = DaemonProcess(config).start()
        try:
            wait_for(
                lambda: all(not a["pending_commit"] for a in daemon.status()["agents"]),
                timeout=300,
                what="initial commits",
            )
            proc = psutil.Process(daemon.proc.pid)
            time.sleep(3)
            cpu_before = sum(proc.cpu_times()[:2])
            idle_s = 5 if quick else 10
            time.sleep(idle_s)
            cpu_idle = sum(proc.cpu_times()[:2]) - cpu_before
            rss = proc.memory_info().rss
            total = sum(a["files"] for a in daemon.status()["agents"])
        finally:
            daemon.stop()
        bare = _bare_python_rss()
        print(f"baseline: bare Python interpreter RSS  {bare / 2**20:6.1f} MB")
        print(
            f"idle daemon (L1-L3, vectors off), {len(workspaces)} agents × {files}+ files ({total} files): "
            f"RSS {rss / 2**20:6.1f} MB "
            f"= {rss / bare:4.1f}× bare Python; CPU while idle {cpu_idle * 1000 / idle_s:5.1f} ms/s"
        )


def main(quick: bool = False) -> None:
    bench_commit_latency(quick)
    bench_idle_rss(quick)
