"""Optimize off the request path: a copy is optimized in a child process, the live shard keeps serving.

Real Edge, a few hundred 8-d points.  The child is held with SIGSTOP where a test needs it to be
"still running" (so the searches and writes below really happen during the optimize, however fast
the engine is), and killed where a test needs it dead.  Reproduced before: ``EdgeCollection`` had
only the in-process ``optimize()``, which holds the GIL (a Python thread beside it ran twice in
11.6 s at 10k points), so nothing here could run while it did.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from layers.conversation.adapters.edge import GEN_DIR, WORK_DIR, EdgeCollection, EdgeError
from layers.conversation.adapters.optimizer import Optimizer, OptimizeSchedule
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
    _hold(child)  # the optimize is certainly under way for what follows
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
    # the swapped-in shard is the one on disk: it reopens with everything
    shard.close()
    assert _generations(tmp_path) == ["shard.1"], "the replaced shard was left"
    assert not list((tmp_path / "edge" / WORK_DIR).glob("shard.*/")), "a directory of the layout before was left"
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
    assert _generations(tmp_path) == ["shard.0"], "the killed optimize's copy was left"
    assert len(_ids(shard)) == 305
    shard.start_optimize()
    assert _finish(shard)["journal"] == 0
    assert len(_ids(shard)) == 305


HOLDER = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from layers.conversation.adapters.edge import EdgeCollection
    from tests.layers.conversation.test_edge_compat import DIM, pid, vec

    c = EdgeCollection(Path(sys.argv[1]), DIM)
    c.upsert((pid(i), vec(i), {"n": i}) for i in range(300))
    c.start_optimize()
    child = c.optimize_pid
    if sys.argv[2] == "running":  # held, once it has armed its death signal (its nice 19 follows that)
        while True:
            state, *fields = open(f"/proc/{child}/stat").read().split(") ")[1].split()
            if state == "Z":  # the child failed (its log says why): end, so the test fails instead of waiting
                sys.exit("the optimize child ended before it could be held")
            if int(fields[15]) == 19:
                break
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
        assert _generations(tmp_path) == ["shard.0", "shard.1"]  # the live shard, the copy
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
        assert "removed shard.1" in c.recovered
        assert Counter(_ids(c)) == Counter({pid(i): 1 for i in range(320)})
        assert _generations(tmp_path) == ["shard.0"]
    finally:
        c.close()


def _as_before_generations(path: Path) -> None:
    """The shard's directory at ``path`` itself, as the layout before generation directories had it."""
    real = path.resolve()
    path.unlink()
    os.rename(real, path)


def _generations(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "edge" / GEN_DIR).iterdir())


def _hold(pid_: int) -> None:
    """SIGSTOP, and wait until it took (the shard's reads leave a stopped child alone, not a stopping one)."""
    os.kill(pid_, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid_}/stat").read_text().rsplit(") ", 1)[1][0] != "T":
        assert time.monotonic() < deadline, "the child did not stop"
        time.sleep(0.005)


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
    _as_before_generations(path)
    subprocess.run(["cp", "-a", str(path), str(tmp_path / "copy")], check=True)  # the copy: 40 points
    c = EdgeCollection(path, DIM)
    _fill(c, 40, 10)  # acknowledged after the copy was taken: the journal's
    c.close()
    _as_before_generations(path)
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


# ------------------------------------------------ generations: the swap never closes the live shard first
#
# Reproduced before (the layout where the copy was renamed in): the swap closed the live shard
# before loading the copy, so while it loaded and re-applied the journal a search from another
# thread met a closed shard, and during the journal re-apply it was answered by the copy without
# the writes made during the optimize; reads never held the optimize child back.


def _state(pid_: int) -> str:
    return Path(f"/proc/{pid_}/stat").read_text().rsplit(") ", 1)[1][0]


def _held(pid_: int, within: float = 2.0) -> bool:
    """Stopped, or with a SIGSTOP pending or being taken (it lands when the child next runs: a busy host
    may not run it at once).

    Between the kernel taking the SIGSTOP off the pending set and setting the state to ``T`` the child
    shows neither, so a child that shows neither is looked at again for ``within`` seconds: one that was
    sent a SIGSTOP is ``T`` by then.  A continued child is asked with ``within=0``: a SIGCONT clears a
    pending SIGSTOP and wakes the child at once, and a longer look would let the optimize end meanwhile.
    """
    deadline = time.monotonic() + within
    while True:
        if _state(pid_) == "T":
            return True
        status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid_}/status").read_text().splitlines())
        pending = int(status["SigPnd"], 16) | int(status["ShdPnd"], 16)
        if pending & (1 << (signal.SIGSTOP - 1)):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


