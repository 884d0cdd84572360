"""A power cut right after an Edge optimize's swap loses no acknowledged point and leaves a shard that loads.

The swap (layers/conversation/adapters/edge.py ``_swap``) copies the live generation with ``cp -a``, has a child
optimize the copy, re-applies the writes made meanwhile and renames a link to name the copy.  Before
issue 45's fix nothing synced the copied files nor the re-applied writes before the link's rename was
synced (and the replaced generation removed): a cut soon after left the link naming files the disk never
got.  Here the shard is written by a child process (tests/powercut/edge_writer.py) on a loop image
(tests/powercut/harness.py), cut after the swap and one more flushed write, and opened from the copy.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from layers.conversation.adapters.edge import EdgeCollection
from tests.powercut.edge_writer import DIM
from tests.powercut.harness import LoopDisk, loop_devices_usable, needs_loop_devices, processes_on

pytestmark = [needs_loop_devices, pytest.mark.slow]

CUT_AFTER_S = 1.0
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[LoopDisk]:
    if why := loop_devices_usable():
        pytest.skip(why)
    loop = LoopDisk(tmp_path)
    try:
        loop.create()
        (loop.mount / "edge").mkdir()
        loop.sync()
        yield loop
    finally:
        loop.close()


def acknowledged_until_done(writer: subprocess.Popen) -> dict[str, int]:
    """Every point the writer acknowledged (id -> its ``n``), read until it says it is done."""
    assert writer.stdout is not None
    acked: dict[str, int] = {}
    for line in writer.stdout:
        message = json.loads(line)
        acked.update(message.get("acked", {}))
        if message.get("phase") == "done":
            return acked
    raise AssertionError(f"the writer ended with {writer.wait()} before it was done")


def cut(disk: LoopDisk, writer: subprocess.Popen) -> None:
    """SIGKILL the writer (its optimize child has ended: it swapped), nothing left on the mount, the copy."""
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=10)
    deadline = time.monotonic() + 10
    while [p for p in processes_on(disk.mount) if p != os.getpid()]:
        assert time.monotonic() < deadline, "something still holds the mount"
        time.sleep(0.01)
    disk.cut()


def test_acknowledged_points_survive_a_cut_right_after_an_optimize_swap(disk: LoopDisk):
    shard_path = disk.mount / "edge" / "shard"
    writer = subprocess.Popen(
        [sys.executable, "-m", "tests.powercut.edge_writer", str(shard_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        acked = acknowledged_until_done(writer)
        time.sleep(CUT_AFTER_S)
    finally:
        cut(disk, writer)
    shard = EdgeCollection(shard_path, DIM)  # loads: the link names a whole generation
    try:
        found = {hit.id: hit.payload.get("n") for hit in shard.retrieve(list(acked))}
        assert shard.count() == len(acked), f"{shard.count()} points after the cut, {len(acked)} acknowledged"
    finally:
        shard.close()
    lost = sorted(n for pid, n in acked.items() if found.get(pid) != n)
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged points lost or changed: n = {lost[:20]}"
