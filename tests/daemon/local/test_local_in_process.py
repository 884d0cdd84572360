"""The local room's in-process tests: the indexer, its search, the embedding worker, the index files.

Each part is built directly, as the daemon composes it, on a root ``memstrata
init`` made: real markdown files, real apsw index files in the state directory,
the stand-in HTTP embedder (tests/stand_in_embedder.py) where vectors are wanted.
The daemon's own wiring of these parts is tested in tests/daemon/local/test_indexer.py
and test_local_search.py through the composed service.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator

import apsw
import numpy as np
import pytest

from daemon.common.config import load_config
from daemon.common.domain_errors import IndexUnavailableError
from daemon.common.fileread import read_version
from daemon.common.guard import SecretGuard
from daemon.common.jobs import Jobs
from daemon.common.settings import guard_from
from daemon.common.workspaces import Agent, get_agent
from daemon.files.tracker import list_memory_files
from daemon.local.embedding import EmbedWorker, make_embedder
from daemon.local.index_files import IndexClaims, move_legacy_index
from daemon.local.indexer import Indexer, desired_documents, is_indexable, layer_of
from daemon.local.search import LocalSearch
from layers.local.storage.index import Identity, LocalIndex
from layers.local.text.units import index_model_id, passages
from protocol.operations import Search
from tests.helpers import FAKE_API_KEY, wait_for
from tests.stand_in_embedder import KEY, KEY_ENV, StandInEmbedder

MAX_BYTES = 5 * 1024 * 1024


def desired_of(agent: Agent) -> dict[str, str]:
    """What the tracker would record for ``agent``: each indexable file's checksum, as on disk now."""
    out = {}
    for rel in list_memory_files(agent.workspace):
        inspection = read_version(agent.workspace, rel, MAX_BYTES)
        if inspection.usable and is_indexable(rel):
            out[rel] = inspection.sha256
    return out


class Local:
    """An indexer and a search over one root's main agent, wired as the daemon wires them."""

    def __init__(self, config, identity: Identity | None = None, embedder=None) -> None:
        identity = identity or Identity()
        self.config = config
        self.agent = get_agent(config, "main")
        self.jobs = Jobs()
        self.guard: SecretGuard = guard_from(config)
        self.indexer = Indexer(
            identity,
            config.paths.workspace,
            desired=desired_of,
            guard=lambda: self.guard,
            claims=IndexClaims(config.paths.state_dir),
        )
        self.search = LocalSearch(
            lambda agent_id: self.agent if agent_id == "main" else None,
            self.indexer,
            identity,
            embedder,
            lambda: None,
            self.jobs,
        )

    def found(self, text: str, **options) -> list[str]:
        return [r["path"] for r in self.search.search(Search("main", text, **options))["results"]]

    def write(self, rel: str, text: str):
        """Write ``rel`` and hand its version to the indexer, as the tracker does after the debounce."""
        (self.agent.workspace / rel).write_text(text)
        inspection = read_version(self.agent.workspace, rel, MAX_BYTES)
        self.indexer.file_changed(self.agent, rel, inspection)
        return inspection


@pytest.fixture
def local(service_root) -> Iterator[Local]:
    parts = Local(load_config(service_root))
    yield parts
    parts.indexer.close()


def test_the_indexer_indexes_every_file_and_the_search_finds_it(local):
    (local.agent.workspace / "MEMORY.md").write_text("# MEMORY\nthe soursop tree is by the north wall\n")
    desired = desired_of(local.agent)
    assert local.indexer.open(local.agent, desired) == len(desired), "every file indexed on the first open"
    assert local.found("soursop") == ["MEMORY.md"]
    report = local.indexer.report("main")
    assert report["state"] == "ready" and report["files"] == len(desired) and report["queued_updates"] == 0
    assert local.indexer.open(local.agent, desired) == 0, "nothing to do the second time"


def test_an_edit_is_written_at_the_flush_and_a_removal_too(local):
    local.indexer.open(local.agent, desired_of(local.agent))
    local.write("memory/2026-11-30.md", "# 2026-11-30\nordered feijoa seedlings\n")
    assert local.indexer.queued() == 1 and local.found("feijoa") == [], "queued, not yet written"
    assert local.indexer.flush() == 1
    assert local.found("feijoa") == ["memory/2026-11-30.md"]
    on_the_day = {"layer": "daily", "since": "2026-11-30", "until": "2026-11-30"}
    assert local.found("feijoa", **on_the_day) == ["memory/2026-11-30.md"], "indexed as that day's note"
    assert local.found("feijoa", layer="core") == []
    (local.agent.workspace / "memory" / "2026-11-30.md").unlink()
    local.indexer.file_removed(local.agent, "memory/2026-11-30.md")
    local.indexer.flush()
    assert local.found("feijoa") == []