def _wait_ended(pid_: int) -> None:
    deadline = time.monotonic() + 120
    while _state(pid_) != "Z":  # ended, not yet reaped: finish_optimize will find it done
        assert time.monotonic() < deadline, "the optimize did not end"
        time.sleep(0.02)


def test_the_live_shard_answers_with_every_write_while_the_swap_loads_the_copy_and_reapplies_the_journal(
    shard, monkeypatch
):
    import threading

    from layers.conversation.adapters import edge

    shard.start_optimize()
    _fill(shard, 300, 20)  # the journal's
    _wait_ended(shard.optimize_pid)
    entered, release = threading.Event(), threading.Event()
    real_check = edge._check_room

    def held_check(path, wanted):  # the swap's first look at the disk, before it loads the copy
        if threading.current_thread().name == "swap" and not entered.is_set():
            entered.set()
            assert release.wait(60)
        return real_check(path, wanted)

    monkeypatch.setattr(edge, "_check_room", held_check)
    result: dict = {}
    swap = threading.Thread(target=lambda: result.update(shard.finish_optimize() or {}), name="swap")
    swap.start()
    try:
        assert entered.wait(60), "the swap did not start"
        assert shard.search(vec(310), 1)[0].id == pid(310), "a write made during the optimize is answered"
        assert shard.count() == 320
    finally:
        release.set()
        swap.join(60)
    assert result["journal"] == 1
    assert Counter(_ids(shard)) == Counter({pid(i): 1 for i in range(320)})
    assert os.readlink(shard.path) == os.path.join(GEN_DIR, "shard.1")


def test_reads_hold_the_optimize_child_stopped_while_they_run_and_leave_a_stopped_one_stopped(shard, monkeypatch):
    from layers.conversation.adapters import edge

    shard.start_optimize()
    child = shard.optimize_pid
    seen: list[str] = []
    real_engine = edge._engine

    def watching(call):
        seen.append("held" if _held(child) else _state(child))
        return real_engine(call)

    monkeypatch.setattr(edge, "_engine", watching)
    try:
        for i in range(5):
            shard.search(vec(i), 3)
        assert seen == ["held"] * 5, "each search ran with the optimize child stopped"
        assert not _held(child, within=0), "and it was continued after each"
        seen.clear()
        with shard.reading():  # the store's three phases: one hold
            for i in range(3):
                shard.search(vec(i), 3)
                assert _held(child)
        assert seen == ["held"] * 3 and not _held(child, within=0)
        _hold(child)
        shard.search(vec(1), 3)
        assert _state(child) == "T", "a child someone else stopped stays stopped"
    finally:
        monkeypatch.setattr(edge, "_engine", real_engine)
        os.kill(child, signal.SIGCONT)
    _finish(shard)
    assert len(_ids(shard)) == 300


