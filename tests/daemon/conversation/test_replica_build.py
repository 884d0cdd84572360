"""A replica rebuilt from the hub's snapshot is built, optimized and indexed by a child process; the daemon only
opens the finished generation.

At 50,000 memories (bench/bench_replica_50k.py) a build inside the spoke's daemon took its RSS from 80 MB idle
to 321 MB, and the optimize that followed to 463 MB (daemon/conversation/replica_build.py says what held it).
Here a stand-in hub (real HTTP, the routes' shapes) serves 5,500 memories: every page is asked for while a
build child runs, no optimize ever runs in (or under) the daemon's process, and the generation it opens has
every vector in the graph.  A build the hub fails, or a stop, leaves the replica that was there.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

from daemon.conversation.hub_client import HubClient, HubUnreachable
from daemon.conversation.hub_replica import HubReplica, copied_points
from daemon.conversation.replica_store import INDEXED, LAYOUT, PAGE, ReplicaError
from layers.conversation.adapters import edge
from layers.conversation.policy.decay import DEFAULT_DECAY

DIM = 8
# past the full-scan threshold (edge.py's HNSW_FULL_SCAN_KB): COUNT such vectors get a graph when optimized
GRAPHED_DIM = 1024
COUNT = 11 * PAGE  # past the optimizer's 5,000 writes


def children(word: bytes) -> list[int]:
    """This process's children whose command line holds ``word``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and any(word in part for part in command):
            found.append(int(stat.parent.name))
    return found


