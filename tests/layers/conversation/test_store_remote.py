"""The store against a real Qdrant server, when one is reachable.

No Qdrant server can run on the machines these tests are written on; set
``MEMSTRATA_TEST_QDRANT_URL`` (and ``MEMSTRATA_TEST_QDRANT_API_KEY`` if the
server wants one) to run these. Otherwise they are reported as skipped.
"""

from __future__ import annotations

import os
import uuid

import pytest

from layers.conversation.adapters.store import ConversationStore, StoreSettings
from layers.conversation.policy.rules import Phase
from tests.layers.conversation.test_store import memory

URL = os.environ.get("MEMSTRATA_TEST_QDRANT_URL")
pytestmark = pytest.mark.skipif(not URL, reason="no Qdrant server: set MEMSTRATA_TEST_QDRANT_URL to run")


@pytest.fixture
def remote(tmp_path, embedder):
    settings = StoreSettings(
        "remote",
        tmp_path,
        collection=f"memstrata_test_{uuid.uuid4().hex[:8]}",
        url=URL,
        api_key=os.environ.get("MEMSTRATA_TEST_QDRANT_API_KEY"),
        timeout_s=10,
    )
    store = ConversationStore(settings, embedder, embedder.dimension())
    store.connect()
    yield store
    store._client.delete_collection(settings.collection)
    store.close()


def test_remote_round_trip_with_payload_indexes(remote):
    remote.add(memory("a", "A 的私密记忆"))
    remote.add(memory("b", "Qdrant 部署在 6333 端口", "public"))
    schema = remote._client.get_collection(remote.settings.collection).payload_schema
    assert {"visibility", "project_id", "memory_type", "expires_at", "write_id", "agent_id"} <= set(schema)
    found = remote.search("Qdrant", [Phase("public", "public"), Phase("private", "private", owner="b")], 10)
    assert [r["memory"] for r in found] == ["Qdrant 部署在 6333 端口"]
    page, cursor = remote.list([Phase("private", "private", owner="a")], limit=1)
    assert [r["memory"] for r in page] == ["A 的私密记忆"] and cursor is None
    remote.delete(page[0]["id"])
    assert remote.get(page[0]["id"]) is None
    assert remote.ping() > 0


def test_remote_cleanup_and_snapshot_backup(remote, tmp_path):
    from layers.conversation.lifecycle import backup
    from layers.conversation.lifecycle.cleanup import Rules, run_cleanup
    from layers.conversation.policy.rules import DEFAULT_RETENTION_DAYS

    remote.add(memory("a", "old session", memory_type="session", created_at="2020-01-01T00:00:00+00:00"))
    remote.add(memory("a", "knowledge stays"))
    s = remote.settings
    archive = backup.snapshot_remote(remote._client_only(), s.collection, tmp_path / "backups", s.url, s.api_key, 30)
    assert archive.stat().st_size > 0
    report = run_cleanup(remote, Rules(DEFAULT_RETENTION_DAYS), execute=True)
    assert report.deleted == 1 and remote.count() == 1
    backup.restore_remote(archive, s.collection, s.url, s.api_key, 30)
    assert remote.count() == 2
