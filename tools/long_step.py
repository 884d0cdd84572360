"""Run one long setup step with its output in a log and a progress line at least once a minute.

``make setup`` compiles llama.cpp (about 200 CPU-seconds: ~2 minutes on an idle 2-core
machine, longer on a busy one; 600 CPU-seconds and up to 24 minutes were seen before
tools/llama_source.py left out what the wheel does not use).  Run quietly, that is
minutes without a word; run verbosely, it is thousands of compiler lines.  This prints
what a person needs instead:

    building llama.cpp: 3m 00s, step 131 of 342 (log: .cache/llama-build.log)

The step counter is the build tool's own (``[131/342]`` from ninja, ``[ 38%]`` from make),
read from the log as it grows.  On failure the log's last lines are printed and the
step's exit status is returned, so make stops with the reason on screen.  Standard
library only: it runs before the virtualenv has anything in it.

    python3 tools/long_step.py --log .cache/llama-build.log --what "building llama.cpp" -- CMD ARGS…
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

NINJA_STEP = re.compile(rb"\[(\d+)/(\d+)\]")
MAKE_PERCENT = re.compile(rb"\[\s*(\d+)%\]")
TAIL_LINES = 30


def elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m {secs:02d}s"


def progress_of(log: Path) -> str:
    """The build's own counter, from the last 64 KiB of the log ("" before it prints one)."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 65536))
            tail = f.read()
    except OSError:
        return ""
    steps = NINJA_STEP.findall(tail)
    if steps:
        done, total = steps[-1]
        return f", step {int(done)} of {int(total)}"
    percents = MAKE_PERCENT.findall(tail)
    return f", {int(percents[-1])}%" if percents else ""


def run(command: list[str], log: Path, what: str, every_s: float) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"{what} (log: {log})", flush=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        while True:
            try:
                code = proc.wait(timeout=every_s)
                break
            except subprocess.TimeoutExpired:
                print(f"  {what}: {elapsed(time.monotonic() - started)}{progress_of(log)} (log: {log})", flush=True)
            except KeyboardInterrupt:
                proc.terminate()
                proc.wait()
                raise
    took = elapsed(time.monotonic() - started)
    if code == 0:
        print(f"  {what}: done in {took}", flush=True)
        return 0
    print(f"  {what}: FAILED after {took} (exit status {code}); the last lines of {log}:", file=sys.stderr)
    lines = log.read_bytes().decode("utf-8", errors="replace").splitlines()
    for line in lines[-TAIL_LINES:]:
        print(f"    {line}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, required=True, help="where the step's whole output goes")
    parser.add_argument("--what", required=True, help="what the step is, for the progress lines")
    parser.add_argument(
        "--every",
        type=float,
        default=float(os.environ.get("MEMSTRATA_PROGRESS_EVERY_S", "60")),
        help="seconds between progress lines (default 60, or $MEMSTRATA_PROGRESS_EVERY_S)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (put it after --)")
    return run(command, args.log, args.what, args.every)


if __name__ == "__main__":
    sys.exit(main())