def test_a_file_withheld_for_a_secret_is_scrubbed_from_the_index(local):
    local.indexer.open(local.agent, desired_of(local.agent))
    local.write("TOOLS.md", "# TOOLS\nthe jackfruit script\n")
    local.indexer.flush()
    assert local.found("jackfruit") == ["TOOLS.md"]
    (local.agent.workspace / "TOOLS.md").write_text(f"# TOOLS\nthe jackfruit script uses {FAKE_API_KEY}\n")
    local.indexer.file_withheld(local.agent, "TOOLS.md")
    local.indexer.flush()
    assert local.found("jackfruit") == []
    with apsw.Connection(str(local.agent.index)) as db:
        assert db.execute("SELECT count(*) FROM chunks WHERE text LIKE '%jackfruit%'").fetchone()[0] == 0


def test_text_that_changed_into_a_secret_since_the_tracker_looked_is_not_stored(local):
    rel = "memory/2026-12-01.md"
    (local.agent.workspace / "memory" / "2026-12-01.md").write_text("# 2026-12-01\nclean words\n")
    recorded = desired_of(local.agent)  # the tracker's checksums: of the clean version
    (local.agent.workspace / rel).write_text(f"# 2026-12-01\nclean words and {FAKE_API_KEY}\n")
    local.indexer.open(local.agent, recorded)
    assert local.found("clean") == [], "scanned again right before it was stored"
    (local.agent.workspace / rel).write_text("# 2026-12-01\nclean words again\n")
    local.indexer.sync(local.agent, desired_of(local.agent))  # the tracker has seen the new version
    assert local.found("clean") == [rel]


def test_an_index_built_with_another_identity_is_rebuilt_and_says_why(service_root):
    config = load_config(service_root)
    first = Local(config)
    (first.agent.workspace / "MEMORY.md").write_text("# MEMORY\nthe pawpaw patch\n")
    first.indexer.open(first.agent, desired_of(first.agent))
    first.indexer.close()
    other = Local(config, Identity(embed_model="another-model"))
    try:
        other.indexer.open(other.agent, desired_of(other.agent))
        report = other.indexer.report("main")
        assert report["last_rebuild"] is not None and "another-model" in report["last_rebuild"]["reason"]
        assert report["identity"].endswith("embeddings another-model")
    finally:
        other.indexer.close()


def test_a_missing_index_is_handed_to_the_owning_thread_to_rebuild(local):
    with pytest.raises(LookupError, match="unknown agent 'nobody'"):
        local.search.search(Search("nobody", "x"))
    (local.agent.workspace / "MEMORY.md").write_text("# MEMORY\nthe mangosteen crate\n")
    with pytest.raises(IndexUnavailableError, match="being rebuilt"):
        local.search.search(Search("main", "mangosteen"))  # no index yet: the search never writes one itself
    assert not local.agent.index.exists()
    assert local.jobs.run_pending(), "the repair was handed in"
    assert local.found("mangosteen") == ["MEMORY.md"]


def test_a_foreign_file_at_the_index_path_is_refused_by_the_search_too(local):
    local.agent.index.parent.mkdir(parents=True, exist_ok=True)
    with apsw.Connection(str(local.agent.index)) as db:
        db.execute("CREATE TABLE qmd(x)")
    local.indexer.open(local.agent, desired_of(local.agent))
    assert local.indexer.report("main")["state"] == "refused"
    with pytest.raises(IndexUnavailableError, match="refused"):
        local.search.search(Search("main", "x"))


# ---------------------------------------------------------------- the embedding worker


@pytest.fixture
def embedding(service_root, monkeypatch) -> Iterator[tuple[Local, object, Identity]]:
    """A root's indexer and search wired to the labelled stand-in OpenAI endpoint (a remote embedder is
    what cannot run here; the worker's order and book-keeping are what these tests exercise)."""
    embedder_server = StandInEmbedder()
    monkeypatch.setenv(KEY_ENV, KEY)
    try:
        embedder_server.configure(service_root)
        config = load_config(service_root)
        embedder = make_embedder(config)
        identity = Identity(embed_model=index_model_id(embedder.model_id))
        yield Local(config, identity, embedder), embedder, identity
    finally:
        embedder_server.close()