SWAP_KILLER = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from layers.conversation.adapters import edge
    from tests.layers.conversation.test_edge_compat import DIM, pid, vec

    path, cut = Path(sys.argv[1]), sys.argv[2]
    c = edge.EdgeCollection(path, DIM)
    c.upsert((pid(i), vec(i), {"n": i}) for i in range(300))
    c.start_optimize()
    for i in range(300, 320):  # the journal's
        c.upsert([(pid(i), vec(i), {"n": i})])
        print("acked", i, flush=True)
    real_rename = os.rename

    def rename(src, dst, *args, **kwargs):
        if cut == "before the link" and str(src).endswith(".next") and Path(dst) == path:
            os.kill(os.getpid(), signal.SIGKILL)  # the optimized copy is loaded and holds the journal
        return real_rename(src, dst, *args, **kwargs)

    edge.os.rename = rename
    while c.finish_optimize() is None:
        time.sleep(0.02)
    for i in range(320, 325):  # after the swap: written to the new generation only
        c.upsert([(pid(i), vec(i), {"n": i})])
        print("acked", i, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # before the replaced shard is closed and removed
    """
)


@pytest.mark.parametrize("cut", ["before the link", "after the link"])
def test_sigkill_inside_the_swap_leaves_every_acknowledged_write_once(tmp_path, cut):
    path = tmp_path / "edge" / "shard"
    proc = subprocess.run(
        [sys.executable, "-c", SWAP_KILLER, str(path), cut],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[3],
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    acked = [int(line.split()[1]) for line in proc.stdout.splitlines()]
    assert acked == list(range(300, 320 if cut == "before the link" else 325))
    assert _generations(tmp_path) == ["shard.0", "shard.1"]  # the killed process's live shard and the other
    c = EdgeCollection(path, DIM)
    try:
        dropped = "shard.1" if cut == "before the link" else "shard.0"
        assert f"removed {dropped}" in c.recovered
        assert Counter(_ids(c)) == Counter({pid(i): 1 for i in range(max(acked) + 1)})
        assert _generations(tmp_path) == [{"shard.1": "shard.0", "shard.0": "shard.1"}[dropped]]
        assert not (tmp_path / "edge" / "shard.next").exists()
        kept = {"shard.1": "shard.0", "shard.0": "shard.1"}[dropped]
        assert os.readlink(path) == os.path.join(GEN_DIR, kept)
    finally:
        c.close()


def test_a_shard_directory_of_the_layout_before_becomes_generation_0_even_when_the_move_was_cut(tmp_path):
    path = tmp_path / "edge" / "shard"
    c = EdgeCollection(path, DIM)
    _fill(c, 0, 30)
    c.close()
    _as_before_generations(path)
    shutil.rmtree(tmp_path / "edge" / GEN_DIR)
    c = EdgeCollection(path, DIM)  # a real directory at <name>: moved into .gen/<name>.0, linked
    try:
        assert path.is_symlink() and os.readlink(path) == os.path.join(GEN_DIR, "shard.0")
        assert len(_ids(c)) == 30
    finally:
        c.close()
    # the move cut after the directory went into .gen, before the new link was renamed in
    _as_before_generations(path)
    os.symlink(os.path.join(GEN_DIR, "shard.0"), tmp_path / "edge" / "shard.next")
    os.rename(path, tmp_path / "edge" / GEN_DIR / "shard.0")
    c = EdgeCollection(path, DIM)
    try:
        assert "completed the move" in c.recovered
        assert Counter(_ids(c)) == Counter({pid(i): 1 for i in range(30)})
    finally:
        c.close()


def test_a_shard_reached_through_a_symlinked_directory_keeps_its_generation_through_reopens_and_a_swap(tmp_path):
    """Seen while measuring: the current generation compared resolved against one spelled through the
    link was taken for a leftover and removed at open (the shard came back empty)."""
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "via")
    path = tmp_path / "via" / "edge" / "shard"
    c = EdgeCollection(path, DIM)
    _fill(c, 0, 30)
    c.start_optimize()
    _finish(c)
    c.close()
    for _ in range(2):
        c = EdgeCollection(path, DIM)
        try:
            assert c.recovered == ""
            assert len(_ids(c)) == 30
        finally:
            c.close()


def test_a_shard_without_a_write_ahead_log_is_optimized_with_every_write_made_before_the_copy(tmp_path):
    """With no WAL (a replica's copy of the hub: layers/conversation/adapters/edge.py ``wal``) the copy's load
    has no log to make it whole: what was written but not yet flushed must reach the copy's files first."""
    c = EdgeCollection(tmp_path / "edge" / "shard", DIM, cold=True, wal=False)
    try:
        _fill(c, 0, 300)
        c.flush()
        _fill(c, 300, 200)  # not flushed by the caller
        c.delete([pid(i) for i in range(0, 20)])
        c.set_payload(pid(250), {"tag": "before the copy"})
        c.start_optimize()
        _fill(c, 500, 10)  # during it: journalled
        _finish(c)
        expected = Counter({pid(i): 1 for i in range(20, 510)})
        assert Counter(_ids(c)) == expected
        assert c.retrieve([pid(250)])[0].payload["tag"] == "before the copy"
    finally:
        c.close()
    again = EdgeCollection(tmp_path / "edge" / "shard", DIM, cold=True, wal=False)
    try:
        assert Counter(_ids(again)) == expected
    finally:
        again.close()
