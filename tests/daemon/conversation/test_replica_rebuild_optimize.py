"""A replica rebuilt from the hub's snapshot is not optimized while it is built, and is once it is the replica.

At 50,000 memories (bench/bench_replica_50k.py) the generation being built started an Edge optimize at its
5,000th point: the optimize's journal then held every later page (each a 500-point upsert, vectors included)
in the spoke's daemon until the swap, 140 MB above idle at 20,000.  Nothing searches a generation before it is
complete, so its index is built once it is the replica.  Here a stand-in hub (real HTTP, the routes' shapes)
serves 5,500 memories: no optimize process may run while the pages arrive, and one starts once it is complete.
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

from daemon.conversation.hub_client import HubClient
from daemon.conversation.hub_replica import PAGE, HubReplica, copied_points
from layers.conversation.policy.decay import DEFAULT_DECAY
from tests.helpers import wait_for

DIM = 8
COUNT = 11 * PAGE  # past the optimizer's 5,000 writes


def optimize_children() -> list[int]:
    """This process's children that are an Edge optimize (layers/conversation/adapters/edge.py's ``optimize``)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and b"optimize" in command:
            found.append(int(stat.parent.name))
    return found


class StandInHub:
    """``/v1/peer/snapshot`` and ``/v1/peer/feed`` as the hub answers them, over ``count`` public memories, each
    with its caller's own metadata key ``readers`` (which the replica's word on readers must not replace)."""

    def __init__(self, count: int = COUNT) -> None:
        rng = np.random.default_rng(48)
        self.count = count
        self.memories = [
            {
                "id": str(uuid.UUID(int=i + 1)),
                "memory": {
                    "payload": {"data": f"note {i}", "agent_id": "main", "visibility": "public", "readers": "ops"},
                    "vector": rng.standard_normal(DIM).tolist(),
                    "readers": ["main"],
                },
            }
            for i in range(count)
        ]
        self.children_while_paging: list[list[int]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                answer = hub.answer(url.path, query)
                body = json.dumps(answer).encode()
                self.send_response(200)
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
        common = {"epoch": "e1.x", "seq": 7, "model": {"id": "stand-in", "dim": DIM}}
        if path == "/v1/peer/feed":
            return {**common, "head": 7, "horizon": 0, "changes": [], "rebuild": False}
        start = int(query.get("cursor") or 0)
        if start:
            self.children_while_paging.append(optimize_children())  # pages written so far: start / PAGE
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


def test_a_rebuild_starts_no_optimize_until_its_generation_is_the_replica(tmp_path):
    hub = StandInHub()
    replica = hub.replica(tmp_path / "replica")
    try:
        replica.poll()  # no replica yet: the first build, from the snapshot
        assert replica.status()["memories"] == COUNT and replica.status()["seq"] == 7
        assert len(hub.children_while_paging) == COUNT // PAGE - 1
        assert not any(hub.children_while_paging), hub.children_while_paging  # none while it was built
        assert replica.store is not None
        index = replica.store.index_status() or {}
        assert index.get("optimizing_since") is not None, index  # the replica's index, once it is the replica
        assert optimize_children()
        # the next polls (no change from the hub) swap the optimized copy in once it is done
        wait_for(
            lambda: replica.poll() is not None and ((replica.store.index_status() or {}).get("last_optimize") or {}),
            timeout=120,
            interval=0.5,
            what="the replica's optimize swapped in by the polls",
        )
        index = replica.store.index_status() or {}
        assert index["last_optimize"]["result"] == "swapped", index
    finally:
        replica.stop(30)
        hub.close()


def test_a_replica_of_an_earlier_layout_is_rebuilt_and_keeps_the_callers_readers_key(tmp_path):
    """Before layout 2 the hub's readers were kept under ``readers``, over a caller's own metadata key of that
    name: such a replica is rebuilt at the first poll, the old generation removed once the new one answers."""
    hub = StandInHub(count=3)
    try:
        first = hub.replica(tmp_path / "replica")
        first.poll()
        first.stop(30)
        meta_path = tmp_path / "replica" / "meta.json"
        meta = json.loads(meta_path.read_text())
        assert meta["layout"] == 2
        old_dir = meta.pop("dir")
        meta.pop("layout")
        meta_path.write_text(json.dumps({**meta, "dir": old_dir}))  # as an earlier memstrata left it
        again = hub.replica(tmp_path / "replica")
        assert again.store is None and again.unusable() == "no replica of the hub yet"
        again.poll()
        assert again.last_rebuild is not None and again.last_rebuild["why"] == "an earlier layout"
        new_dir = json.loads(meta_path.read_text())["dir"]
        assert new_dir != old_dir and not (tmp_path / "replica" / old_dir).exists()
        again.stop(30)
        copied = list(copied_points(tmp_path / "replica", json.loads(meta_path.read_text())))
        assert len(copied) == 3
        for _, payload, readers, _ in copied:
            assert readers == ["main"] and payload["readers"] == "ops", payload
    finally:
        hub.close()
