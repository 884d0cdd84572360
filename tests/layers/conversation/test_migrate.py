"""An old local-mode store is imported into Edge once, ids/payloads/vectors kept, the old directory left alone."""

from __future__ import annotations

import contextlib
import json
import logging

import numpy as np

from layers.conversation.adapters import migrate
from layers.conversation.adapters.store import QDRANT_LOCAL, ConversationStore, StoreSettings
from layers.conversation.policy.rules import Phase
from tests.layers.conversation.test_store import memory

PRIVATE_A = Phase("private", "private", owner="a")
PUBLIC = Phase("public", "public")


def old_store(tmp_path, embedder, n: int) -> list[str]:
    """A store written by the previous engine (qdrant-client's local mode), closed; the ids it holds."""
    s = ConversationStore(StoreSettings("embedded", tmp_path / "l4", engine=QDRANT_LOCAL), embedder, 384)
    s.connect()
    results = s.add_batch([memory("a", f"旧引擎写下的第 {i} 条记忆 oldmarker{i}") for i in range(n)])
    s.add(memory("b", "旧引擎里的一条公开记忆 publicmarker", "public"))
    s.close()
    return [r.ids[0] for r in results]


def test_the_old_store_is_imported_once_and_kept(tmp_path, embedder, caplog):
    ids = old_store(tmp_path, embedder, 40)
    caplog.set_level(logging.INFO, logger="layers.conversation.adapters.store")
    s = ConversationStore(StoreSettings("embedded", tmp_path / "l4"), embedder, 384)
    s.connect()
    try:
        assert s.count() == 41
        assert "imported 41 memories in" in caplog.text and "verified by count" in caplog.text
        assert s.import_progress == {"state": "done", "from": str(tmp_path / "l4" / "qdrant"), "done": 41, "total": 41}
        got = s.get(ids[7])
        assert got["memory"] == "旧引擎写下的第 7 条记忆 oldmarker7" and got["agent_id"] == "a"
        assert s.find_write("a", got["write_id"]) == [ids[7]], "the derived point id survives the import"
        hits = s.search("oldmarker7 旧引擎写下的第 7 条记忆", [PRIVATE_A], limit=3)
        assert hits[0]["id"] == ids[7], "vectors came across"
        assert [h["memory"] for h in s.search("publicmarker", [PUBLIC], limit=3)] == [
            "旧引擎里的一条公开记忆 publicmarker"
        ]
        vec = s._client.retrieve([ids[3]], with_vector=True)[0].vector
        assert np.isclose(np.linalg.norm(vec), 1.0, atol=1e-3)
    finally:
        s.close()
    marker = json.loads(migrate.marker_path(tmp_path / "l4" / "edge" / "mem0_v4_shared").read_text())
    assert marker["points"] == 41
    assert (tmp_path / "l4" / "qdrant" / "meta.json").is_file(), "the old directory is kept"

    caplog.clear()
    again = ConversationStore(StoreSettings("embedded", tmp_path / "l4"), embedder, 384)
    again.connect()
    again.close()
    assert "importing" not in caplog.text, "imported once"


def test_an_interrupted_import_starts_again_cleanly(tmp_path, embedder):
    """Half the points in the shard and no marker (a kill mid-import): the next open imports everything once."""
    from layers.conversation.adapters.edge import EdgeCollection

    ids = old_store(tmp_path, embedder, 30)
    shard = EdgeCollection(tmp_path / "l4" / "edge" / "mem0_v4_shared", 384)
    calls = []

    def stop_half_way(done, total):
        calls.append(done)
        raise KeyboardInterrupt  # what a kill leaves: some pages in, no marker

    migrate.PAGE, saved = 8, migrate.PAGE
    try:
        with contextlib.suppress(KeyboardInterrupt):
            migrate.import_local_mode(tmp_path / "l4" / "qdrant", "mem0_v4_shared", shard, stop_half_way)
    finally:
        migrate.PAGE = saved
    assert calls == [8] and shard.count() == 8
    shard.close()
    assert not migrate.marker_path(shard.path).exists()

    s = ConversationStore(StoreSettings("embedded", tmp_path / "l4"), embedder, 384)
    s.connect()
    try:
        assert s.count() == 31 and all(s.get(i) for i in ids)
    finally:
        s.close()
