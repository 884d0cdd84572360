"""Power-cut matrix: every acknowledged operation, cut 0, 0.1, 1 and 15 s after its acknowledgement.

Each run performs one operation on a memstrata root on a loop-mounted ext4 image, cuts the power
``delay`` seconds after the last acknowledgement (SIGKILL of every process, the image copied at
once: tests/powercut/harness.py), starts a daemon on the copy and checks every item acknowledged
*since the matrix began* (not only this run's): exactly once, as acknowledged, and ``git fsck``
clean in every workspace and history copy.  One root is reused throughout (each cut's survivor is
the next run's disk), so a loss that shows only later is counted too.

Targets (issue 45): 0 lost, 0 duplicated, 0 corrupt.  ``--runs N`` runs each cell N times (20 by
default); ``--delays`` picks the cut points.  Root only (loop devices).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers import FAST, wait_for
from tests.powercut import operations
from tests.powercut.harness import PowerCutRoot, loop_devices_usable
from tests.stand_in_embedder import StandInEmbedder

DELAYS = (0.0, 0.1, 1.0, 15.0)
RUNS = 20
_TIMES = re.compile(r"(?:found|stored|is in \S+) (\d+) times")


def classify(problem: str) -> str:
    """lost, duplicated or corrupt, from a problem :meth:`PowerCutRoot.check` found."""
    if problem.startswith("git fsck"):
        return "corrupt"
    match = _TIMES.search(problem)
    if match and int(match[1]) > 1:
        return "duplicated"
    return "lost"


def _root(workdir: Path, embedder: StandInEmbedder) -> PowerCutRoot:
    scratch = workdir / "embedder.yaml"
    scratch.write_text("{}")
    env = embedder.configure(scratch)
    overrides = {
        **FAST,
        "conversation": {"enabled": True, "backend": "embedded", "probe_interval_s": 0.5},
        "vectors": yaml.safe_load(scratch.read_text())["vectors"],
    }
    # every backup put back keeps the store it replaced (an operator's safety copy): 20 runs of them need room
    rig = PowerCutRoot(workdir, overrides, agents=("a",), env=env, size="6G")
    rig.create()
    return rig


def main(quick: bool = False, runs: int | None = None, delays: tuple[float, ...] = DELAYS) -> None:
    if why := loop_devices_usable():
        print(f"skipped: {why}")
        return
    runs = runs if runs is not None else (1 if quick else RUNS)
    plan = {"note + commit": operations.note_commit, **operations.L4_OPERATIONS}
    counts: dict[tuple[str, float], Counter] = {}
    seen: set[str] = set()  # a problem is counted once, in the cell of the cut that first showed it
    embedder = StandInEmbedder()
    with tempfile.TemporaryDirectory(prefix="bench-power-cut-") as tmp:
        rig = _root(Path(tmp), embedder)
        started = time.monotonic()
        try:
            for delay in delays:
                for run in range(runs):
                    for name, operation in plan.items():
                        cell = counts.setdefault((name, delay), Counter())
                        daemon = rig.daemon
                        assert daemon is not None
                        wait_for(lambda d=daemon: d.status()["conversation"]["reachable"], timeout=90)
                        operation(rig)
                        rig.cut(delay)
                        problems = rig.check()
                        cell["cuts"] += 1
                        for problem in problems:
                            if problem in seen:
                                continue
                            seen.add(problem)
                            cell[classify(problem)] += 1
                            print(f"  {name}, cut at {delay:g} s, run {run + 1}: {problem[:300]}", flush=True)
                    done = sum(c["cuts"] for c in counts.values())
                    print(  # progress: the full matrix runs for over an hour
                        f"  cut at {delay:g} s, run {run + 1}/{runs}: {done} cuts, {len(seen)} problem(s), "
                        f"{time.monotonic() - started:.0f} s",
                        flush=True,
                    )
        finally:
            rig.close()
            embedder.close()
    took = time.monotonic() - started
    print(f"{'operation':<22}" + "".join(f"{f'cut at {d:g} s':>24}" for d in delays))
    for name in plan:
        cells = []
        for delay in delays:
            c = counts.get((name, delay), Counter())
            cells.append(f"{c['cuts']:>3} cuts {c['lost']:>2}L {c['duplicated']:>2}D {c['corrupt']:>2}C")
        print(f"{name:<22}" + "".join(f"{cell:>24}" for cell in cells))
    total = sum(counts.values(), Counter())
    print(
        f"total: {total['cuts']} cuts, lost {total['lost']}, duplicated {total['duplicated']}, "
        f"corrupt {total['corrupt']} (L/D/C per cell: items first found lost/doubled/corrupt at that cut; every "
        "earlier item is re-checked after each cut); "
        f"{took:.0f} s, copy of the image at the cut: median {sorted(rig.cut_took)[len(rig.cut_took) // 2]:.3f} s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--delays", default=",".join(f"{d:g}" for d in DELAYS), help="seconds, comma-separated")
    args = parser.parse_args()
    main(runs=args.runs, delays=tuple(float(d) for d in args.delays.split(",")))
