"""Every Edge operation the product uses, on the real engine: the next qdrant-edge-py release is checked here.

Each test names one operation of layers/conversation/adapters/edge.py and what the product relies on it
doing; a release that changes any of them fails here before it reaches the store.
"""

from __future__ import annotations

import errno
import importlib.metadata
import uuid

import numpy as np
import pytest

from layers.conversation.adapters import edge
from layers.conversation.adapters.edge import EdgeCollection, EdgeLockedError, to_filter
from tests.failure_modes.filesystems import Tmpfs

DIM = 8


def vec(seed: int) -> list[float]:
    v = np.random.default_rng(seed).normal(size=DIM)
    return (v / np.linalg.norm(v)).tolist()


def pid(n: int) -> str:
    return str(uuid.UUID(int=n + 1))


@pytest.fixture
def shard(tmp_path):
    c = EdgeCollection(tmp_path / "shard", DIM)
    yield c
    c.close()


def fill(c: EdgeCollection, n: int = 20) -> None:
    c.upsert(
        (
            pid(i),
            vec(i),
            {
                "agent_id": f"a{i % 2}",
                "visibility": ("public", "project", "private", "private")[i % 4],
                "project_id": ("infra", "web")[(i // 4) % 2] if i % 4 == 1 else None,
                "expires_at": float(i),
                "created_at": f"2026-11-{1 + i:02d}T00:00:00+00:00",
                "n": i,
            },
        )
        for i in range(n)
    )


def test_the_pinned_engine_is_installed():
    assert importlib.metadata.version("qdrant-edge-py") == edge.ENGINE_VERSION


def test_create_then_reopen_keeps_points_and_indexes(tmp_path):
    c = EdgeCollection(tmp_path / "s", DIM)
    fill(c, 5)
    c.ensure_index("agent_id", edge.KEYWORD)
    c.ensure_index("expires_at", edge.FLOAT)
    c.ensure_index("agent_id", edge.KEYWORD)  # twice: nothing happens
    c.close()
    c.close()  # a second close does nothing
    assert edge.stored_dim(tmp_path / "s") == DIM
    again = EdgeCollection(tmp_path / "s", DIM)
    try:
        assert again.count() == 5
        assert again.indexes() == {"agent_id": "keyword", "expires_at": "float"}
    finally:
        again.close()


def test_an_index_made_in_the_heap_is_made_again_on_disk_and_filters_as_before(tmp_path):
    """An earlier version's shard has its payload indexes at the engine's default (in the heap, growing
    with the data); opening it with this one makes them again on disk, and a filter answers the same."""
    c = EdgeCollection(tmp_path / "s", DIM)
    fill(c, 40)
    c._update(edge.qe.UpdateOperation.create_field_index("agent_id", edge.qe.PayloadSchemaType.Keyword))
    c._update(edge.qe.UpdateOperation.create_field_index("expires_at", edge.qe.PayloadSchemaType.Float))
    schema = c._live().info().payload_schema
    assert not edge._on_disk(schema["agent_id"]) and not edge._on_disk(schema["expires_at"])
    before = {h.id for h in c.search(vec(3), 40, {"agent_id": "a1", "expires_at": {"gte": 10}})}
    c.close()
    again = EdgeCollection(tmp_path / "s", DIM)
    try:
        again.ensure_index("agent_id", edge.KEYWORD)
        again.ensure_index("expires_at", edge.FLOAT)
        again.ensure_index("visibility", edge.KEYWORD)  # a new one is made on disk too
        schema = again._live().info().payload_schema
        assert all(edge._on_disk(schema[f]) for f in ("agent_id", "expires_at", "visibility"))
        assert schema["agent_id"].points == 40
        assert {h.id for h in again.search(vec(3), 40, {"agent_id": "a1", "expires_at": {"gte": 10}})} == before
        assert len(before) == 15  # odd i from 11 to 39
    finally:
        again.close()
    third = EdgeCollection(tmp_path / "s", DIM)  # kept as made: nothing is made again at the next open
    try:
        schema = third._live().info().payload_schema
        assert all(edge._on_disk(schema[f]) for f in ("agent_id", "expires_at", "visibility"))
        writes = third.writes
        third.ensure_index("agent_id", edge.KEYWORD)
        assert third.writes == writes
        assert {h.id for h in third.search(vec(3), 40, {"agent_id": "a1", "expires_at": {"gte": 10}})} == before
    finally:
        third.close()


def test_reopening_with_another_size_is_refused(tmp_path):
    EdgeCollection(tmp_path / "s", DIM).close()
    with pytest.raises(ValueError, match="8-dimensional"):
        EdgeCollection(tmp_path / "s", DIM * 2)


def test_a_second_open_is_refused_and_the_first_handle_keeps_working(shard):
    """The engine's own second load breaks the first handle's flush; our lock stops it first."""
    fill(shard, 3)
    with pytest.raises(EdgeLockedError):
        EdgeCollection(shard.path, DIM)
    shard.upsert([(pid(99), vec(99), {"n": 99})])
    shard.flush()
    assert shard.count() == 4


def test_upsert_replaces_by_id_and_retrieve_returns_string_ids(shard):
    shard.upsert([(pid(1), vec(1), {"n": 1})])
    shard.upsert([(pid(1), vec(2), {"n": 2})])
    assert shard.count() == 1
    (hit,) = shard.retrieve([pid(1), pid(7)], with_vector=True)  # a missing id is simply absent
    assert hit.id == pid(1) and hit.payload == {"n": 2}
    assert np.allclose(hit.vector, vec(2), atol=1e-5)
    assert shard.retrieve([]) == []


def test_bad_ids_and_bad_vectors_are_request_errors(shard):
    with pytest.raises(ValueError, match="not a point id"):
        shard.retrieve(["not-a-uuid"])
    with pytest.raises(ValueError, match="dimension"):
        shard.upsert([(pid(1), [1.0, 2.0], {})])


def test_delete_by_ids_and_by_filter(shard):
    fill(shard, 8)
    shard.delete([pid(0), pid(1)])
    assert shard.count() == 6
    shard.delete_where({"agent_id": "a1"})
    assert shard.count() == 3 and {h.payload["agent_id"] for h in shard.scroll()[0]} == {"a0"}
    with pytest.raises(ValueError):
        shard.delete_where({})


def test_payload_merge_and_replace_and_vector_update(shard):
    shard.upsert([(pid(1), vec(1), {"a": 1, "b": 2})])
    shard.set_payload(pid(1), {"b": 3, "c": 4})
    assert shard.retrieve([pid(1)])[0].payload == {"a": 1, "b": 3, "c": 4}
    shard.replace_payload(pid(1), {"z": 0})
    assert shard.retrieve([pid(1)])[0].payload == {"z": 0}
    shard.set_vector(pid(1), vec(5))
    assert np.allclose(shard.retrieve([pid(1)], with_vector=True)[0].vector, vec(5), atol=1e-5)


def test_search_scores_are_cosine_similarity_highest_first(shard):
    fill(shard, 20)
    hits = shard.search(vec(3), limit=5)
    assert hits[0].id == pid(3) and hits[0].score == pytest.approx(1.0, abs=1e-4)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    exact = np.array([vec(i) for i in range(20)]) @ np.array(vec(3))
    assert [h.id for h in hits] == [pid(int(i)) for i in np.argsort(-exact)[:5]]


@pytest.mark.parametrize(
    "filters, expected",
    [
        ({"agent_id": "a0"}, lambda p: p["agent_id"] == "a0"),
        ({"agent_id": {"eq": "a1"}}, lambda p: p["agent_id"] == "a1"),
        ({"agent_id": "*", "visibility": "public"}, lambda p: p["visibility"] == "public"),
        ({"project_id": {"in": ["infra", "web"]}}, lambda p: p["project_id"] in ("infra", "web")),
        ({"project_id": ["infra"]}, lambda p: p["project_id"] == "infra"),
        ({"visibility": {"ne": "private"}}, lambda p: p["visibility"] != "private"),
        ({"visibility": {"nin": ["private", "public"]}}, lambda p: p["visibility"] == "project"),
        ({"expires_at": {"gte": 5, "lt": 9}}, lambda p: 5 <= p["expires_at"] < 9),
        ({"created_at": {"lt": "2026-11-04T00:00:00+00:00"}}, lambda p: p["n"] < 3),
        ({"NOT": [{"expires_at": {"lt": 10}}]}, lambda p: p["expires_at"] >= 10),
        ({"OR": [{"agent_id": "a0"}, {"visibility": "project"}]}, lambda p: p["agent_id"] == "a0" or p["n"] % 4 == 1),
        ({"$or": [{"n": 1}, {"n": 2}], "OR": [{"n": 1}, {"n": 2}]}, lambda p: p["n"] in (1, 2)),
        ({"AND": [{"agent_id": "a1"}, {"visibility": "private"}]}, lambda p: p["agent_id"] == "a1" and p["n"] % 4 == 3),
        (
            {"visibility": "private", "agent_id": "a0", "NOT": [{"expires_at": {"lt": 6}}]},
            lambda p: p["n"] % 4 == 2 and p["n"] >= 6,
        ),
    ],
)
def test_filters_in_search_scroll_and_count(shard, filters, expected):
    fill(shard, 20)
    shard.ensure_index("agent_id", edge.KEYWORD)
    shard.ensure_index("expires_at", edge.FLOAT)
    payloads = {h.id: h.payload for h in shard.scroll(limit=100)[0]}
    want = {i for i, p in payloads.items() if expected(p)}
    assert want, "each case must select something"
    assert {h.id for h in shard.search(vec(0), limit=100, filters=filters)} == want
    assert {h.id for h in shard.scroll(filters, limit=100)[0]} == want
    assert shard.count(filters) == len(want)


def test_filter_errors_name_the_field():
    with pytest.raises(ValueError, match="expires_at"):
        to_filter({"expires_at": {"lt": "soon"}})
    with pytest.raises(ValueError, match="bogus"):
        to_filter({"x": {"bogus": 1}})
    with pytest.raises(ValueError, match="OR"):
        to_filter({"OR": {"a": 1}})
    assert to_filter({"agent_id": "*"}) is None and to_filter({}) is None


def test_scroll_pages_cover_everything_once_in_id_order(shard):
    fill(shard, 25)
    seen, offset = [], None
    while True:
        page, offset = shard.scroll(limit=7, offset=offset, with_payload=["n"])
        seen.extend(page)
        if offset is None:
            break
    assert [h.id for h in seen] == sorted(pid(i) for i in range(25))
    assert all(set(h.payload) == {"n"} for h in seen)


def test_optimize_builds_the_index_and_searches_still_answer(tmp_path):
    c = EdgeCollection(tmp_path / "s", DIM)
    try:
        c.upsert((pid(i), vec(i), {"n": i}) for i in range(300))
        before = [h.id for h in c.search(vec(7), limit=3)]
        c.optimize()
        assert c.info()["points"] == 300
        assert [h.id for h in c.search(vec(7), limit=3, exact=True)] == before
        assert c.search(vec(7), limit=1)[0].id == pid(7)
    finally:
        c.close()


def test_the_hnsw_settings_are_written_at_create_and_at_reopen(tmp_path):
    """HnswIndexConfig in EdgeConfig (create and load): a shard made with the defaults gets ours at reopen."""
    import json

    import qdrant_edge as qe

    def stored(path):
        return json.loads((path / "edge_config.json").read_text()).get("hnsw_config") or {}

    c = EdgeCollection(tmp_path / "new", DIM)
    c.close()
    assert stored(tmp_path / "new")["full_scan_threshold"] == edge.HNSW_FULL_SCAN_KB
    params = qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)
    qe.EdgeShard.create(str(tmp_path / "old"), qe.EdgeConfig(vectors=params)).close()  # as 0.9.0 shards were made
    assert stored(tmp_path / "old") == {}
    old = EdgeCollection(tmp_path / "old", DIM)
    try:
        old.upsert((pid(i), vec(i), {"n": i}) for i in range(50))
        assert old.search(vec(9), limit=1)[0].id == pid(9)  # searched with SearchParams(hnsw_ef=HNSW_EF)
    finally:
        old.close()
    assert stored(tmp_path / "old")["full_scan_threshold"] == edge.HNSW_FULL_SCAN_KB


def test_flush_then_copy_of_a_closed_shard_loads(tmp_path):
    """Backups are a copy of a flushed shard's directory (the engine creates no snapshots)."""
    import shutil

    c = EdgeCollection(tmp_path / "s", DIM)
    fill(c, 10)
    c.flush()
    c.close()
    shutil.copytree(tmp_path / "s", tmp_path / "copy")
    copy = EdgeCollection(tmp_path / "copy", DIM)
    try:
        assert copy.count() == 10 and copy.search(vec(4), limit=1)[0].id == pid(4)
    finally:
        copy.close()


def test_a_closed_shard_refuses_calls(tmp_path):
    c = EdgeCollection(tmp_path / "s", DIM)
    c.close()
    assert c.closed
    with pytest.raises(Exception):  # noqa: B017 - any error will do, as long as nothing pretends to work
        c.count()


def test_a_full_file_system_is_enospc_not_sigbus(tmp_path):
    """The engine's mmapped writes die with SIGBUS on a full disk: the free-space check must come first."""
    small = Tmpfs(tmp_path / "small", size="96m")
    try:
        c = EdgeCollection(small.path / "s", DIM)
        fill(c, 5)
        # the engine writes an update's pages into its segment files after the call returns (within about a
        # second, unless flushed): a disk filled before then killed this test's worker with SIGBUS (once in
        # four full runs).  That window is the module's documented limit; what is tested is the next write.
        c.flush()
        small.fill()
        with pytest.raises(OSError) as full:
            c.upsert([(pid(50), vec(50), {"n": 50})])
        assert full.value.errno == errno.ENOSPC
        with pytest.raises(OSError):
            c.ensure_index("n", edge.FLOAT)
        assert c.count() == 5  # reads go on
        small.free()
        c.upsert([(pid(50), vec(50), {"n": 50})])
        c.close()
        assert EdgeCollection(small.path / "s", DIM).count() == 6
    finally:
        small.unmount()


def _search_threads() -> int:
    """The engine's search threads in this process, once its pool has started them (they start on their own
    time: read at once, a busy host showed 0)."""
    import time
    from pathlib import Path

    def count() -> int:
        return sum(p.read_text().startswith("edge-search") for p in Path("/proc/self/task").glob("*/comm"))

    deadline = time.monotonic() + 10
    while count() < edge.SEARCH_THREADS and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # one more would have started by now
    return count()


def test_the_search_pool_is_sized_and_stored_in_the_shard(tmp_path):
    """EdgeConfig(max_search_threads): the pool the engine starts (it sized it from the host's CPUs:
    8 threads on a 2-core guest), kept in edge_config.json for a load without a config (the swap)."""
    import json

    import qdrant_edge as qe

    c = EdgeCollection(tmp_path / "s", DIM)
    try:
        assert _search_threads() == edge.SEARCH_THREADS
    finally:
        c.close()
    assert json.loads((tmp_path / "s" / "edge_config.json").read_text())["max_search_threads"] == edge.SEARCH_THREADS
    raw = qe.EdgeShard.load(str(tmp_path / "s"))
    try:
        assert _search_threads() == edge.SEARCH_THREADS
    finally:
        raw.close()
