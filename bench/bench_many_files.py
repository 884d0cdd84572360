"""Many-files benchmark: 20,000 new files in one agent's memory/ at once, another agent editing meanwhile.

Default settings (debounce 300 ms, commit after 5 s quiet, at most 60 s), with
vectors and L4 off: what is measured is the way from a file to git and to the
lexical index.  Baselines, measured in the same run on the same daemon before
the burst: another agent's single edit → committed, and a burst of 500 files →
committed and searchable (per 1,000 files).  Reported against them:

- the 20,000 files committed, and searchable (the last one found by search),
  after the first was written (target ≤ 60 s);
- another agent's single edits while the burst is processed and committed
  (target: within its usual quiet period, i.e. near the idle figure);
- SIGTERM → exit while a second burst is processed and committed (promise ≤ 10 s),
  and how long the next start takes to commit what the stop left.

Before the fix the burst was never committed ("Argument list too long", retried
forever), another agent's edit waited 89 s and SIGTERM took 57 s.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from tests.helpers import DaemonProcess, init_root, run_cli, wait_for


def _committed(ws: Path, prefix: str) -> int:
    out = subprocess.run(
        ["git", "-C", str(ws), "ls-tree", "-r", "--name-only", "HEAD", "memory/"], capture_output=True, text=True
    ).stdout
    return sum(1 for line in out.splitlines() if line.startswith(f"memory/{prefix}"))


def _write(ws: Path, prefix: str, n: int) -> tuple[float, float]:
    """``n`` new files; (monotonic time of the first write, of the last)."""
    first = time.monotonic()
    for i in range(n):
        (ws / "memory" / f"{prefix}{i:05d}.md").write_text(f"# note {i}\n\nzq{prefix}{i} the note number {i}\n")
    return first, time.monotonic()


def _searchable(config: Path, prefix: str, i: int) -> bool:
    proc = run_cli("search", f"zq{prefix}{i}", "--agent", "main", "--json", config=config, check=False)
    if proc.returncode != 0:
        return False
    return any(r["path"] == f"memory/{prefix}{i:05d}.md" for r in json.loads(proc.stdout)["results"])


def _edit_latency(beta: Path, tag: str, timeout: float = 300) -> float:
    """Seconds from another agent's single edit to its commit."""
    marker = f"zq{tag}"
    started = time.monotonic()
    with (beta / "MEMORY.md").open("a") as fh:
        fh.write(f"- {marker}\n")

    def landed() -> bool:
        proc = subprocess.run(["git", "-C", str(beta), "show", "HEAD:MEMORY.md"], capture_output=True, text=True)
        return marker in proc.stdout

    wait_for(landed, timeout=timeout, interval=0.05, what=f"{tag} committed")
    return time.monotonic() - started


def _burst(config: Path, ws: Path, prefix: str, n: int) -> tuple[float, float, float]:
    """(seconds from the first write to all committed, to the last searchable; seconds the writes took)."""
    first, last = _write(ws, prefix, n)
    wait_for(lambda: _committed(ws, prefix) == n, timeout=1800, interval=0.5, what=f"{prefix} committed")
    committed = time.monotonic() - first
    wait_for(lambda: _searchable(config, prefix, n - 1), timeout=1800, interval=0.5, what=f"{prefix} searchable")
    return committed, time.monotonic() - first, last - first


def _sigterm(daemon: DaemonProcess) -> float:
    started = time.monotonic()
    daemon.signal(signal.SIGTERM)
    code = daemon.proc.wait(timeout=120)
    elapsed = time.monotonic() - started
    daemon.stop()
    if code != 0:
        raise RuntimeError(f"daemon exited with {code}:\n{daemon.log()[-2000:]}")
    return elapsed


def main(quick: bool = False) -> None:
    n = 5_000 if quick else 20_000
    samples = 3 if quick else 6
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = init_root(root, vectors={"backend": "off"}, conversation={"enabled": False})
        run_cli("agent", "add", "beta", config=config)
        ws, beta = root / "workspace", root / "workspace" / "agents" / "beta-workspace"
        daemon = DaemonProcess(config).start()
        try:
            idle = [_edit_latency(beta, f"idle{i}") for i in range(samples)]
            small_committed, small_found, _ = _burst(config, ws, "small", 500)

            during: list[float] = []
            stop = threading.Event()

            def edits() -> None:
                i = 0
                while not stop.is_set():
                    during.append(_edit_latency(beta, f"during{i}"))
                    i += 1
                    stop.wait(1.0)

            editor = threading.Thread(target=edits)
            editor.start()
            try:
                big_committed, big_found, wrote = _burst(config, ws, "big", n)
            finally:
                stop.set()
                editor.join()
            load = os.getloadavg()

            # a second burst, stopped while it is processed and committed; the next start finishes it
            _write(ws, "again", n)
            time.sleep(3.0)
            stop_s = _sigterm(daemon)
            restarted = time.monotonic()
            daemon = DaemonProcess(config).start(wait=False)
            wait_for(lambda: _committed(ws, "again") == n, timeout=1800, interval=0.5, what="the rest committed")
            recovery = time.monotonic() - restarted
        finally:
            if daemon.proc and daemon.proc.poll() is None:
                daemon.stop(timeout=30)
    base = statistics.median(idle)
    print(f"baseline: another agent's single edit → committed (n={samples}): p50 {base:5.2f} s  max {max(idle):5.2f} s")
    print(f"baseline: 500 new files → committed {small_committed:5.1f} s, searchable {small_found:5.1f} s")
    print(
        f"{n:,} new files (written in {wrote:.1f} s): committed {big_committed:5.1f} s, searchable "
        f"{big_found:5.1f} s after the first write (target ≤ 60 s) = {big_found / small_found:4.1f}× the 500-file "
        f"burst for {n / 500:g}× the files"
    )
    print(
        f"another agent's single edits meanwhile (n={len(during)}): p50 {statistics.median(during):5.2f} s  "
        f"max {max(during):5.2f} s = {statistics.median(during) / base:4.2f}× idle (quiet period 5 s)"
    )
    print(
        f"SIGTERM → exit 3 s after a second burst of {n:,}: {stop_s:4.1f} s (promise ≤ 10 s); the next start "
        f"committed the rest in {recovery:5.1f} s"
    )
    print(f"load average at the end of the burst: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
