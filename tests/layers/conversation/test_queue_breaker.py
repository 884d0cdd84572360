"""The durable write queue and the circuit breaker."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from layers.conversation.adapters.breaker import Breaker
from layers.conversation.lifecycle.durable_queue import WriteQueue


def test_queue_keeps_order_ignores_retries_and_survives_reopen(tmp_path):
    path = tmp_path / "queue.sqlite"
    q = WriteQueue(path)
    assert q.put("w1", "a", {"text": "第一条"})
    assert q.put("w2", "b", {"text": "second"})
    assert not q.put("w1", "a", {"text": "retry"})  # same write_id: one entry
    q.failed("w1", "a", "refused")
    q.close()

    q = WriteQueue(path)
    items = q.peek()
    assert [(i.write_id, i.request["text"], i.attempts) for i in items] == [("w1", "第一条", 1), ("w2", "second", 0)]
    assert items[0].last_error == "refused"
    assert q.depth() == 2 and q.contains("w2", "b") and not q.contains("w2", "a") and q.oldest_age_s() >= 0
    q.done("w1", "b")  # another agent's w1: not this one
    assert q.depth() == 2
    q.done("w1", "a")
    assert [i.write_id for i in q.peek()] == ["w2"]
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_queued_write_survives_sigkill_right_after_put(tmp_path):
    """put() returns only after the commit: a process killed at once loses nothing."""
    path = tmp_path / "queue.sqlite"
    script = textwrap.dedent(
        f"""
        import os, signal
        from layers.conversation.lifecycle.durable_queue import WriteQueue
        q = WriteQueue(__import__("pathlib").Path({str(path)!r}))
        for i in range(50):
            q.put(f"w{{i}}", "a", {{"n": i}})
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=os.getcwd(), capture_output=True)
    assert proc.returncode == -9
    assert [i.request["n"] for i in WriteQueue(path).peek(100)] == list(range(50))


def test_breaker_opens_on_failure_and_closes_on_success():
    now = [100.0]
    b = Breaker(probe_interval_s=2, clock=lambda: now[0])
    assert not b.closed and b.state == "open"  # unknown until the store has answered once
    assert b.last_error == "not connected yet"
    assert b.success() is True and b.closed and b.last_error == ""
    assert b.success() is False  # already closed
    now[0] = 105.0
    assert b.failure("connect: refused") is True
    assert b.failure("connect: refused again") is False
    now[0] = 108.5
    snap = b.snapshot()
    assert snap["state"] == "open" and snap["down_for_s"] == 3.5 and snap["failures"] == 2
    assert snap["last_error"] == "connect: refused again"
    b.success()
    assert b.snapshot()["down_for_s"] is None


def test_a_refused_write_is_set_aside_kept_and_the_queue_goes_on(tmp_path):
    path = tmp_path / "queue.sqlite"
    q = WriteQueue(path)
    assert q.put_many([(f"w{i}", "a", {"n": i}) for i in range(5)]) == 5
    assert q.put_many([("w1", "a", {"n": "retry"}), ("w5", "b", {"n": 5})]) == 1  # w1 is already queued
    assert q.ahead_of("w3", "a") == 3 and q.ahead_of("w0", "a") == 0
    assert q.set_aside("w1", "a", "add: ValueError: expiration_date must be a valid date")
    assert not q.set_aside("never-queued", "a", "x") and not q.set_aside("w2", "b", "another agent's w2")
    q.done_many([("w0", "a"), ("w2", "a")])
    q.close()

    q = WriteQueue(path)
    assert [i.write_id for i in q.peek()] == ["w3", "w4", "w5"]
    assert q.depth() == 3 and q.set_aside_count() == 1
    [aside] = q.set_aside_writes()
    assert (aside["write_id"], aside["agent_id"]) == ("w1", "a") and "expiration_date" in aside["reason"]
    assert aside["set_aside_at"] >= aside["enqueued_at"]
    assert q.put("w1", "a", {"n": "fixed"})  # set aside, it may be queued again


