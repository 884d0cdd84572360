"""The L4 store on the real thing: mem0 over the embedded engine (a Qdrant Edge shard), the real GGUF model."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from layers.conversation.adapters.store import ConversationStore, NewMemory, StoreConfigError, StoreSettings
from layers.conversation.policy.rules import Phase
from layers.local.models.vectors import OpenAIEmbedder

CREATED = "2026-11-30T08:00:00+00:00"


def memory(agent: str, text: str, visibility: str = "private", project: str | None = None, **kw) -> NewMemory:
    fields = {"memory_type": "knowledge", "expiration_date": None, "expires_at": None, "created_at": CREATED, **kw}
    return NewMemory(str(uuid.uuid4()), agent, text, visibility=visibility, project_id=project, **fields)


PUBLIC, INFRA, PRIVATE_A, PRIVATE_B = (
    Phase("public", "public"),
    Phase("project", "project", projects=("infra",)),
    Phase("private", "private", owner="a"),
    Phase("private", "private", owner="b"),
)


def test_phases_only_return_what_they_allow(store):
    store.add(memory("a", "A 的私密记忆：Qdrant 管理员密钥放在保险箱"))
    store.add(memory("b", "Qdrant 部署在 6333 端口", "public"))
    store.add(memory("b", "infra 项目的 Qdrant 在 100.115.94.1", "project", "infra"))
    store.add(memory("c", "C's private note about Qdrant"))

    as_b = store.search("Qdrant", [PUBLIC, PRIVATE_B], limit=10)
    assert {r["memory"] for r in as_b} == {"Qdrant 部署在 6333 端口"}
    as_a = store.search("Qdrant", [PUBLIC, INFRA, PRIVATE_A], limit=10)
    assert {r["visibility"] for r in as_a} == {"public", "project", "private"}
    assert all(r["agent_id"] in ("a", "b") for r in as_a)
    owner_of = {r["memory"]: r["agent_id"] for r in as_a}
    assert owner_of["A 的私密记忆：Qdrant 管理员密钥放在保险箱"] == "a"
    scores = [r["score"] for r in as_a]
    assert scores == sorted(scores, reverse=True)  # merged by score
    r = as_a[0]
    assert r["source"] == "conversation" and r["created_at"] == CREATED and r["memory_type"] == "knowledge"


def test_duplicates_across_phases_are_merged_by_content(store):
    store.add(memory("a", "同一句话写了两次", "public"))
    store.add(memory("a", "同一句话写了两次"))
    results = store.search("同一句话", [PUBLIC, PRIVATE_A], limit=10)
    assert [r["memory"] for r in results] == ["同一句话写了两次"]


def test_listing_pages_through_everything_without_a_silent_cap(store):
    for i in range(23):
        store.add(memory("b", f"public note {i}", "public"))
    for i in range(9):
        store.add(memory("a", f"private note {i}"))
    seen, cursor, pages = [], None, 0
    while True:
        page, cursor = store.list([PUBLIC, PRIVATE_A], limit=10, cursor=cursor)
        seen += page
        pages += 1
        if cursor is None:
            break
    assert pages == 4 and len(seen) == 32 and len({r["id"] for r in seen}) == 32
    assert {r["memory"] for r in seen if r["visibility"] == "private"} == {f"private note {i}" for i in range(9)}


def test_expired_memories_are_hidden_but_listed_on_request(store):
    past = time.time() - 86400
    store.add(memory("a", "已经过期的会话", memory_type="session", expiration_date="2020-01-01", expires_at=past))
    store.add(memory("a", "仍然有效的会话", memory_type="session", expiration_date="2099-01-01", expires_at=4e9))
    visible, _ = store.list([PRIVATE_A])
    assert [r["memory"] for r in visible] == ["仍然有效的会话"]
    everything, _ = store.list([PRIVATE_A], include_expired=True)
    assert len(everything) == 2
    assert [r["memory"] for r in store.search("会话", [PRIVATE_A], limit=5)] == ["仍然有效的会话"]


def test_get_delete_and_write_id_lookup(store):
    new = memory("a", "to be forgotten")
    [written] = store.add(new)
    assert store.find_write("a", new.write_id) == [written["id"]]
    assert store.find_write("b", new.write_id) == [], "a write_id is its owner's"
    assert store.find_write("a", "never-written") == []
    got = store.get(written["id"])
    assert got["memory"] == "to be forgotten" and got["write_id"] == new.write_id and got["agent_id"] == "a"
    assert store.get("not-a-uuid") is None
    assert store.get(str(uuid.uuid4())) is None
    store.delete(written["id"])
    assert store.get(written["id"]) is None and store.count() == 0


def test_a_vector_size_mismatch_names_both_sizes(tmp_path, embedder):
    first = ConversationStore(StoreSettings("embedded", tmp_path / "l4"), embedder, 384)
    first.connect()
    first.add(memory("a", "made with the 384-d model"))
    first.close()
    # the seed's 1024-d endpoint, configured against a collection made with the local model
    other = OpenAIEmbedder("http://127.0.0.1:9/v1", "text-embedding-v4", 1024, "UNUSED_KEY_ENV")
    with pytest.raises(StoreConfigError, match=r"holds 384-dimensional vectors .* makes 1024-dimensional"):
        ConversationStore(StoreSettings("embedded", tmp_path / "l4"), other, 1024).connect()


def test_the_embedded_store_is_single_process(tmp_path, embedder):
    first = ConversationStore(StoreSettings("embedded", tmp_path / "l4"), embedder, 384)
    first.connect()
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from layers.conversation.adapters.store import ConversationStore, StoreSettings, StoreConfigError
        try:
            ConversationStore(StoreSettings("embedded", Path({str(tmp_path / "l4")!r})), None, 384).connect()
        except StoreConfigError as exc:
            print("refused:", exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120).stdout
    first.close()
    assert "refused:" in out and "only the daemon may open it" in out


def test_no_outbound_connection_is_attempted(tmp_path):
    """Import, connect, write and search with mem0's telemetry variable unset: no socket leaves the host."""
    script = textwrap.dedent(
        f"""
        import json, os, sys, uuid
        os.environ.pop("MEM0_TELEMETRY", None)
        attempts = []
        def hook(event, args):
            if event == "socket.connect":
                attempts.append(repr(args[1]))
            elif event == "socket.getaddrinfo":
                attempts.append("getaddrinfo " + repr(args[0]))
        sys.addaudithook(hook)
        from pathlib import Path
        from daemon.common.config import DEFAULT_MODEL_PATH
        from layers.conversation.policy.rules import Phase
        from layers.conversation.adapters.store import ConversationStore, NewMemory, StoreSettings
        from layers.local.models.vectors import LocalEmbedder
        e = LocalEmbedder(DEFAULT_MODEL_PATH, min_free_mb=0)
        s = ConversationStore(StoreSettings("embedded", Path({str(tmp_path / "l4")!r})), e, e.dimension())
        s.connect()
        s.add(NewMemory(str(uuid.uuid4()), "a", "离线也能记住", "knowledge", "private", None,
                        "2026-11-30T00:00:00+00:00", None, None))
        found = s.search("记住", [Phase("private", "private", owner="a")], 5)
        s.close()
        print(json.dumps({{"found": len(found), "attempts": attempts}}))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["found"] == 1
    assert result["attempts"] == []


def test_a_batched_write_is_the_memory_mem0_add_makes(store):
    """Replay writes in batches around mem0.add; the payload and history row must not tell them apart."""
    kw = {"memory_type": "session", "expiration_date": "2026-12-30", "expires_at": 1798675200.0}
    single = memory("a", "同一句话 the same sentence", project=None, **kw)
    batched = memory("a", "同一句话 the same sentence", project=None, **kw)
    [by_mem0] = store.add(single)
    [result] = store.add_batch([batched])
    assert result.event == "ADD" and len(result.ids) == 1
    vectors = store._memory.vector_store  # mem0's own view of the stored points, on either engine
    one, other = (vectors.get(vector_id=i) for i in (by_mem0["id"], result.ids[0]))
    assert set(one.payload) == set(other.payload)
    for field in one.payload:
        if field != "write_id":
            assert one.payload[field] == other.payload[field], field
    assert (one.payload["write_id"], other.payload["write_id"]) == (single.write_id, batched.write_id)
    rows = {
        r["memory_id"]: r
        for r in store._memory.db.get_history(by_mem0["id"]) + store._memory.db.get_history(result.ids[0])
    }
    a, b = rows[by_mem0["id"]], rows[result.ids[0]]
    assert {k: v for k, v in a.items() if k not in ("id", "memory_id")} == {
        k: v for k, v in b.items() if k not in ("id", "memory_id")
    }


def test_a_batch_writes_each_write_once_and_refuses_only_the_bad_one(store):
    first = [memory("a", f"第 {i} 条") for i in range(3)]
    assert [r.event for r in store.add_batch(first)] == ["ADD"] * 3
    bad = memory("b", "bad date", expiration_date="30.11.2027")
    new = memory("b", "新的一条")
    results = store.add_batch([first[1], bad, new, first[2]])
    assert [r.event for r in results] == ["EXISTS", "REFUSED", "ADD", "EXISTS"]
    assert "expiration_date" in results[1].reason
    assert store.find_writes([w.write_key for w in first] + [new.write_key, bad.write_key]).keys() == {
        *(w.write_key for w in first),
        new.write_key,
    }
    assert store.count() == 4


@pytest.fixture
def small_fs(tmp_path):
    """A real 128 MB tmpfs, unmounted afterwards (tests run as root).

    An Edge shard claims its 32 MiB WAL segments when it loads, and writes keep room for that.
    """
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(directory) -> object:
    """Write zeros until the filesystem refuses; the file is returned so the space can come back."""
    filler = directory / "filler"
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    return filler


def test_a_batch_that_fails_to_commit_leaves_nothing_half_written(small_fs, embedder):
    """The batch is one transaction in local mode: on a full disk none of it is stored, in memory or on disk."""
    from layers.conversation.adapters.store import StoreUnavailableError

    s = ConversationStore(StoreSettings("embedded", small_fs / "l4"), embedder, embedder.dimension())
    s.connect()
    kept = [memory("a", f"落盘之前的第 {i} 条") for i in range(3)]
    assert [r.event for r in s.add_batch(kept)] == ["ADD"] * 3
    batch = [memory("a", f"磁盘满时的第 {i} 条") for i in range(20)]
    filler = fill(small_fs)
    with pytest.raises(StoreUnavailableError):
        s.add_batch(batch)
    filler.unlink()
    assert s.find_writes([m.write_key for m in batch]) == {}, "the failed batch must not look written"
    assert [r.event for r in s.add_batch(batch)] == ["ADD"] * 20
    s.close()
    s.connect()  # what is on disk
    assert s.count() == 23 and s.find_writes([m.write_key for m in kept + batch]).keys() == {
        m.write_key for m in kept + batch
    }
    s.close()


def test_a_write_id_is_its_owners_and_a_write_from_before_owners_still_dedupes_for_its_owner(store):
    """Batched writes landed on uuid5(write_id) before write ids had an owner; such a point is still a's
    write for a (a retry or replay finds it), and nobody else's: b's equal write_id is a write of its own."""
    from dataclasses import replace

    from layers.conversation.adapters.store import mem0_payload
    from layers.conversation.lifecycle.write_ids import legacy_point_id, point_id_of

    old = replace(memory("a", "written before write ids had an owner"), write_id="conv-1:msg-1")
    mem0, _ = store._require()
    legacy = legacy_point_id(old.write_id)
    mem0.vector_store.insert(
        vectors=[mem0.embedding_model.embed(old.text, "add")], ids=[legacy], payloads=[mem0_payload(old)]
    )
    assert store.find_write("a", "conv-1:msg-1") == [legacy]
    assert store.find_write("b", "conv-1:msg-1") == []
    again = replace(memory("a", "written before write ids had an owner"), write_id="conv-1:msg-1")
    theirs = replace(memory("b", "b's own first message"), write_id="conv-1:msg-1")
    results = store.add_batch([again, theirs], suspects={again.write_key, theirs.write_key})
    assert [(r.event, r.ids) for r in results] == [("EXISTS", (legacy,)), ("ADD", (point_id_of("b", "conv-1:msg-1"),))]
    assert store.get(legacy)["memory"] == "written before write ids had an owner", "a's memory untouched"
    assert store.get(point_id_of("b", "conv-1:msg-1"))["agent_id"] == "b"
    direct = replace(memory("c", "c's write through mem0 (a random id)"), write_id="conv-1:msg-1")
    [added] = store.add(direct)
    assert store.find_write("c", "conv-1:msg-1") == [added["id"]]
    assert store.find_writes([("a", "conv-1:msg-1"), ("b", "conv-1:msg-1"), ("c", "conv-1:msg-1")]) == {
        ("a", "conv-1:msg-1"): [legacy],
        ("b", "conv-1:msg-1"): [point_id_of("b", "conv-1:msg-1")],
        ("c", "conv-1:msg-1"): [added["id"]],
    }