class StandInHub:
    """``/v1/peer/snapshot`` and ``/v1/peer/feed`` as the hub answers them, over ``count`` public memories, each
    with its caller's own metadata key ``readers`` (which the replica's word on readers must not replace)."""

    def __init__(self, count: int = COUNT, fail_at: int | None = None, status: int = 500, dim: int = DIM) -> None:
        rng = np.random.default_rng(48)
        self.count, self.dim = count, dim
        self.memories = [
            {
                "id": str(uuid.UUID(int=i + 1)),
                "memory": {
                    "payload": {"data": f"note {i}", "agent_id": "main", "visibility": "public", "readers": "ops"},
                    "vector": rng.standard_normal(dim).round(4).tolist(),
                    "readers": ["main"],
                },
            }
            for i in range(count)
        ]
        self.children_while_paging: list[tuple[list[int], list[int]]] = []  # (builders, optimizes) at each page
        self.fail_at, self.status = fail_at, status  # the page from this cursor on is refused with `status`
        self.stalled = threading.Event()  # set: a page at fail_at waits (status 0) until released
        self.release = threading.Event()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                answer = hub.answer(url.path, query)
                code = int(answer.pop("status", 200))
                body = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, path: str, query: dict[str, str]) -> dict:
        common = {"epoch": "e1.x", "seq": 7, "model": {"id": "stand-in", "dim": self.dim}}
        if path == "/v1/peer/feed":
            return {**common, "head": 7, "horizon": 0, "changes": [], "rebuild": False}
        start = int(query.get("cursor") or 0)
        self.children_while_paging.append((children(b"replica_build"), children(b"optimize")))
        if self.fail_at is not None and start >= self.fail_at:
            if not self.status:
                self.stalled.set()
                self.release.wait(60)
            return {"status": self.status or 503, "error": "refused by the stand-in"}
        end = start + int(query.get("limit") or PAGE)
        return {**common, "memories": self.memories[start:end], "cursor": str(end) if end < self.count else None}

    def replica(self, root: Path) -> HubReplica:
        """A spoke's replica at ``root`` following this hub (no embedder: nothing here searches it)."""
        return HubReplica(
            root,
            client=lambda: HubClient(self.url, "k" * 43, timeout_s=30.0),
            embedder=lambda: None,
            decay=DEFAULT_DECAY,
            host=lambda: "spoke-1",
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_rebuild_is_built_and_optimized_by_a_child_and_the_daemon_only_opens_it(tmp_path):
    hub = StandInHub(dim=GRAPHED_DIM)
    replica = hub.replica(tmp_path / "replica")
    try:
        replica.poll()  # no replica yet: the first build, from the snapshot
        status = replica.status()
        assert status["memories"] == COUNT and status["seq"] == 7 and status["rebuilding"] is None
        assert status["last_rebuild"]["memories"] == COUNT
        assert len(hub.children_while_paging) == COUNT // PAGE
        for builders, optimizes in hub.children_while_paging:  # every page asked for by the child, none here
            assert len(builders) == 1 and not optimizes, hub.children_while_paging
        assert not children(b"replica_build") and not children(b"optimize")  # the child ended, none started
        assert replica.store is not None
        info = replica.store._edge().info()
        assert info["points"] == COUNT and info["indexed_vectors"] == COUNT, info  # its graph built already
        assert set(replica.store._edge().indexes()) == set(INDEXED) | {"expires_at"}  # what the reads filter on
        schema = replica.store._edge()._live().info().payload_schema
        assert all(edge._on_disk(index) for index in schema.values())  # on disk, as the child made them
        assert replica.store._edge().writes == 0  # the daemon opened the generation: it made no index itself
        replica.poll()  # nothing to apply: no optimize is due either
        assert not children(b"optimize")
    finally:
        replica.stop(30)
        hub.close()


def built_then_failing(hub: StandInHub, root: Path) -> tuple[HubReplica, dict]:
    """A replica of ``hub``'s 3 memories at ``root`` and its meta file; then a snapshot of 1,500 whose second page
    the hub refuses with ``hub.status`` (set by the caller)."""
    replica = hub.replica(root)
    replica.poll()
    hub.count, hub.memories, hub.fail_at = 3 * PAGE, hub.memories * PAGE, PAGE
    return replica, json.loads((root / "meta.json").read_text())


def assert_kept(root: Path, before: dict) -> None:
    """The replica at ``root`` is the one ``before`` describes: its meta file, and its generation alone."""
    assert json.loads((root / "meta.json").read_text()) == before
    assert sorted(p.name for p in root.iterdir()) == sorted(["meta.json", before["dir"]])


def test_a_failed_build_leaves_the_replica_that_was_there_and_says_why(tmp_path):
    hub = StandInHub(count=3)
    root = tmp_path / "replica"
    replica, before = built_then_failing(hub, root)
    try:
        for status, raised in ((500, ReplicaError), (503, HubUnreachable)):
            hub.status = status
            with pytest.raises(raised, match="refused by the stand-in"):
                replica.rebuild("epoch")
            assert_kept(root, before)
            assert replica.store is not None and replica.memories == 3 and replica.status()["rebuilding"] is None
    finally:
        replica.stop(30)
        hub.close()


def test_a_stop_during_a_build_ends_its_child_and_keeps_the_replica_that_was_there(tmp_path):
    hub = StandInHub(count=3, status=0)
    root = tmp_path / "replica"
    replica, before = built_then_failing(hub, root)
    errors: list[BaseException] = []

    def rebuild() -> None:
        try:
            replica.rebuild("epoch")
        except BaseException as exc:
            errors.append(exc)

    try:
        worker = threading.Thread(target=rebuild)
        worker.start()
        assert hub.stalled.wait(60)  # the child waits for its second page
        builders = children(b"replica_build")
        assert len(builders) == 1
        assert b"k" * 43 not in Path(f"/proc/{builders[0]}/cmdline").read_bytes()  # the key: on its stdin only
        assert b"k" * 43 not in Path(f"/proc/{builders[0]}/environ").read_bytes()
        replica.request_stop()
        worker.join(30)
        assert not worker.is_alive() and errors, errors
        assert not Path(f"/proc/{builders[0]}").exists()  # killed and reaped
        assert_kept(root, before)
    finally:
        hub.release.set()
        replica.stop(30)
        hub.close()


def test_a_replica_of_an_earlier_layout_is_rebuilt_and_keeps_the_callers_readers_key(tmp_path):
    """Before layout 2 the hub's readers were kept under ``readers``, over a caller's own metadata key of that
    name (and before layout 3 the replica had a write-ahead log): such a replica is rebuilt at the first poll,
    the old generation removed once the new one answers, with any a killed build left half made."""
    hub = StandInHub(count=3)
    try:
        first = hub.replica(tmp_path / "replica")
        first.poll()
        first.stop(30)
        meta_path = tmp_path / "replica" / "meta.json"
        meta = json.loads(meta_path.read_text())
        assert meta["layout"] == LAYOUT == 4
        old_dir = meta.pop("dir")
        meta.pop("layout")
        meta_path.write_text(json.dumps({**meta, "dir": old_dir}))  # as an earlier memstrata left it
        (tmp_path / "replica" / "gen-0badbeef" / "edge").mkdir(parents=True)  # as a SIGKILLed build leaves one
        again = hub.replica(tmp_path / "replica")
        assert again.store is None and again.unusable() == "no replica of the hub yet"
        again.poll()
        assert again.last_rebuild is not None and again.last_rebuild["why"] == "an earlier layout"
        new_dir = json.loads(meta_path.read_text())["dir"]
        assert new_dir != old_dir and sorted(p.name for p in (tmp_path / "replica").iterdir()) == sorted(
            ["meta.json", new_dir]
        )
        again.stop(30)
        copied = list(copied_points(tmp_path / "replica", json.loads(meta_path.read_text())))
        assert len(copied) == 3
        for _, payload, readers, _ in copied:
            assert readers == ["main"] and payload["readers"] == "ops", payload
    finally:
        hub.close()