def test_the_embedding_worker_fills_in_every_vector(embedding):
    local, embedder, identity = embedding
    (local.agent.workspace / "MEMORY.md").write_text("# MEMORY\nthe lychee orchard\n\n- ripe in June\n")
    local.indexer.open(local.agent, desired_of(local.agent))
    pending = local.indexer.report("main")["pending_embeddings"]
    assert pending > 0, "the chunks wait for their vectors"
    worker = EmbedWorker(embedder, identity, lambda: [("main", local.agent.index)], batch_size=4)
    worker.start()
    try:
        wait_for(lambda: local.indexer.report("main")["pending_embeddings"] == 0, timeout=60, what="vectors")
        # a chunk with items is embedded twice: whole, then its items once every chunk is whole
        assert worker.status()["embedded"] >= pending and worker.status()["backend"] == "openai"
    finally:
        assert worker.stop(10)
    assert local.indexer.report("main")["vectors"] >= pending
    answer = local.search.search(Search("main", "lychee orchard", mode="hybrid"))
    assert answer["vectors"] == "used" and [r["path"] for r in answer["results"]][:1] == ["MEMORY.md"]
    local.indexer.close()


def test_every_chunk_gets_its_whole_vector_before_any_chunk_its_items(embedding):
    """A first index is searchable over all of it after the whole-chunk pass (~2x faster than with items);
    the items' vectors follow, below each chunk's whole vector, and then nothing waits."""
    local, embedder, identity = embedding
    memory = local.agent.workspace / "memory"
    memory.mkdir(exist_ok=True)
    for day in range(1, 7):
        (memory / f"2026-09-0{day}.md").write_text(
            f"# 2026-09-0{day}\n\n## hosts\n- moth{day} is the training box\n- otter{day} keeps the backups\n"
        )
    local.indexer.open(local.agent, desired_of(local.agent))
    chunks = local.indexer.report("main")["chunks"]
    worker = EmbedWorker(embedder, identity, lambda: [("main", local.agent.index)], batch_size=500)
    assert worker._one_pass()
    report = local.indexer.report("main")
    assert report["vectors"] == chunks, "after one pass every chunk has its whole vector"
    assert report["pending_items"] >= 6 and report["pending_embeddings"] == report["pending_items"]
    with LocalIndex(local.agent.index, identity, verify=False) as index:
        waiting = dict(index.take_pending(500, items=True))
        wholes = {h: index.stored_vector(h) for h in waiting}
    assert all(v.shape[0] == 1 for v in wholes.values()), "whole chunks only, so far"
    assert local.search.search(Search("main", "training box", mode="hybrid"))["vectors"] == "used"
    assert worker._one_pass()
    report = local.indexer.report("main")
    assert report["pending_embeddings"] == 0 and report["pending_items"] == 0
    with LocalIndex(local.agent.index, identity, verify=False) as index:
        for h, whole in wholes.items():
            rows = index.stored_vector(h)
            assert rows.shape[0] == len(passages(waiting[h])) > 1, "the whole vector, then each item's"
            assert np.array_equal(rows[0], whole[0])
    assert not worker._one_pass(), "nothing left to embed"
    local.indexer.close()


# ---------------------------------------------------------------- which index files are ours


def test_the_claims_on_index_files_outlive_the_daemon_and_name_one_inode(tmp_path):
    index = tmp_path / "main.sqlite"
    index.write_bytes(b"")
    IndexClaims(tmp_path / "state").claim(index)
    assert IndexClaims(tmp_path / "state").owns(index), "read back by the next start"
    (tmp_path / "planted").write_bytes(b"another file")
    os.replace(tmp_path / "planted", index)  # the old one still exists until here: another inode
    assert not IndexClaims(tmp_path / "state").owns(index), "a file put in its place is not ours"


def test_only_an_index_of_ours_moves_from_the_old_default_path(tmp_path):
    ours, foreign = tmp_path / "old-ours.sqlite", tmp_path / "old-qmd.sqlite"
    LocalIndex(ours, Identity()).close()
    with apsw.Connection(str(foreign)) as db:
        db.execute("CREATE TABLE qmd(x)")
    foreign_bytes = foreign.read_bytes()
    claims = IndexClaims(tmp_path / "state")
    assert move_legacy_index(ours, tmp_path / "new" / "main.sqlite", claims) is True
    assert not ours.exists() and claims.owns(tmp_path / "new" / "main.sqlite")
    assert move_legacy_index(foreign, tmp_path / "new" / "other.sqlite", claims) is False
    assert foreign.read_bytes() == foreign_bytes and not (tmp_path / "new" / "other.sqlite").exists()


