"""The conversation room's in-process tests: the broker, its write queue and its breaker, on a real root.

No daemon subprocess: the broker is composed over a real store as the daemon
composes it (tests/daemon/conversation_service.py): the embedded store (Qdrant Edge
files in the state directory) or a remote server at a closed port, where every
call fails.  The queue is the real apsw file, the embedder the stand-in HTTP
endpoint.  What is checked is what L4 promises across its parts: a write the
store could not take is kept across a reopen and replayed exactly once; the
breaker refuses at once while the store is down, opens on a failure and is
closed by the probe; a reload applies what it can.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from daemon.common.domain_errors import ConversationUnavailableError
from daemon.common.storage import StorageHealth
from daemon.conversation.store_thread import StoreDown, StoreThread
from layers.conversation.adapters.breaker import Breaker
from layers.conversation.adapters.store import ConversationStore, StoreSettings, StoreUnavailableError
from protocol.operations import Add, List, MemorySearch
from tests.daemon.conversation_service import closed_port, enable, l4_service, unreachable
from tests.helpers import wait_for
from tests.stand_in_embedder import StandInEmbedder


@pytest.fixture
def embedder() -> Iterator[StandInEmbedder]:
    e = StandInEmbedder()
    yield e
    e.close()


def _mine(broker, agent: str) -> list[dict]:
    return broker.get_all(List(agent, limit=1000))["results"]


# ---------------------------------------------------------------- the queue


def test_a_write_the_store_could_not_take_survives_a_reopen_and_is_replayed_once(service_root, embedder):
    enable(service_root, embedder, **unreachable())
    with l4_service(service_root, start=False) as down:
        answer = down.daemon.broker.add(Add("main", "the generator is serviced in March", write_id="w-generator"))
        assert answer["queued"] is True and answer["write_id"] == "w-generator"
        stopped = down.daemon.broker
    assert stopped.status()["queue"]["depth"] == 1, "once stopped, its last status is still read"

    with l4_service(service_root, start=False) as reopened:  # another process, the same state directory
        broker = reopened.daemon.broker
        assert broker.queue.depth() == 1 and broker.queue.contains("w-generator", "main")
        again = broker.add(Add("main", "the generator is serviced in March", write_id="w-generator"))
        assert again["queued"] is True and "already queued" in again["reason"]
        assert broker.queue.depth() == 1, "a retried write_id is kept once"

    # the store is back: the embedded one, in the same state directory (probed often: the replay follows a probe)
    enable(service_root, embedder, probe_interval_s=0.2)
    with l4_service(service_root) as up:
        broker = up.daemon.broker
        wait_for(lambda: broker.queue.depth() == 0, timeout=60, what="the queue replayed")
        (memory,) = [m for m in _mine(broker, "main") if m["write_id"] == "w-generator"]
        assert memory["memory"] == "the generator is serviced in March" and memory["memory_type"] == "knowledge"
        assert broker.status()["queue"]["replayed"] == 1
        retried = broker.add(Add("main", "the generator is serviced in March", write_id="w-generator"))
        assert retried["queued"] is False and retried["results"] == [{"id": memory["id"], "event": "EXISTS"}]
        assert len([m for m in _mine(broker, "main") if m["write_id"] == "w-generator"]) == 1, "exactly once"


# ---------------------------------------------------------------- the breaker


def test_while_the_store_is_down_the_breaker_refuses_at_once_and_the_probe_keeps_looking(service_root, embedder):
    enable(service_root, embedder, **unreachable(), probe_interval_s=0.2)
    with l4_service(service_root, start=False) as down:
        broker = down.daemon.broker
        breaker = broker.status()["breaker"]
        assert breaker["state"] == "open" and breaker["last_error"] == "not connected yet"
        with pytest.raises(ConversationUnavailableError, match="not connected yet"):
            broker.search(MemorySearch("main", "anything", fallback=False))

        broker.start()  # the probe: a real connection to the closed port, refused
        wait_for(lambda: broker.status()["breaker"]["failures"] >= 2, timeout=30, what="the probe tried again")
        status = broker.status()
        assert status["reachable"] is False and status["breaker"]["state"] == "open"
        assert status["breaker"]["last_error"].startswith("probe:")
        queued = broker.add(Add("main", "written while the probe looks"))
        assert queued["queued"] is True and "probe:" in queued["reason"], "the write says why it waits"


def test_a_failure_opens_the_breaker_and_the_probe_closes_it_again(service_root, embedder):
    enable(service_root, embedder)
    with l4_service(service_root) as up:
        broker = up.daemon.broker
        assert broker.status()["breaker"]["state"] == "closed" and broker.status()["rtt_ms"] is not None
        broker.thread.failed("the link was cut by the test")
        wait_for(lambda: broker.status()["reachable"], timeout=60, what="the probe closes the breaker")
        breaker = broker.status()["breaker"]
        assert breaker["failures"] == 1 and breaker["last_error"] == "the link was cut by the test"
        assert broker.add(Add("main", "written after the store came back"))["queued"] is False


def test_the_store_thread_runs_nothing_while_the_breaker_is_open_and_opens_it_on_a_failure(tmp_path):
    store = ConversationStore(StoreSettings("remote", tmp_path, url=f"http://127.0.0.1:{closed_port()}"), None, 0)
    changes: list[str] = []
    thread = StoreThread(store, Breaker(probe_interval_s=60), 5.0, StorageHealth(), lambda: changes.append("x"))
    ran: list[str] = []
    try:
        with pytest.raises(StoreDown, match="not connected yet"):
            thread.call("search", lambda: ran.append("search"))
        assert ran == [], "refused before anything reached the store"

        thread.breaker.success()  # as after a probe that answered
        assert thread.call("ping", lambda: threading.current_thread().name) != threading.current_thread().name

        def fails() -> None:
            raise StoreUnavailableError("connection refused")

        with pytest.raises(StoreDown, match="connection refused"):
            thread.call("add", fails)
        assert not thread.breaker.closed and thread.attention.is_set(), "the probe is woken"
        assert changes == ["x"], "the status hears of it once"
        with pytest.raises(StoreDown):
            thread.call("search", lambda: ran.append("search"))
        assert ran == []
    finally:
        assert thread.close(5)


# ---------------------------------------------------------------- reload


def test_a_reload_applies_retention_at_once_and_reconnects_to_another_collection(service_root, embedder):
    from daemon.common.config import load_config

    enable(service_root, embedder)
    with l4_service(service_root) as up:
        broker = up.daemon.broker
        first = broker.add(Add("main", "kept in the first collection"))["results"][0]["id"]
        enable(service_root, embedder, retention_days={"session": 3})
        assert broker.reconfigure(load_config(service_root)) == ["conversation.retention_days"]
        session = broker.add(Add("main", "a short-lived note", memory_type="session"))
        in_three_days = (datetime.now(timezone.utc) + timedelta(days=3)).date().isoformat()
        assert session["expiration_date"] == in_three_days, "the new retention, at once"

        enable(service_root, embedder, retention_days={"session": 3}, qdrant={"collection": "second"})
        changed = broker.reconfigure(load_config(service_root))
        assert changed == ["conversation store (reconnected)"]
        wait_for(lambda: broker.status()["reachable"], timeout=60, what="the new store opens")
        assert broker.status()["collection"] == "second"
        assert first not in [m["id"] for m in _mine(broker, "main")], "another collection"


def test_a_job_holding_the_store_a_reload_replaced_never_locks_out_the_new_one(service_root, embedder):
    """Issue 45: a job that captured the store object before a reload's swap and ran after it reopened
    the old Edge shard and held its lock for ever; the new store then failed to connect ("open in
    another process or handle") and L4 stayed off until a restart.  A replaced store refuses now."""
    from daemon.common.config import load_config

    enable(service_root, embedder)
    with l4_service(service_root) as up:
        broker = up.daemon.broker
        first = broker.add(Add("main", "written before the reload"))["results"][0]["id"]
        old = broker.thread.store
        enable(service_root, embedder, qdrant={"timeout_s": 7})  # same shard, other settings: a reconnect
        assert broker.reconfigure(load_config(service_root)) == ["conversation store (reconnected)"]
        wait_for(lambda: broker.thread.store is not old, timeout=30, what="the swap ran")
        with pytest.raises(StoreUnavailableError, match="replaced by a reload"):
            broker.thread.worker.call(old.count, 30)  # on the store thread, the captured old store: refused
        wait_for(lambda: broker.status()["reachable"], timeout=60, what=f"the new store opens: {broker.status()}")
        assert not broker.status()["error"]
        assert broker.get("main", first)["memory"] == "written before the reload"
        assert broker.add(Add("main", "written after the reload"))["queued"] is False
