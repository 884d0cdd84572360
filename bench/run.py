"""`make bench`: run every benchmark and print its figures (nothing is asserted).

Each benchmark measures its own baseline in the same run and prints ratios
against it, so figures from a noisy shared machine stay comparable.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import (
    bench_burst,
    bench_calibration,
    bench_consolidate,
    bench_conversation,
    bench_daemon,
    bench_edge,
    bench_edge_placement,
    bench_feed_cost,
    bench_fleet,
    bench_fleet_l4,
    bench_flood,
    bench_front,
    bench_hostile_files,
    bench_index,
    bench_l4_durability,
    bench_many_files,
    bench_many_messages,
    bench_openclaw_memory,
    bench_optimize_sync,
    bench_power_cut,
    bench_replica_50k,
    bench_scale,
    bench_sigkill,
    bench_soak,
    bench_stop,
    bench_vector_engines,
    recall,
)

BENCHMARKS = {
    "daemon": bench_daemon.main,
    "front": bench_front.main,
    "index": bench_index.main,
    "burst": bench_burst.main,
    "conversation": bench_conversation.main,
    "l4-durability": bench_l4_durability.main,
    "consolidate": bench_consolidate.main,
    "edge": lambda quick: bench_edge.main([1000] if quick else [1000, 10_000, 50_000]),
    "edge-placement": bench_edge_placement.main,  # anonymous memory a point, payload indexes in the heap or on disk
    "optimize-sync": bench_optimize_sync.main,  # issue 45's syncs in the Edge optimize, at 50k points
    "stop": bench_stop.main,
    "hostile-files": bench_hostile_files.main,
    "many-files": bench_many_files.main,
    "flood": bench_flood.main,
    "many-messages": bench_many_messages.main,
    "scale": bench_scale.main,
    "first-embed": bench_scale.main_first_embed,
    "engines": bench_vector_engines.main,
    "recall": recall.main,
    "calibration": bench_calibration.main,
    "sigkill": bench_sigkill.main,  # root only (loop devices); SIGKILLs at random moments under load
    "power-cut": bench_power_cut.main,  # root only (loop devices); --runs N per cell
    "fleet": bench_fleet.main,  # root only (three booted hosts); --flaps N per spoke
    "openclaw-memory": bench_openclaw_memory.main,  # the real OpenClaw (make test-deps): plugin vs memory-core
    "fleet-l4": bench_fleet_l4.main,  # root only (three booted hosts, L4 through the hub); --flaps N per spoke
    "feed-cost": bench_feed_cost.main,  # the hub's change feed: one more synced commit per L4 change
    "replica-50k": bench_replica_50k.main,  # a spoke's replica rebuilt at --memories N (50,000), one machine
    "soak": bench_soak.main,  # a fleet's steady load for --minutes N (10; the form: 120)
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "only", nargs="*", metavar="NAME", help=f"benchmarks to run: {', '.join(BENCHMARKS)} (default: all)"
    )
    parser.add_argument("--quick", action="store_true", help="fewer samples, for a smoke run")
    parser.add_argument("--runs", type=int, default=None, help="power-cut: runs per operation and cut point (20)")
    parser.add_argument("--flaps", type=int, default=None, help="fleet, fleet-l4: link flaps per spoke (100)")
    parser.add_argument("--minutes", type=int, default=None, help="soak: minutes of load (10; --quick: 3)")
    parser.add_argument("--memories", type=int, default=None, help="replica-50k: memories on the hub (50000)")
    parser.add_argument("--keep", default=None, help="replica-50k: keep the seeded hub here, reuse it next time")
    args = parser.parse_args()
    unknown = set(args.only) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    for name in args.only or BENCHMARKS:
        started = time.monotonic()
        print(f"\n=== {name} ===", flush=True)
        if name == "power-cut":
            bench_power_cut.main(quick=args.quick, runs=args.runs)
        elif name == "fleet":
            bench_fleet.main(quick=args.quick, flap_count=args.flaps)
        elif name == "fleet-l4":
            bench_fleet_l4.main(quick=args.quick, flap_count=args.flaps)
        elif name == "soak":
            bench_soak.main(quick=args.quick, minutes=args.minutes)
        elif name == "replica-50k":
            bench_replica_50k.main(quick=args.quick, memories=args.memories, keep=args.keep)
        else:
            BENCHMARKS[name](quick=args.quick)
        print(f"({name}: {time.monotonic() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
