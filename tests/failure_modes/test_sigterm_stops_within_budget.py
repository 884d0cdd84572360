"""SIGTERM ends the daemon with exit 0 within 10 s, whatever it is doing (the stop promise of the systemd unit).

Each test puts a real daemon in one of the states that used to hold a stop up,
sends a real SIGTERM and times the exit; then a restart shows that what the stop
left unfinished is finished by the next start:

- embedding with the real model while busy loops hog both cores (a single
  passage then spends seconds inside ``llama_encode``; the worker used to finish
  its slice, then free the model: 24-56 s measured here before the fix);
- a workspace whose commits fail (a fresh ``index.lock`` another git left: 25 s before);
- replaying a queue of writes made while the store was unreachable.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

from daemon.front.daemon_client import DaemonClient
from layers.conversation.lifecycle.durable_queue import WriteQueue
from tests.daemon.conversation.test_conversation_outage import free_port, set_backend
from tests.helpers import FAST, committed, file_at_head, init_root, run_cli, token_of, wait_for

LIMIT_S = 10.0  # the promise for SIGTERM → exit


@contextlib.contextmanager
def busy_cores(n: int | None = None) -> Iterator[None]:
    """``n`` busy-loop processes (default: one per core, plus one): a loaded machine."""
    count = n if n is not None else len(os.sched_getaffinity(0)) + 1
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()


def sigterm_to_exit(daemon) -> tuple[int, float]:
    """SIGTERM the daemon; its exit code (None: killed after 60 s) and the seconds it took to exit."""
    started = time.monotonic()
    daemon.signal(signal.SIGTERM)
    try:
        code = daemon.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        code = None
        daemon.proc.kill()
    elapsed = time.monotonic() - started
    daemon.stop()  # closes its log
    return code, elapsed


def assert_stopped_in_time(daemon, code: int | None, elapsed: float) -> None:
    print(f"SIGTERM → exit: {elapsed:.1f} s, code {code}")
    assert code == 0 and elapsed < LIMIT_S, (
        f"SIGTERM → exit took {elapsed:.1f} s with code {code} (promised: exit 0 within {LIMIT_S:g} s)\n"
        + daemon.log()[-4000:]
    )


def _passage(i: int, j: int) -> str:
    """A paragraph near the model's 256-token cap: the slowest single encode there is."""
    words = " ".join(f"term{i}x{j}x{k} 记忆{k}" for k in range(50))
    return f"## part {j}\n\nnote {i} part {j}: {words}\n"


def test_sigterm_while_embedding_on_a_loaded_machine(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"min_free_mb": 0, "batch_size": 16}, conversation={"enabled": False})
    ws = tmp_path / "workspace"
    for i in range(4):
        (ws / "memory" / f"2026-09-{i + 1:02d}.md").write_text(
            f"# day {i}\n\n" + "\n".join(_passage(i, j) for j in range(3)), encoding="utf-8"
        )
    daemon = daemons(config)

    def index() -> dict:
        return daemon.agent("main")["index"]

    wait_for(lambda: index()["chunks"] >= 12 and index()["pending_embeddings"] > 0, timeout=60, what="chunks")
    with busy_cores():
        # the model loads for the first passage; status is refreshed only after a whole batch
        wait_for(lambda: "loaded multilingual" in daemon.log(), timeout=120, what="the worker embedding")
        time.sleep(1.0)  # inside an encode: each takes seconds here, and ~12 wait
        code, elapsed = sigterm_to_exit(daemon)
    assert_stopped_in_time(daemon, code, elapsed)
    assert "embedding worker still busy" not in daemon.log()

    daemon = daemons(config)  # the rest is embedded by the next start; the index agrees with itself
    wait_for(lambda: index()["pending_embeddings"] == 0, timeout=300, what="every chunk embedded after restart")
    assert index()["vectors"] == index()["chunks"] and index()["state"] == "ready"
    assert "every chunk has its vector" in run_cli("reindex", "--vectors", config=config).stdout
    answer = run_cli("search", "term3x2x5", "--agent", "main", "--json", config=config).stdout
    assert "memory/2026-09-04.md" in answer


def test_sigterm_while_commits_fail(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    ws = tmp_path / "workspace"
    daemon = daemons(config)
    lock = ws / ".git" / "index.lock"
    lock.write_text("")  # another git at work (fresh: not stale, so never removed)
    (ws / "MEMORY.md").write_text("# 长期记忆\n\n- 停止前写下的一条\n", encoding="utf-8")
    wait_for(lambda: "index.lock" in (daemon.agent("main")["last_error"] or ""), timeout=30, what="the commit failing")
    code, elapsed = sigterm_to_exit(daemon)
    assert_stopped_in_time(daemon, code, elapsed)
    assert "left uncommitted at shutdown" in daemon.log()
    assert not committed(ws, "M", "MEMORY.md")

    lock.unlink()  # the other git is done
    daemons(config)
    wait_for(lambda: committed(ws, "M", "MEMORY.md"), timeout=30, what="the change committed at the next start")
    assert "停止前写下的一条" in file_at_head(ws, "MEMORY.md")


def _all_memories(daemon, token: str) -> list[dict]:
    found: list[dict] = []
    cursor = None
    with DaemonClient(daemon.socket, timeout=60, token=token) as a:
        while True:
            page = a.get_all("a", limit=100, cursor=cursor)
            found += page["results"]
            cursor = page["next_cursor"]
            if cursor is None:
                return found


def test_sigterm_during_replay_of_a_large_queue(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    run_cli("agent", "add", "a", config=config)
    set_backend(config, "remote", f"http://127.0.0.1:{free_port()}")  # nobody listens: the store is down
    daemon = daemons(config)
    token = token_of(tmp_path, "a")
    count = 40
    with DaemonClient(daemon.socket, timeout=30, token=token) as a:
        written = [a.add("a", f"断网时写入的第 {i} 条记忆 note {i}", type="session") for i in range(count)]
    assert all(w["queued"] for w in written)
    code, elapsed = sigterm_to_exit(daemon)  # while the store is unreachable: a stop of its own
    assert_stopped_in_time(daemon, code, elapsed)

    set_backend(config, "embedded")  # the store is back: the next start replays the queue
    daemon = daemons(config)
    wait_for(lambda: daemon.status()["conversation"]["queue"]["replayed"] > 0, timeout=120, what="replay started")
    code, elapsed = sigterm_to_exit(daemon)
    assert_stopped_in_time(daemon, code, elapsed)
    left = WriteQueue(tmp_path / "state" / "conversation" / "queue.sqlite")
    try:
        print(f"queue depth at the stop: {left.depth()} of {count}")
    finally:
        left.close()

    daemon = daemons(config)
    wait_for(lambda: daemon.status()["conversation"]["queue"]["depth"] == 0, timeout=300, what="queue drained")
    stored = _all_memories(daemon, token)
    ids = [m["write_id"] for m in stored]
    assert sorted(ids) == sorted(w["write_id"] for w in written), "every write present exactly once"
    assert len(set(ids)) == len(ids) == count