def test_which_files_an_index_holds():
    assert is_indexable("MEMORY.md") and is_indexable("memory/2026-11-30.md") and is_indexable("shared/TEAM.md")
    assert not is_indexable("memory/data.json") and not is_indexable("notes.md")
    assert layer_of("SOUL.md") == ("core", None) and layer_of("shared/TEAM.md") == ("core", None)
    assert layer_of("memory/2026-11-30.md") == ("daily", "2026-11-30") and layer_of("MEMORY.md") == ("daily", None)
    # a note that names its day in its file name or title is that day's (issue 50 item 3)
    assert layer_of("memory/2026-09-08-migration.md") == ("daily", "2026-09-08")
    assert layer_of("memory/incidents/redis_20260911.md") == ("daily", "2026-09-11")
    assert layer_of("memory/retro.md", "# 迁移复盘 2026年9月8日\n- moth is up\n") == ("daily", "2026-09-08")
    assert layer_of("memory/retro.md", "# Retro\n- moved on 2026-09-08\n") == ("daily", None), "a date in the text"
    assert layer_of("MEMORY.md", "# 2026-09-08 decisions\n") == ("daily", None), "MEMORY.md is curated, not a day"
    own = {"MEMORY.md": "a", "memory/x.json": "b", "shared/OLD.md": "c", "USER.md": "d"}
    shared = {"shared/TEAM.md": "e", "shared/data.bin": "f"}
    assert desired_documents(own, shared, not_indexed={"USER.md"}) == {"MEMORY.md": "a", "shared/TEAM.md": "e"}


# ---------------------------------------------------------------- the index keeps only what the files hold


class HeldEmbedder:
    """The stand-in embedder, held inside its call until the test lets it go: an encode that takes a
    while (the real model takes seconds for a batch on a busy host), so that a file can change meanwhile."""

    def __init__(self, embedder) -> None:
        self.embedder = embedder
        self.inside = threading.Event()
        self.go = threading.Event()

    def __getattr__(self, name: str):
        return getattr(self.embedder, name)

    def embed_passages(self, texts: list[str]):
        if not self.go.is_set():
            self.inside.set()
            assert self.go.wait(120), "the test never let the embedder go"
        return self.embedder.embed_passages(texts)


def _memory_note(topic: str) -> str:
    """A MEMORY.md of one chunk with items (each over MIN_ITEM_CHARS): its items are embedded second."""
    return (
        f"# MEMORY\nnotes on the {topic}\n\n"
        f"- the {topic} was moved to the north shed last week\n"
        f"- the {topic} needs a new filter before the rains come\n"
    )


def _index_rows(index_path) -> dict[str, int]:
    """What the index file holds: live chunk texts against stored vectors, codes and embedding jobs."""
    with apsw.Connection(str(index_path), flags=apsw.SQLITE_OPEN_READONLY) as db:
        one = lambda sql: db.execute(sql).fetchone()[0]  # noqa: E731
        return {
            "live": one("SELECT count(DISTINCT hash) FROM chunks"),
            "vectors": one("SELECT count(*) FROM vectors"),
            "codes": one("SELECT count(*) FROM codes"),
            "orphan_vectors": one("SELECT count(*) FROM vectors WHERE hash NOT IN (SELECT hash FROM chunks)"),
            "jobs": one("SELECT count(*) FROM pending") + one("SELECT count(*) FROM pending_items"),
            "orphan_jobs": one("SELECT count(*) FROM pending WHERE hash NOT IN (SELECT hash FROM chunks)")
            + one("SELECT count(*) FROM pending_items WHERE hash NOT IN (SELECT hash FROM chunks)"),
        }


