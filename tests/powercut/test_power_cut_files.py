"""A power cut right after the daemon acknowledged a note, a commit or a restore loses none of them.

Before issue 45's fix the daemon ran git with its default ``core.fsync`` (committed objects and
refs are never synced): a cut within 30 s of a commit left HEAD's commit object an empty file and
the agent's commits failing for good.  Each test here cuts the power once, on a root on a loop image
(tests/powercut/harness.py), and then checks every acknowledged item and ``git fsck`` of every
repository.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.powercut import operations
from tests.powercut.harness import PowerCutRoot, needs_loop_devices

pytestmark = [needs_loop_devices, pytest.mark.slow]

CUT_AFTER_S = 1.0  # within the 30 s the kernel leaves dirty pages alone: only what was synced survives


def test_a_committed_note_survives_a_cut(files_root: PowerCutRoot):
    """Agent a's own git config turns syncing off: the daemon's commands sync all the same."""
    rig = files_root
    for key, value in (("core.fsync", "none"), ("core.fsyncMethod", "writeout-only")):
        subprocess.run(["git", "-C", str(rig.workspace("a")), "config", key, value], check=True)
    rig.disk.sync()
    operations.note_commit(rig)
    rig.cut(CUT_AFTER_S)
    assert rig.check() == []
    for agent in ("main", "a"):
        assert rig.daemon.agent(agent)["commits_failing"] is None  # type: ignore[union-attr]
