"""Optimize off the request path: a copy is optimized in a child process, the live shard keeps serving.

Real Edge, a few hundred 8-d points.  The child is held with SIGSTOP where a test needs it to be
"still running" (so the searches and writes below really happen during the optimize, however fast
the engine is), and killed where a test needs it dead.  Reproduced before: ``EdgeCollection`` had
only the in-process ``optimize()``, which holds the GIL (a Python thread beside it ran twice in
11.6 s at 10k points), so nothing here could run while it did.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from layers.conversation.edge import WORK_DIR, EdgeCollection, EdgeError
from layers.conversation.optimizer import Optimizer, OptimizeSchedule
from tests.layers.conversation.test_edge_compat import DIM, pid, vec


def _fill(c: EdgeCollection, start: int, count: int) -> None:
    c.upsert(
        (pid(i), vec(i), {"visibility": ("public", "private")[i % 2], "n": i}) for i in range(start, start + count)
    )


def _ids(c: EdgeCollection) -> list[str]:
    ids, offset = [], None
    while True:
        page, offset = c.scroll(limit=1000, offset=offset, with_payload=False)
        ids += [h.id for h in page]
        if offset is None:
            return ids


def _finish(c: EdgeCollection, within: float = 120.0) -> dict:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        result = c.finish_optimize()
        if result is not None:
            return result
        time.sleep(0.05)
    raise AssertionError("the optimize did not end")


@pytest.fixture
def shard(tmp_path):
    c = EdgeCollection(tmp_path / "edge" / "shard", DIM)
    _fill(c, 0, 300)
    yield c
    c.close()


def test_searches_answer_during_an_optimize_and_its_writes_are_there_once_after_the_swap(shard, tmp_path):
    shard.start_optimize()
    child = shard.optimize_pid
    os.kill(child, signal.SIGSTOP)  # the optimize is certainly under way for what follows
    try:
        hits = shard.search(vec(7), 5, {"visibility": "private"})
        assert hits and hits[0].id == pid(7)
        _fill(shard, 300, 40)  # new points while it runs
        _fill(shard, 0, 10)  # points the copy already holds, written again
        shard.delete([pid(i) for i in range(100, 110)])
        shard.set_payload(pid(200), {"tag": "during"})
        assert shard.search(vec(320), 1)[0].id == pid(320)
        assert shard.finish_optimize() is None  # not done yet: nothing swapped
    finally:
        os.kill(child, signal.SIGCONT)
    result = _finish(shard)
    assert result["journal"] == 4
    ids = _ids(shard)
    assert Counter(ids) == Counter({pid(i): 1 for i in range(340) if not 100 <= i < 110})
    assert shard.retrieve([pid(200)])[0].payload["tag"] == "during"
    assert shard.search(vec(330), 1)[0].id == pid(330)
    assert not list((tmp_path / "edge" / WORK_DIR).glob("shard.*/")), "the copy or the replaced shard was left"
    # the swapped-in shard is the one on disk: it reopens with everything
    shard.close()
    again = EdgeCollection(tmp_path / "edge" / "shard", DIM)
    try:
        assert sorted(_ids(again)) == sorted(ids)
        assert again.recovered == ""
    finally:
        again.close()


def test_a_killed_optimize_child_changes_nothing_and_the_next_one_runs(shard, tmp_path):
    shard.start_optimize()
    os.kill(shard.optimize_pid, signal.SIGKILL)
    _fill(shard, 300, 5)
    with pytest.raises(EdgeError, match="SIGKILL"):
        _finish(shard)
    assert not (tmp_path / "edge" / WORK_DIR / "shard.optimizing").exists()
    assert len(_ids(shard)) == 305
    shard.start_optimize()
    assert _finish(shard)["journal"] == 0
    assert len(_ids(shard)) == 305


HOLDER = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from layers.conversation.edge import EdgeCollection
    from tests.layers.conversation.test_edge_compat import DIM, pid, vec

    c = EdgeCollection(Path(sys.argv[1]), DIM)
    c.upsert((pid(i), vec(i), {"n": i}) for i in range(300))
    c.start_optimize()
    child = c.optimize_pid
    if sys.argv[2] == "running":  # held, once it has armed its death signal (its nice 19 follows that)
        while int(open(f"/proc/{child}/stat").read().split(") ")[1].split()[16]) != 19:
            time.sleep(0.01)
        os.kill(child, signal.SIGSTOP)
    for i in range(300, 320):
        c.upsert([(pid(i), vec(i), {"n": i})])
        print("acked", i, flush=True)
    if sys.argv[2] == "ended":  # wait for the child to end, unreaped: the copy is done, the swap not
        while open(f"/proc/{child}/stat").read().split(") ")[1][0] != "Z":
            time.sleep(0.02)
    print("child", child, flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("moment", ["running", "ended"])
def test_sigkill_during_the_optimize_or_before_the_swap_loses_nothing_and_the_next_open_cleans_up(tmp_path, moment):
    path = tmp_path / "edge" / "shard"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), moment],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[3],
    )
    acked, child = [], None
    try:
        for line in proc.stdout:
            word, value = line.split()
            if word == "child":
                child = int(value)
                break
            acked.append(int(value))
        assert child is not None, "the holder ended early"
        assert (tmp_path / "edge" / WORK_DIR / "shard.optimizing").is_dir()
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 30  # the child dies with its starter (PR_SET_PDEATHSIG)
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the optimize child outlived the process that started it"
    assert acked == list(range(300, 320))
    c = EdgeCollection(path, DIM)
    try:
        assert "removed shard.optimizing" in c.recovered
        assert Counter(_ids(c)) == Counter({pid(i): 1 for i in range(320)})
        assert not (tmp_path / "edge" / WORK_DIR / "shard.optimizing").exists()
    finally:
        c.close()


def _alive(pid_: int) -> bool:
    try:
        return open(f"/proc/{pid_}/stat").read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("cut", ["between the renames", "before the journal was in"])
def test_an_interrupted_swap_is_undone_at_the_next_open(tmp_path, cut):
    """The states a SIGKILL inside the swap leaves: the shard aside, the copy beside it or in its place."""
    path = tmp_path / "edge" / "shard"
    work = tmp_path / "edge" / WORK_DIR
    c = EdgeCollection(path, DIM)
    _fill(c, 0, 40)
    c.close()
    subprocess.run(["cp", "-a", str(path), str(tmp_path / "copy")], check=True)  # the copy: 40 points
    c = EdgeCollection(path, DIM)
    _fill(c, 40, 10)  # acknowledged after the copy was taken: the journal's
    c.close()
    work.mkdir(exist_ok=True)
    os.rename(tmp_path / "copy", work / "shard.optimizing")
    os.rename(path, work / "shard.replaced")
    if cut == "before the journal was in":
        os.rename(work / "shard.optimizing", path)
    c = EdgeCollection(path, DIM)
    try:
        assert "put back" in c.recovered
        assert Counter(_ids(c)) == Counter({pid(i): 1 for i in range(50)})
        assert not [p for p in work.iterdir() if p.is_dir()]
    finally:
        c.close()


def test_the_schedule_starts_after_writes_and_at_idle_never_within_the_interval(shard):
    opt = Optimizer(OptimizeSchedule(after_writes=100, min_writes=20, idle_s=30, min_interval_s=60))
    now = time.monotonic()
    opt.tick(shard, now=now)  # first sight: its 300 unindexed points count as pending
    assert shard.optimizing and opt.status()["optimizing_since"]
    _finish_through(opt, shard)
    assert opt.last["result"] == "swapped" and opt.status()["pending_writes"] == 0
    _fill(shard, 300, 150)
    opt.tick(shard, now=time.monotonic() + 10)
    assert not shard.optimizing, "within the minimum interval"
    opt.tick(shard, now=time.monotonic() + 61)
    assert shard.optimizing, "150 writes ≥ after_writes, past the interval"
    _finish_through(opt, shard)
    _fill(shard, 450, 10)
    opt.schedule = replace(opt.schedule, min_interval_s=0)
    opt.tick(shard, now=shard.last_write + 31)
    assert not shard.optimizing, "idle, but 10 writes < min_writes"
    _fill(shard, 460, 15)
    opt.tick(shard, now=shard.last_write + 10)
    assert not shard.optimizing, "25 writes, not idle yet"
    opt.tick(shard, now=shard.last_write + 31)
    assert shard.optimizing, "idle after writes"
    _finish_through(opt, shard)
    status = opt.status()
    assert status["points"] == 475 and status["unindexed"] >= 0 and status["last_optimize"]["result"] == "swapped"


def _finish_through(opt: Optimizer, shard: EdgeCollection) -> None:
    deadline = time.monotonic() + 120
    while shard.optimizing and time.monotonic() < deadline:
        time.sleep(0.05)
        opt.tick(shard)
    assert not shard.optimizing
