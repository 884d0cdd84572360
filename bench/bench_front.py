"""Front benchmark: what one ``memstrata`` call costs an agent before and while it does its work.

Baseline, measured in the same run: bare ``python -c pass`` (interpreter start-up
and exit).  For each command the CPU time of the child (user + sys, from
``os.wait4``) is printed as a ratio against it, with a real daemon running on a
temporary root (as bench/bench_daemon.py starts one).  Targets (an agent calls the front many times a session):
``--help``, ``status`` and ``search`` (FTS) each ≤ 5× bare python CPU; p50 wall
of ``search`` ≤ 2× ``status``; ``memstrata mcp`` ready to answer ``initialize``
≤ 0.5 s CPU.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from tests.helpers import MEMSTRATA, REPO_ROOT, DaemonProcess, init_root

TARGET_RATIO = 5.0
MCP_TARGET_CPU_S = 0.5


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds of the child, wall seconds) for one run of ``cmd``."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO_ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 3):  # status: 3 when the daemon is down
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, wall


def _sample(cmd: list[str], env: dict[str, str], samples: int) -> tuple[float, float]:
    """Median CPU and median wall of ``samples`` runs (one warm-up run first: page cache, .pyc)."""
    _run(cmd, env)
    runs = [_run(cmd, env) for _ in range(samples)]
    return statistics.median(c for c, _ in runs), statistics.median(w for _, w in runs)


def _mcp_ready_cpu(config: Path, env: dict[str, str]) -> float:
    """CPU seconds ``memstrata mcp`` has used when its answer to ``initialize`` arrives."""
    proc = subprocess.Popen(
        [*MEMSTRATA, "--config", str(config), "mcp", "--agent", "main"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=REPO_ROOT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"},
        },
    }
    proc.stdin.write((json.dumps(request) + "\n").encode())
    proc.stdin.flush()
    line = proc.stdout.readline()
    times = psutil.Process(proc.pid).cpu_times()
    cpu = times.user + times.system
    proc.stdin.close()
    proc.wait(timeout=30)
    if b'"result"' not in line:
        raise RuntimeError(f"memstrata mcp did not answer initialize: {line[:300]!r}")
    return cpu


def main(quick: bool = False) -> None:
    samples = 5 if quick else 15
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MEMSTRATA_CONFIG", "MEMSTRATA_TOKEN", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    }
    # An installed memstrata runs from bytecode; without it every call would compile the daemon's
    # modules again.  Kept under .cache/ (the warm-up run writes it), so the virtualenv is untouched.
    env["PYTHONPYCACHEPREFIX"] = str(REPO_ROOT / ".cache" / "pycache-bench")
    with tempfile.TemporaryDirectory(prefix="memstrata-bench-front-") as tmp:
        root = Path(tmp) / "root"
        # The front's validated-configuration cache (daemon/common/config_cache.py), filled by the warm-up
        # run as by an agent's first call: kept with the temporary root, not left in ~/.cache.
        env["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")
        config = init_root(root, vectors={"backend": "off"}, conversation={"enabled": False})
        (root / "workspace" / "memory" / "2026-11-30.md").write_text(
            "# Notes\n\nqdrant listens on port 6333 of the central node.\n", encoding="utf-8"
        )
        daemon = DaemonProcess(config).start()
        try:
            base_cpu, base_wall = _sample([sys.executable, "-c", "pass"], env, samples)
            print(f"baseline: python -c pass  CPU {base_cpu * 1000:6.1f} ms  wall {base_wall * 1000:6.1f} ms")
            commands = {
                "--help": ["--help"],
                "status": ["--config", str(config), "status"],
                "search (fts)": ["--config", str(config), "search", "qdrant port", "--agent", "main", "--mode", "fts"],
            }
            walls = {}
            for name, args in commands.items():
                cpu, wall = _sample([*MEMSTRATA, *args], env, samples)
                walls[name] = wall
                verdict = "ok" if cpu <= TARGET_RATIO * base_cpu else "OVER"
                print(
                    f"memstrata {name:<14} CPU {cpu * 1000:6.1f} ms = {cpu / base_cpu:4.1f}× bare python "
                    f"(target ≤ {TARGET_RATIO:g}×: {verdict})  wall p50 {wall * 1000:6.1f} ms"
                )
            ratio = walls["search (fts)"] / walls["status"]
            print(f"search / status p50 wall: {ratio:4.2f}× (target ≤ 2×: {'ok' if ratio <= 2 else 'OVER'})")
            mcp = statistics.median(_mcp_ready_cpu(config, env) for _ in range(3 if quick else 5))
            verdict = "ok" if mcp <= MCP_TARGET_CPU_S else "OVER"
            print(
                f"memstrata mcp → initialize answered: CPU {mcp:5.2f} s = {mcp / base_cpu:4.1f}× bare python "
                f"(target ≤ {MCP_TARGET_CPU_S:g} s: {verdict})"
            )
        finally:
            daemon.stop()


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
