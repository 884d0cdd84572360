"""The writer a cut of an Edge optimize's swap is tried against (tests/powercut/test_power_cut_edge.py).

``python -m tests.powercut.edge_writer SHARD`` opens an Edge shard at ``SHARD`` (on the loop image) and
acknowledges, as the daemon does, only what a flush has put on disk: a batch before the optimize, a batch
written while the child optimizes (journalled, flushed on the live shard: the daemon's checkpoint would
then trim its write-ahead log), the swap, the replaced generation removed, and one more write flushed on
the new generation (the checkpoint that follows).  Each acknowledgement is one JSON line on stdout
(``{"acked": [ids]}``, then ``{"phase": "swapped"}``, ``{"phase": "tidied"}``, ``{"phase": "done"}``);
the process then waits for the cut (SIGKILL).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

from layers.conversation.adapters.edge import EdgeCollection

DIM = 8
BEFORE = 300
DURING = 20
SWAP_TIMEOUT_S = 120.0


def vector(i: int) -> list[float]:
    return [float((i * 7 + k) % 11 + 1) for k in range(DIM)]


def say(message: dict) -> None:
    print(json.dumps(message), flush=True)


def write_flushed(shard: EdgeCollection, first: int, count: int) -> None:
    """``count`` points upserted, the shard flushed, then acknowledged: what a checkpoint makes durable."""
    points = [(str(uuid.uuid4()), vector(i), {"n": i}) for i in range(first, first + count)]
    shard.upsert(points)
    shard.flush()
    say({"acked": {pid: payload["n"] for pid, _, payload in points}})


def swapped(shard: EdgeCollection) -> None:
    """Wait for the child, then swap its generation in (``finish_optimize``, as the optimizer's tick)."""
    deadline = time.monotonic() + SWAP_TIMEOUT_S
    while shard.finish_optimize() is None:
        if time.monotonic() > deadline:
            raise SystemExit("the optimize child did not end")
        time.sleep(0.05)


def main(path: Path) -> None:
    shard = EdgeCollection(path, DIM)
    write_flushed(shard, 0, BEFORE)
    shard.start_optimize()
    write_flushed(shard, BEFORE, DURING)  # journalled for the copy
    swapped(shard)
    say({"phase": "swapped"})
    shard.tidy()  # the replaced generation closed and removed, as the next tick does
    if shard._remover is not None:
        shard._remover.join()
    say({"phase": "tidied"})
    write_flushed(shard, BEFORE + DURING, 1)  # the next checkpoint, on the new generation
    say({"phase": "done"})
    time.sleep(3600)  # the cut comes


if __name__ == "__main__":
    main(Path(sys.argv[1]))
