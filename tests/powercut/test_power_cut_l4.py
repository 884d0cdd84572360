"""A power cut right after the daemon acknowledged an L4 write loses none of them, nor doubles any.

Reproduced on main (issue 45): a cut 1 s after the last acknowledgement lost every acknowledged
L4 write (the Edge shard is flushed only at close).  These pass once the L4 write-ahead log
(branch i45-wal) lands; each test cuts the power once on a root on a loop image
(tests/powercut/harness.py) and checks every acknowledged memory by id and text, exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from tests.helpers import FAST, wait_for
from tests.powercut import operations
from tests.powercut.harness import Ledger, PowerCutRoot, loop_devices_usable, needs_loop_devices
from tests.stand_in_embedder import StandInEmbedder

pytestmark = [needs_loop_devices, pytest.mark.slow]

CUT_AFTER_S = 1.0
COLLECTION = "mem0_v4_shared"


@pytest.fixture(scope="module")
def l4_root(tmp_path_factory) -> Iterator[PowerCutRoot]:
    if why := loop_devices_usable():
        pytest.skip(why)
    embedder = StandInEmbedder()
    workdir = tmp_path_factory.mktemp("powercut-l4")
    overrides = {**FAST, "conversation": {"enabled": True, "backend": "embedded", "probe_interval_s": 0.5}}
    scratch = workdir / "embedder.yaml"
    scratch.write_text("{}")
    env = embedder.configure(scratch)
    overrides["vectors"] = yaml.safe_load(scratch.read_text())["vectors"]
    rig = PowerCutRoot(workdir, overrides, agents=("a",), env=env)
    try:
        rig.create()
        assert rig.daemon is not None
        wait_for(lambda: rig.daemon.status()["conversation"]["reachable"], timeout=90, what="store reachable")
        yield rig
    finally:
        rig.close()
        embedder.close()


@pytest.fixture
def rig(l4_root: PowerCutRoot) -> PowerCutRoot:
    """The module's root, with a ledger of this test's acknowledgements only (a loss is one test's failure)."""
    l4_root.ledger = Ledger()
    daemon = l4_root.daemon
    assert daemon is not None  # after the previous test's cut its store takes a moment to open
    wait_for(lambda: daemon.status()["conversation"]["reachable"], timeout=90, what="store reachable")
    return l4_root


def cut_and_check(rig: PowerCutRoot) -> None:
    rig.cut(CUT_AFTER_S)
    assert rig.check() == []


def test_direct_adds_survive_a_cut(rig: PowerCutRoot):
    operations.direct_adds(rig)
    cut_and_check(rig)


def test_a_supersede_survives_a_cut(rig: PowerCutRoot):
    operations.supersede(rig)
    cut_and_check(rig)


def test_an_update_survives_a_cut(rig: PowerCutRoot):
    operations.update(rig)
    cut_and_check(rig)


def test_a_delete_survives_a_cut(rig: PowerCutRoot):
    operations.delete(rig)
    cut_and_check(rig)


def test_a_restore_survives_a_cut(rig: PowerCutRoot):
    operations.restore(rig)
    cut_and_check(rig)


def test_queued_then_replayed_adds_survive_a_cut(rig: PowerCutRoot):
    """The store away (a reload to a remote store refusing connections): adds answered ``queued``; back,
    they replay; the cut comes after the replay."""
    operations.queued_then_replayed(rig)
    cut_and_check(rig)


def test_a_consolidation_apply_survives_a_cut(rig: PowerCutRoot):
    """Its RUN.json and audit line say ``applied`` after the cut, and the store holds every fold."""
    operations.consolidation_apply(rig)
    cut_and_check(rig)


def test_a_consolidation_undo_survives_a_cut(rig: PowerCutRoot):
    operations.consolidation_undo(rig)
    cut_and_check(rig)


def test_a_cleanup_survives_a_cut(rig: PowerCutRoot):
    """Every deletion the cleanup counted is gone after the cut, and has its audit line."""
    operations.cleanup(rig)
    cut_and_check(rig)


def test_a_backup_restore_survives_a_cut(rig: PowerCutRoot):
    """The store after the cut is the backup put back: the shard loads, the later memory stays gone."""
    operations.backup_restored(rig)
    cut_and_check(rig)
