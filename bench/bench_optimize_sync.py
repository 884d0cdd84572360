"""What issue 45's syncs add to the embedded store's optimize, at 50k points.

The optimize (layers/conversation/adapters/edge.py) copies the shard, optimizes the copy in a child process
and swaps it in.  Since issue 45 the child syncs the tree it rewrote before it exits, and the swap,
which holds the store thread, syncs the new generation (mostly clean pages by then) and the
directories of the new name and the link: a power cut must never find a link naming files the disk
does not have.  Measured here, same run, on one shard of ``--size`` points (random 384-d vectors,
mem0-shaped payloads; the vectors' values do not matter to the file sizes):

- the child's work as it runs it (load, optimize, flush, close), then its ``_sync_tree``, timed
  apart: the extra wall time of an optimize;
- the swap as the daemon runs it (``finish_optimize``), its syncs timed apart by wrapping
  ``_sync_tree`` and ``_fsync_dir``: the extra pause of the store thread.

Each of ``--rounds`` rounds writes a batch of new points first (the daemon optimizes after writes).
Printed: each round, then the totals and the ratios with the syncs to without; nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from layers.conversation.adapters import edge

DIM = 384
BATCH = 1000


def _points(rng: np.random.Generator, count: int, start: int) -> list[tuple[str, list[float], dict]]:
    vectors = rng.standard_normal((count, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [
        (
            str(uuid.UUID(int=start + i + 1)),
            vectors[i].tolist(),
            {
                "data": f"memory {start + i}: the backup host of project p{i % 7} is h{i % 97}, port {6000 + i % 500}",
                "agent_id": f"agent{i % 5}",
                "visibility": ("public", "project", "private", "private")[i % 4],
                "project_id": f"p{i % 7}",
                "created_at": "2026-12-06T10:00:00+00:00",
            },
        )
        for i in range(count)
    ]


def _fill(collection: edge.EdgeCollection, rng: np.random.Generator, count: int, start: int = 0) -> None:
    for offset in range(0, count, BATCH):
        collection.upsert(_points(rng, min(BATCH, count - offset), start + offset))
    collection.flush()


class _Timed:
    """Wraps edge's two sync helpers so the swap's share of syncing is known."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._tree, self._dir = edge._sync_tree, edge._fsync_dir

    def __enter__(self) -> _Timed:
        def timed(real):
            def run(path):
                began = time.perf_counter()
                try:
                    return real(path)
                finally:
                    self.seconds += time.perf_counter() - began

            return run

        edge._sync_tree, edge._fsync_dir = timed(self._tree), timed(self._dir)
        return self

    def __exit__(self, *exc: object) -> None:
        edge._sync_tree, edge._fsync_dir = self._tree, self._dir


def _child_as_it_runs(copy: Path) -> tuple[float, float]:
    """The child's steps on a copy: (seconds without the sync, seconds of the sync)."""
    began = time.perf_counter()
    shard = edge.qe.EdgeShard.load(str(copy))
    shard.optimize()
    shard.flush()
    shard.close()
    work = time.perf_counter() - began
    began = time.perf_counter()
    edge._sync_tree(copy)
    return work, time.perf_counter() - began


def main(quick: bool = False, size: int | None = None, rounds: int = 3) -> None:
    size = size or (5_000 if quick else 50_000)
    rng = np.random.default_rng(45)
    child_work, child_sync, swap_total, swap_sync = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-optimize-sync-") as tmp:
        collection = edge.EdgeCollection(Path(tmp) / "edge" / "memstrata", DIM)
        try:
            began = time.perf_counter()
            _fill(collection, rng, size)
            print(f"{size:,} points written in {time.perf_counter() - began:.1f} s", flush=True)
            for n in range(rounds):
                _fill(collection, rng, BATCH, start=size + n * BATCH)
                # the child's steps, timed, on a copy of their own (what start_optimize's cp makes)
                probe = Path(tmp) / f"probe-{n}"
                edge._copy_tree(collection._live_dir, probe)
                work, synced = _child_as_it_runs(probe)
                child_work.append(work)
                child_sync.append(synced)
                # the daemon's optimize: started, waited for, swapped in with its syncs timed
                collection.start_optimize()
                while True:  # polled as the store thread's upkeep does; the call that swaps is timed
                    with _Timed() as timed:
                        began = time.perf_counter()
                        done = collection.finish_optimize()
                        took = time.perf_counter() - began
                    if done is not None:
                        break
                    time.sleep(0.05)
                swap_total.append(took)
                swap_sync.append(timed.seconds)
                collection.tidy()
                print(
                    f"  round {n + 1}: child {work:.2f} s + sync {synced:.2f} s; "
                    f"swap {swap_total[-1] * 1000:.0f} ms of which sync {swap_sync[-1] * 1000:.0f} ms",
                    flush=True,
                )
        finally:
            collection.close()
    # totals, not medians: the first round builds the whole index (tens of seconds), the later ones
    # fold a batch into an optimized shard (a fraction of a second); both are what the daemon meets
    work, synced, swap, swap_synced = sum(child_work), sum(child_sync), sum(swap_total), sum(swap_sync)
    print(f"optimize of {size:,} points, {rounds} rounds (the first builds the index), totals:")
    print(
        f"  child (off the store thread): {work:.2f} s without the sync, {synced:.2f} s of sync: "
        f"{(work + synced) / work:.3f}x"
    )
    print(
        f"  swap (holds the store thread): {swap * 1000:.0f} ms, of which sync {swap_synced * 1000:.0f} ms: "
        f"{swap / max(swap - swap_synced, 1e-9):.2f}x of the swap without it"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=None, help="points in the shard (50,000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    main(args.quick, args.size, args.rounds)