def test_two_agents_may_queue_the_same_write_id(tmp_path):
    """A write_id is its owner's: another agent's equal one is another write, kept, replayed and removed alone."""
    q = WriteQueue(tmp_path / "queue.sqlite")
    assert q.put("conv-1:msg-3", "a", {"text": "a's"})
    assert q.put("conv-1:msg-3", "b", {"text": "b's"})
    assert not q.put("conv-1:msg-3", "b", {"text": "b's retry"})
    assert [(i.agent_id, i.request["text"]) for i in q.peek()] == [("a", "a's"), ("b", "b's")]
    assert q.ahead_of("conv-1:msg-3", "b") == 1
    q.done("conv-1:msg-3", "a")
    assert [(i.agent_id, i.request["text"]) for i in q.peek()] == [("b", "b's")]


# The first schema: write_id unique across every agent.
FIRST_SCHEMA = """
CREATE TABLE writes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, write_id TEXT NOT NULL UNIQUE, agent_id TEXT NOT NULL,
    request TEXT NOT NULL, enqueued_at REAL NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT NOT NULL DEFAULT ''
);
CREATE TABLE set_aside (
    seq INTEGER PRIMARY KEY, write_id TEXT NOT NULL UNIQUE, agent_id TEXT NOT NULL, request TEXT NOT NULL,
    enqueued_at REAL NOT NULL, set_aside_at REAL NOT NULL, reason TEXT NOT NULL
);
"""


def test_a_queue_of_the_first_schema_is_rebuilt_keeping_every_write_its_order_and_its_seq(tmp_path):
    import apsw

    path = tmp_path / "queue.sqlite"
    db = apsw.Connection(str(path))
    db.execute(FIRST_SCHEMA)
    for i in range(6):
        db.execute(
            "INSERT INTO writes(write_id, agent_id, request, enqueued_at, attempts) VALUES (?, ?, ?, ?, ?)",
            (f"w{i}", "a" if i % 2 else "b", f'{{"n": {i}}}', 1000.0 + i, i % 3),
        )
    db.execute("DELETE FROM writes WHERE write_id = 'w5'")  # the last seq handed out is gone already
    db.execute(
        "INSERT INTO set_aside SELECT seq, write_id, agent_id, request, enqueued_at, 2000.0, 'refused' "
        "FROM writes WHERE write_id = 'w0'"
    )
    db.execute("DELETE FROM writes WHERE write_id = 'w0'")
    db.close()

    q = WriteQueue(path)
    items = q.peek()
    assert [(i.seq, i.write_id, i.agent_id, i.request["n"], i.attempts) for i in items] == [
        (2, "w1", "a", 1, 1),
        (3, "w2", "b", 2, 2),
        (4, "w3", "a", 3, 0),
        (5, "w4", "b", 4, 1),
    ]
    assert [(w["write_id"], w["agent_id"], w["reason"]) for w in q.set_aside_writes()] == [("w0", "b", "refused")]
    assert q.put("w1", "b", {"n": "b's own w1"}), "now a write_id is its owner's"
    assert not q.put("w1", "a", {"n": "a's retry"})
    assert q.peek()[-1].seq == 7, "a seq is never handed out twice (6 was w5's)"
    q.close()
    assert [i.write_id for i in WriteQueue(path).peek()] == ["w1", "w2", "w3", "w4", "w1"], "rebuilt once, kept"


def test_the_queues_write_ahead_log_stays_near_its_limit_under_steady_writes(tmp_path):
    """Issue 51: the queue's -wal stayed at 4 MB beside a 53 KB file (SQLite never shrinks it)."""
    from layers.common.sqlite_wal import WAL_SIZE_LIMIT

    path = tmp_path / "queue.sqlite"
    wal = path.with_name(path.name + "-wal")
    q = WriteQueue(path)
    try:
        for n in range(1500):  # each write logged, then done: the queue stays short, its log does not
            assert q.put(f"w{n}", "a", {"text": f"memory number {n} " + "x" * 400})
            q.done(f"w{n}", "a")
        assert q.depth() == 0
        assert wal.stat().st_size <= 2 * WAL_SIZE_LIMIT, f"the log is {wal.stat().st_size / 2**20:.1f} MB"
    finally:
        q.close()
