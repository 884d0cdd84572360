"""The embedded store's meta.json on a full disk: never left empty, and an empty one is recovered.

qdrant-client writes the first meta.json in place; on a full disk that left an
empty file and the store could never be opened again (JSONDecodeError).
"""

from __future__ import annotations

import json

import pytest
from qdrant_client import QdrantClient, models

from layers.conversation.adapters.store import (
    META_COPY,
    QDRANT_LOCAL,
    ConversationStore,
    StoreConfigError,
    StoreSettings,
    StoreUnavailableError,
)
from tests.failure_modes import filesystems

VECTORS = models.VectorParams(size=4, distance=models.Distance.COSINE)


@pytest.fixture
def tmpfs():
    yield from filesystems.mounts()


def _store(data_dir) -> ConversationStore:
    # listing and pinging need no embedder: the client alone is under test here
    return ConversationStore(
        StoreSettings(backend="embedded", data_dir=data_dir, engine=QDRANT_LOCAL), embedder=None, dim=4
    )


def test_opening_on_a_full_disk_fails_cleanly_and_opens_once_space_returns(tmp_path, tmpfs):
    disk = tmpfs(tmp_path / "data", size="1m")
    disk.fill()
    store = _store(tmp_path / "data")
    with pytest.raises(StoreUnavailableError, match="No space left on device"):
        store.ping()
    meta = tmp_path / "data" / "qdrant" / "meta.json"
    assert not meta.exists() or json.loads(meta.read_text()) is not None  # never an empty file
    disk.free()
    assert store.ping() >= 0
    store.close()


def test_an_empty_meta_json_is_restored_from_the_last_copy_that_opened(tmp_path):
    store = _store(tmp_path)
    client = store._client_only()
    client.create_collection("kept", vectors_config=VECTORS)
    store.close()
    qdrant = tmp_path / "qdrant"
    (qdrant / META_COPY).write_bytes((qdrant / "meta.json").read_bytes())  # what connect() keeps
    (qdrant / "meta.json").write_bytes(b"")  # what a write on a full disk used to leave
    with pytest.raises(ValueError):
        QdrantClient(path=str(qdrant))  # qdrant-client alone never opens it again
    store = _store(tmp_path)
    assert [c.name for c in store._client_only().get_collections().collections] == ["kept"]
    store.close()


def test_an_empty_meta_json_with_collections_and_no_copy_is_refused_with_a_message(tmp_path):
    store = _store(tmp_path)
    store._client_only().create_collection("kept", vectors_config=VECTORS)
    store.close()
    (tmp_path / "qdrant" / "meta.json").write_bytes(b"")
    with pytest.raises(StoreConfigError, match=r"meta\.json is empty or damaged"):
        _store(tmp_path).ping()
