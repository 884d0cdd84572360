"""An L4 write on a full disk gets a true answer: stored, queued, or 507 "nothing was kept".

Never a reset connection or a 500 traceback.  When only the store's disk is
full the write waits, durably, in the queue (on another disk) and is replayed
exactly once when space returns; when the queue's disk is full too, the caller
hears that nothing was kept, so it can write again later.  Real tmpfs, real
embedded store, real model.
"""

from __future__ import annotations

import pytest

from daemon.front.daemon_client import DaemonClient, DaemonRequestError
from tests.failure_modes import filesystems
from tests.failure_modes.filesystems import storage_places
from tests.helpers import FAST, init_root, run_cli, token_of, wait_for, wait_reachable

RECOVERY_S = 90


@pytest.fixture
def tmpfs():
    yield from filesystems.mounts()


def _client(tmp_path, d) -> DaemonClient:
    return DaemonClient(d.socket, timeout=120, token=token_of(tmp_path, "main"))


def test_a_full_queue_disk_answers_507_nothing_kept_and_recovers(tmp_path, tmpfs, daemons):
    state = tmpfs(tmp_path / "state", size="128m")  # queue and store on it (the shard's WAL claims 32 MiB segments)
    config = init_root(tmp_path, **FAST, conversation={"probe_interval_s": 0.5})
    d = daemons(config)
    wait_reachable(d)
    with _client(tmp_path, d) as main:
        assert main.add("main", "写满之前的记忆")["queued"] is False

        state.fill()
        with pytest.raises(DaemonRequestError) as refused:
            main.add("main", "磁盘写满时的记忆 fullmarker", visibility="private")
        assert refused.value.status == 507, refused.value
        message = str(refused.value)
        assert "not stored" in message and "nothing was kept" in message and "queue" in message, message
        assert d.proc.poll() is None
        assert {"queue", "store"} <= storage_places(d.status())
        assert "STORAGE: writes failing: queue" in run_cli("status", config=config).stdout

        state.free()
        wait_for(lambda: not d.status()["storage"]["problems"], timeout=RECOVERY_S, what="recovered")
        assert main.add("main", "磁盘写满时的记忆 fullmarker", visibility="private")["queued"] is False
        found = main.memory_search("main", "fullmarker", fallback=False)["results"]
        assert [r["memory"] for r in found].count("磁盘写满时的记忆 fullmarker") == 1
    assert "Traceback" not in d.log(), d.log()
    assert d.stop() == 0


def test_a_full_store_disk_queues_the_write_and_replays_it_once(tmp_path, tmpfs, daemons):
    config = init_root(tmp_path, **FAST, conversation={"probe_interval_s": 0.5})
    # the queue stays on the big disk; the shard claims its 32 MiB WAL segments as it loads
    store = tmpfs(tmp_path / "state" / "conversation" / "edge", size="128m")
    d = daemons(config)
    wait_reachable(d)
    with _client(tmp_path, d) as main:
        assert main.add("main", "写满之前的记忆")["queued"] is False

        store.fill()
        answer = main.add("main", "存储盘写满时的记忆 storemarker", visibility="private")
        assert answer["queued"] is True and "cannot write" in answer["reason"], answer
        assert d.status()["conversation"]["queue"]["depth"] == 1
        assert "store" in storage_places(d.status())
        assert d.status()["conversation"]["reachable"], "a full disk is no outage: searches still go to the store"
        assert main.memory_search("main", "写满之前", fallback=False)["results"]

        store.free()
        wait_for(lambda: d.status()["conversation"]["queue"]["depth"] == 0, timeout=RECOVERY_S, what="replayed")
        wait_for(lambda: not d.status()["storage"]["problems"], timeout=RECOVERY_S, what="recovered")
        found = main.memory_search("main", "storemarker", fallback=False)["results"]
        assert [r["memory"] for r in found].count("存储盘写满时的记忆 storemarker") == 1
    assert d.log().count("storage: store writes fail") == 1, d.log()
    assert "Traceback" not in d.log(), d.log()
    assert d.stop() == 0
