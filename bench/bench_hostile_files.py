"""Hostile files benchmark: what sparse gigabyte files in ``memory/`` cost the daemon.

Baseline, measured in the same run: an ordinary one-line daily note written into the
same idle daemon, from the write until it is committed.  Then a 1 GB and a 6 GB sparse
file without a newline (the size that once grew the daemon by 130 MB/s until it was
killed) are written beside another note: printed are the time until that note is
committed and both big files are reported as skipped (as a ratio to the baseline), the
daemon's peak resident memory over idle (the budget is 100 MB), and SIGTERM → exit.
"""

from __future__ import annotations

import signal
import tempfile
import time
from pathlib import Path

from tests.helpers import LEAN, DaemonProcess, committed, init_root, wait_for

BIG = {"memory/2026-11-01.md": 1 << 30, "memory/2026-11-02.md": 6 << 30}
RSS_BUDGET_MB = 100


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {key}")


def _note_committed(daemon: DaemonProcess, ws: Path, rel: str) -> float:
    started = time.monotonic()
    (ws / rel).write_text(f"- a note at {rel}\n")
    wait_for(lambda: committed(ws, "A", rel), timeout=120, what=f"{rel} committed")
    return time.monotonic() - started


def main(quick: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = init_root(Path(tmp), **LEAN)
        ws = Path(tmp) / "workspace"
        daemon = DaemonProcess(config).start()
        try:
            assert daemon.proc is not None
            pid = daemon.proc.pid
            baseline = _note_committed(daemon, ws, "memory/2026-11-10.md")
            idle_peak = _status_kb(pid, "VmHWM")
            started = time.monotonic()
            for rel, size in BIG.items():
                with open(ws / rel, "wb") as fh:
                    fh.truncate(size)
            note = _note_committed(daemon, ws, "memory/2026-11-11.md")

            def reported() -> bool:
                skipped = {s["path"] for s in daemon.agent("main")["skipped"]}
                return set(BIG) <= skipped

            wait_for(reported, timeout=120, what="both big files reported")
            handled = time.monotonic() - started
            grown_mb = (_status_kb(pid, "VmHWM") - idle_peak) / 1024
            stop_started = time.monotonic()
            daemon.signal(signal.SIGTERM)
            code = daemon.proc.wait(timeout=60)
            stop_s = time.monotonic() - stop_started
        finally:
            daemon.stop()
            for rel in BIG:
                (ws / rel).unlink(missing_ok=True)
    print(f"baseline: one note committed in {baseline:.2f} s (idle daemon, peak RSS {idle_peak / 1024:.0f} MB)")
    print(f"with a 1 GB and a 6 GB sparse file: a note beside them committed in {note:.2f} s ({note / baseline:.2f}×)")
    print(f"both big files reported as skipped after {handled:.2f} s ({handled / baseline:.2f}×)")
    print(f"peak RSS over idle: +{grown_mb:.1f} MB (budget {RSS_BUDGET_MB} MB)")
    print(f"SIGTERM → exit: {stop_s:.2f} s (exit code {code})")


if __name__ == "__main__":
    main()
