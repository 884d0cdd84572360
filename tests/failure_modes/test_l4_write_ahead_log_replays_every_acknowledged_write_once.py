"""Every acknowledged L4 add is in the write-ahead log until the store has flushed it, and once after a crash.

Issue 45: an add was answered right after an unsynced Edge upsert (mem0's random point id), and a
replayed queued write left the queue before the store flushed it; a power cut 1 or 15 s after the
answers lost every one of them.  Now each add is logged (synced, group-committed) before it is
answered and applied at its deterministic point id; a row leaves the log only after a checkpoint
has flushed the store past it, and whatever the log holds at a start is applied again, at the same
id, before the queue counts as drained.

The states a crash can leave are built here exactly (the loop-image power cuts are in
tests/powercut/, on the other half of the issue), with the real daemon on the real Edge shard:

- SIGKILL between the log append and the store apply: the row claimed, the store without it;
- SIGKILL between the apply and the checkpoint: the row applied, the store with it;
- a power cut after the apply, before the checkpoint: the row applied, the store without it
  (the Edge update was never synced);

and a real SIGKILL right after 8 concurrent writers' acknowledgements.  In every case each
acknowledged write is stored exactly once afterwards, at its deterministic point id.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import pytest

from daemon.front.daemon_client import DaemonClient
from layers.conversation.adapters.store import NewMemory
from layers.conversation.lifecycle.durable_queue import APPLIED, CLAIMED, WriteQueue
from layers.conversation.lifecycle.write_ids import point_id_of
from layers.conversation.policy.rules import DEFAULT_RETENTION_DAYS, lifetime
from tests.failure_modes.test_outage_backlog_replays_in_batches_exactly_once import prepare, queue_path, stored
from tests.helpers import token_of, wait_for
from tests.stand_in_embedder import StandInEmbedder


@pytest.fixture
def embedder():
    server = StandInEmbedder()
    yield server
    server.close()


def memory(write_id: str, agent: str = "a") -> NewMemory:
    created = datetime.now(timezone.utc)
    life = lifetime("knowledge", DEFAULT_RETENTION_DAYS, created)
    return NewMemory(
        write_id=write_id,
        agent_id=agent,
        text=f"写前日志里的记忆 {write_id} (a memory in the write-ahead log)",
        memory_type="knowledge",
        visibility="private",
        project_id=None,
        created_at=created.isoformat(timespec="seconds"),
        expiration_date=life.expiration_date,
        expires_at=life.expires_at,
    )


def leave_in_log(root: Path, writes: list[NewMemory], state: int) -> None:
    """Rows as a crash leaves them: logged by a request (claimed) or applied by it, never checkpointed."""
    queue = WriteQueue(queue_path(root))
    try:
        seqs = [queue.log(w.write_id, w.agent_id, asdict(w))[0] for w in writes]
        assert None not in seqs
        if state == APPLIED:
            queue.applied([s for s in seqs if s is not None])
    finally:
        queue.close()


def log_rows(root: Path) -> int:
    queue = WriteQueue(queue_path(root))
    try:
        return queue.depth() + queue.unflushed()
    finally:
        queue.close()


def once_each(root: Path, writes: list[NewMemory]) -> None:
    points = stored(root)
    by_key: dict[tuple[str, str], list[str]] = {}
    for p in points:
        by_key.setdefault((p["agent_id"], p["write_id"]), []).append(p["id"])
    for w in writes:
        ids = by_key.get((w.agent_id, w.write_id), [])
        assert ids == [point_id_of(w.agent_id, w.write_id)], f"{w.write_id}: stored as {ids}"


def drained(daemon) -> None:
    wait_for(
        lambda: daemon.status()["conversation"]["queue"]["depth"] == 0 and daemon.status()["conversation"]["reachable"],
        timeout=60,
        what="the log replayed",
    )


def test_rows_a_crash_left_in_the_log_are_applied_once_whatever_the_store_kept(tmp_path, daemons, embedder):
    config, env = prepare(tmp_path, embedder)
    daemon = daemons(config, env=env)
    with DaemonClient(daemon.socket, timeout=30, token=token_of(tmp_path, "a")) as a:
        kept = a.add("a", "applied and answered before the crash", type="knowledge", write_id="kept-1")
    assert kept["queued"] is False
    wait_for(lambda: daemon.status()["conversation"]["queue"]["checkpoints"] > 0, timeout=30, what="a checkpoint")
    queue_now = daemon.status()["conversation"]["queue"]
    assert queue_now["unflushed"] == 0 and queue_now["checkpoint_error"] == "", queue_now
    assert daemon.stop() == 0
    assert log_rows(tmp_path) == 0, "a clean stop checkpoints: the log is empty"

    claimed = [memory(f"claimed-{i}") for i in range(5)]  # SIGKILL between the log append and the apply
    lost = [memory(f"unsynced-{i}") for i in range(5)]  # a power cut took the unsynced store update
    again = [memory("kept-1")]  # SIGKILL between the apply and the checkpoint: the store has it
    leave_in_log(tmp_path, claimed, CLAIMED)
    leave_in_log(tmp_path, lost, APPLIED)
    queue = WriteQueue(queue_path(tmp_path))
    assert queue.log("kept-1", "a", asdict(again[0]))[0] is not None
    queue.close()

    daemon = daemons(config, env=env)
    drained(daemon)
    queue_after = daemon.status()["conversation"]["queue"]
    assert queue_after["replayed"] == len(claimed) + len(lost)
    assert queue_after["skipped_already_written"] == 1, "kept-1 was found, not written again"
    assert daemon.stop() == 0
    assert log_rows(tmp_path) == 0
    once_each(tmp_path, claimed + lost)
    points = stored(tmp_path)
    assert [p["write_id"] for p in points].count("kept-1") == 1


def test_acknowledged_adds_of_8_writers_survive_a_sigkill_right_after_once_each(tmp_path, daemons, embedder):
    config, env = prepare(tmp_path, embedder)
    daemon = daemons(config, env=env)
    acknowledged: list[tuple[str, str]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        agent = "ab"[n % 2]
        try:
            with DaemonClient(daemon.socket, timeout=60, token=token_of(tmp_path, agent)) as client:
                for i in range(15):
                    write_id = f"w{n}-{i}"
                    answer = client.add(agent, f"第 {n} 个写者的第 {i} 条 (writer {n}, write {i})", write_id=write_id)
                    assert answer["queued"] is False, answer
                    with lock:
                        acknowledged.append((agent, write_id))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    daemon.signal(signal.SIGKILL)  # right after the last acknowledgement: no clean stop, no checkpoint owed
    daemon.proc.wait(10)
    assert not errors, errors
    assert len(acknowledged) == 120

    daemon = daemons(config, env=env)
    drained(daemon)
    assert daemon.stop() == 0
    points = stored(tmp_path)
    keys = [(p["agent_id"], p["write_id"]) for p in points]
    assert sorted(keys) == sorted(acknowledged), "every acknowledged add once, nothing else"
    assert all(p["id"] == point_id_of(p["agent_id"], p["write_id"]) for p in points), "deterministic ids"
