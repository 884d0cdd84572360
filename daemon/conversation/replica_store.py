"""How a spoke's replica of the hub is stored: what the live replica (hub_replica.py) and its builder
(replica_build.py, a child process) share, so a generation one builds is the generation the other opens.

An embedded Edge store (the broker's own adapter, layers/conversation/adapters/store.py) per generation,
each memory's payload as the hub sends it plus the hub's readers under ``READERS``.  It is a copy the hub can
always give again, kept small in the daemon (measured at 36,500 memories: bench/bench_replica_50k.py):
- its vectors and graph ``cold``: read from disk as searches reach them, none of them at load (56 MB);
- no write-ahead log: the replica records the feed's seq only after a flush and applies again what came
  after it (a change applied twice is the same state), so a log would hold what the segments hold, and
  a load reads its last two 32 MB segments whole (53 MB);
- payload indexes only on what its reads filter on (``INDEXED``; ~5 MB each at load).
A replica the engine cannot open (a crash tore it) is rebuilt from the hub's snapshot (hub_replica.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.conversation.hub_client import HubClient, HubUnreachable
from layers.conversation.adapters.store import ConversationStore, StoreSettings
from layers.conversation.policy import validity

SNAPSHOT_PATH = "/v1/peer/snapshot"  # daemon/api/peer_feed.py's
PAGE = 500
# The payload field the hub's readers are kept in (one keyword index): a reserved name (metadata.py's
# RESERVED), so a caller's own metadata key, "readers" say, is kept as the hub keeps it.  LAYOUT 2: before it
# the field was "readers" and overwrote that key; a replica of an earlier layout is rebuilt at the first poll.
# LAYOUT 3: no write-ahead log (``settings``), which the engine cannot take from a store it made with one.
# LAYOUT 4: payload indexes on disk (layers/conversation/adapters/edge.py): made again by the build child, not
# by the daemon opening a replica with its indexes in the heap.
READERS = "hub_readers"
LAYOUT = 4
COLLECTION = "replica"


class ReplicaError(Exception):
    """The hub's answer cannot be applied (its model differs from the replica's, an answer of the wrong shape)."""


# What the replica's reads filter on (its readers, the phases' visibility, owner and project, validity; the
# store adds the expiry's): indexed.  A caller's other filters (user_id, memory_type, …) are checked on the
# payload of what these leave, as on any unindexed field; each index not kept is ~5 MB the daemon does not map.
INDEXED = (READERS, "visibility", "agent_id", "project_id", validity.STATE)


def settings(path: Path) -> StoreSettings:
    """The store settings of the generation at ``path``."""
    return StoreSettings(
        backend="embedded", data_dir=path, collection=COLLECTION, cold=True, wal=False, keyword_fields=INDEXED
    )


def new_shard(path: Path, dim: int) -> Any:
    """The Edge shard of a generation at ``path`` being built, alone: the store's own place and settings for
    it, no payload index yet (``open_store`` adds them)."""
    from layers.conversation.adapters.edge import EdgeCollection

    made = settings(path)
    return EdgeCollection(made.edge_dir / COLLECTION, dim, cold=made.cold, wal=made.wal)


def open_store(path: Path, dim: int) -> ConversationStore:
    """The generation at ``path`` (created when absent) with its payload indexes (``INDEXED``)."""
    store = ConversationStore(settings(path), Unset(), dim)
    store.connect()
    return store


def write(shard: Any, final: dict[str, dict[str, Any] | None], projects: dict[str, list[str]]) -> None:
    """``final`` (each id's state as the hub sent it, None: gone) in ``shard``; ``projects`` (which projects
    each reader's project phase asks: a superset is harmless) learns the projects of what is kept."""
    gone = [i for i, m in final.items() if m is None]
    points = []
    for memory_id, memory in final.items():
        if memory is None:
            continue
        payload = dict(memory["payload"])
        readers = [str(r) for r in memory.get("readers") or []]
        payload[READERS] = readers
        points.append((memory_id, memory["vector"], payload))
        project = payload.get("project_id")
        if payload.get("visibility") == "project" and isinstance(project, str):
            for reader in readers:
                if project not in projects.setdefault(reader, []):
                    projects[reader].append(project)
    if gone:
        shard.delete(gone)
    if points:
        shard.upsert(points)


def ask(client: HubClient, path: str, params: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
    """The hub's JSON answer to a GET of ``path``; HubUnreachable for no answer or a 502-504, ReplicaError for
    any other refusal."""
    answer = client.send(None, "GET", path, params, timeout_s=timeout_s)
    if answer.status != 200 or not isinstance(answer.data, dict):
        message = answer.data.get("error") if isinstance(answer.data, dict) else None
        if answer.status in (502, 503, 504):
            raise HubUnreachable(f"the hub answered {answer.status}: {message or 'no message'}")
        raise ReplicaError(f"the hub answered {answer.status}: {message or 'no message'}")
    return answer.data


class Unset:
    """The replica's store before a query needs an embedder (applying the feed embeds nothing)."""

    model_id = "unset"

    def embed_passages(self, texts: list[str]) -> Any:
        raise RuntimeError("the replica embeds no passages: the hub's vectors are stored")

    def embed_query(self, text: str) -> Any:
        raise RuntimeError("no embedder for the replica's queries")