def test_a_file_edited_while_its_chunk_is_embedded_leaves_no_job_behind(embedding):
    """Before: the worker stored the vector of a chunk replaced while it was being embedded, and queued
    that chunk's items: a job no chunk would ever take, counted as "waiting for vectors" forever (also
    after a restart), and a vector no chunk has."""
    local, embedder, identity = embedding
    (local.agent.workspace / "MEMORY.md").write_text(_memory_note("water pump"))
    local.indexer.open(local.agent, desired_of(local.agent))
    held = HeldEmbedder(embedder)
    worker = EmbedWorker(held, identity, lambda: [("main", local.agent.index)], batch_size=16)
    worker.start()
    try:
        assert held.inside.wait(60), "the worker takes MEMORY.md's chunk"
        local.write("MEMORY.md", _memory_note("rain tank"))  # saved while that chunk is being embedded
        assert local.indexer.flush() == 1
        held.go.set()
        wait_for(lambda: local.indexer.report("main")["pending_embeddings"] == 0, timeout=60, what="no work left")
        wait_for(lambda: not worker._one_pass(), timeout=60, what="the worker idle")
    finally:
        held.go.set()
        assert worker.stop(10)
    rows = _index_rows(local.agent.index)
    assert rows["orphan_jobs"] == rows["jobs"] == 0 and rows["orphan_vectors"] == 0, rows
    assert rows["vectors"] == rows["codes"] == rows["live"], rows
    local.indexer.close()
    again = Local(local.config, identity, embedder)  # a restart
    try:
        again.indexer.open(again.agent, desired_of(again.agent))
        assert again.indexer.report("main")["pending_embeddings"] == 0
        answer = again.search.search(Search("main", "rain tank", mode="hybrid"))
        assert answer["vectors"] == "used" and [r["path"] for r in answer["results"]][:1] == ["MEMORY.md"]
    finally:
        again.indexer.close()


def test_after_many_edits_the_index_holds_the_vectors_of_its_live_chunks_only(embedding):
    """Before: a replaced chunk's vector (and code) stayed, so the index grew on disk with every edit."""
    local, embedder, identity = embedding
    local.indexer.open(local.agent, desired_of(local.agent))
    worker = EmbedWorker(embedder, identity, lambda: [("main", local.agent.index)], batch_size=16)
    for edit in range(12):
        local.write("MEMORY.md", _memory_note(f"pump number {edit}"))
        local.write("memory/2026-12-01.md", f"# 2026-12-01\n\nchecked the valve {edit % 3} times\n")
        local.indexer.flush()
        while worker._one_pass():
            pass
    rows = _index_rows(local.agent.index)
    assert rows["jobs"] == 0 and local.indexer.report("main")["pending_embeddings"] == 0, rows
    assert rows["vectors"] == rows["codes"] == rows["live"] and rows["orphan_vectors"] == 0, rows
    local.indexer.close()


def test_a_start_removes_the_stale_jobs_and_orphan_vectors_an_older_version_left(embedding, caplog):
    local, embedder, identity = embedding
    (local.agent.workspace / "MEMORY.md").write_text(_memory_note("water pump"))
    local.indexer.open(local.agent, desired_of(local.agent))
    worker = EmbedWorker(embedder, identity, lambda: [("main", local.agent.index)], batch_size=16)
    while worker._one_pass():
        pass
    local.indexer.close()
    with apsw.Connection(str(local.agent.index)) as db:  # what the older version left behind
        vec = np.ones((1, 4), dtype=np.float32).tobytes()
        for n in range(5):
            gone = f"{n:064x}"
            db.execute("INSERT INTO vectors VALUES(?, ?, 4, ?)", (gone, identity.embed_model, vec))
            db.execute("INSERT INTO codes VALUES(?, ?, ?)", (gone, identity.embed_model, b"\x01" * 4))
            db.execute("INSERT INTO pending_items VALUES(?, 0)", (gone,))
        db.execute("INSERT INTO pending VALUES(?, 0)", ("f" * 64,))
        db.execute("DELETE FROM meta WHERE key = 'held_only'")  # an index an earlier version wrote
    assert _index_rows(local.agent.index)["orphan_jobs"] == 6
    again = Local(local.config, identity, embedder)
    try:
        with caplog.at_level(logging.INFO, logger="daemon.local.indexer"):
            again.indexer.open(again.agent, desired_of(again.agent))
        assert again.indexer.report("main")["pending_embeddings"] == 0
        rows = _index_rows(local.agent.index)
        assert rows["orphan_jobs"] == rows["orphan_vectors"] == 0 and rows["vectors"] == rows["live"], rows
        said = [r.getMessage() for r in caplog.records if "no chunk" in r.getMessage()]
        assert len(said) == 1 and "6 embedding job(s)" in said[0] and "5 vector(s)" in said[0], said
        caplog.clear()
        again.indexer.close()
        again.indexer.open(again.agent, desired_of(again.agent))
        assert not [r for r in caplog.records if "no chunk" in r.getMessage()], "one pass: nothing the next time"
    finally:
        again.indexer.close()
