"""The durable write queue and the circuit breaker."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from layers.conversation.breaker import Breaker
from layers.conversation.queue import WriteQueue


def test_queue_keeps_order_ignores_retries_and_survives_reopen(tmp_path):
    path = tmp_path / "queue.sqlite"
    q = WriteQueue(path)
    assert q.put("w1", "a", {"text": "第一条"})
    assert q.put("w2", "b", {"text": "second"})
    assert not q.put("w1", "a", {"text": "retry"})  # same write_id: one entry
    q.failed("w1", "refused")
    q.close()

    q = WriteQueue(path)
    items = q.peek()
    assert [(i.write_id, i.request["text"], i.attempts) for i in items] == [("w1", "第一条", 1), ("w2", "second", 0)]
    assert items[0].last_error == "refused"
    assert q.depth() == 2 and q.contains("w2") and q.oldest_age_s() >= 0
    q.done("w1")
    assert [i.write_id for i in q.peek()] == ["w2"]
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_queued_write_survives_sigkill_right_after_put(tmp_path):
    """put() returns only after the commit: a process killed at once loses nothing."""
    path = tmp_path / "queue.sqlite"
    script = textwrap.dedent(
        f"""
        import os, signal
        from layers.conversation.queue import WriteQueue
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
    assert q.ahead_of("w3") == 3 and q.ahead_of("w0") == 0
    assert q.set_aside("w1", "add: ValueError: expiration_date must be a valid date")
    assert not q.set_aside("never-queued", "x")
    q.done_many(["w0", "w2"])
    q.close()

    q = WriteQueue(path)
    assert [i.write_id for i in q.peek()] == ["w3", "w4", "w5"]
    assert q.depth() == 3 and q.set_aside_count() == 1
    [aside] = q.set_aside_writes()
    assert (aside["write_id"], aside["agent_id"]) == ("w1", "a") and "expiration_date" in aside["reason"]
    assert aside["set_aside_at"] >= aside["enqueued_at"]
    assert q.put("w1", "a", {"n": "fixed"})  # set aside, it may be queued again
