"""The hub's change feed and snapshot for its spokes' replicas (issue 48): ``/v1/peer/feed``, ``/v1/peer/snapshot``.

The host key alone (no agent header: the replica is the host's, for all its agents).  What a host is
served of a memory is computed here, never on the spoke: its stored payload and vector, and
``readers``, the host's own agents that may read it (rules.py's ``may_read`` with ``H/X``, the rule of
every read); a memory none of them may read is ``null``, which the spoke applies as a delete.  So a
host key reads, through these routes, exactly what its agents could read one by one: public memories,
their projects' and their own private ones, never another host's agent's private memory.

``GET /v1/peer/feed?after=SEQ&limit=N`` → ``{epoch, seq, horizon, changes: [{seq, id, memory}], rebuild}``:
the rows after SEQ up to the settled seq (daemon/conversation/feed.py), each id's current state.  ``seq``
is where the spoke stands once it applied them.  ``rebuild`` (true when SEQ is below the compaction
horizon) says the rows it missed are gone: take a snapshot.  ``epoch`` changes when the whole collection
did (a restore) or what the host's agents may read did (their enrolment, their projects): a spoke whose
epoch differs rebuilds.

``GET /v1/peer/snapshot?cursor=C&limit=N`` → ``{epoch, seq, memories: [{id, memory}], cursor}``: every
memory the host's agents may read, a page at a time; ``seq`` is the feed's settled seq when the first
page was taken (the cursor carries it): the spoke applies the feed from there once the last page is in,
so a change made while it paged is applied again from its current state.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from daemon.api.gate import token_of
from daemon.api.responses import ApiError, JSONResponse, as_response
from daemon.conversation.broker import Broker
from daemon.conversation.store_thread import StoreDown
from daemon.ops.fleet_peers import Peer, PeerTable
from layers.conversation.policy.registry import Registry
from layers.conversation.policy.rules import may_read

FEED_PATH = "/v1/peer/feed"
SNAPSHOT_PATH = "/v1/peer/snapshot"
MAX_PAGE = 1000
DEFAULT_PAGE = 500


def readers_of(registry: Registry, peer: Peer, payload: dict) -> list[str]:
    """The host's agents that may read a memory: the same rule as every read, for ``H/X``."""
    return [agent for agent in peer.agents if may_read(registry, f"{peer.host}/{agent}", payload)]


def epoch_of(feed_epoch: str, registry: Registry, peer: Peer) -> str:
    """The feed's epoch and a fingerprint of what the host's agents may read (enrolment, projects)."""
    reach = [[agent, sorted(registry.projects_of(f"{peer.host}/{agent}"))] for agent in sorted(peer.agents)]
    digest = hashlib.sha256(json.dumps(reach, separators=(",", ":")).encode()).hexdigest()[:12]
    return f"{feed_epoch}.{digest}"


class FeedRoutes:
    """The two routes over the hub's broker (its feed, store thread and registry) and enrolled hosts."""

    def __init__(self, broker: Any, peers: PeerTable) -> None:
        self.broker = broker
        self.peers = peers

    def _peer(self, request: Request) -> Peer:
        peer = self.peers.peer_of(token_of(request))
        if peer is None:
            raise ApiError(401, "a host key enrolled on the hub is required")
        return peer

    def _broker(self) -> Broker:
        broker = self.broker()
        if not isinstance(broker, Broker) or broker.feed is None:
            raise ApiError(503, "this hub keeps no change feed now (its conversation memory is not running)")
        return broker

    @staticmethod
    def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
        raw = request.query_params.get(name)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ApiError(400, f"{name} must be an integer") from None
        if not low <= value <= high:
            raise ApiError(400, f"{name} must be between {low} and {high}")
        return value

    def _memory(self, registry: Registry, peer: Peer, found: tuple[dict, list[float]] | None) -> dict | None:
        if found is None:
            return None
        payload, vector = found
        readers = readers_of(registry, peer, payload)
        return {"payload": payload, "vector": vector, "readers": readers} if readers else None

    def _model(self, broker: Broker) -> dict[str, Any]:
        store = broker.store
        return {"id": str(getattr(store.embedder, "model_id", "") or ""), "dim": store.dim}

    def feed(self, request: Request) -> dict[str, Any]:
        peer = self._peer(request)
        broker = self._broker()
        feed = broker.feed
        assert feed is not None
        after = self._int(request, "after", 0, 0, 2**62)
        limit = self._int(request, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
        feed.fed[peer.host] = (after, time.time())  # this spoke's replica stands at ``after`` (hub's status)
        registry = broker.registry.current()
        epoch, horizon = epoch_of(feed.epoch, registry, peer), feed.horizon
        answer: dict[str, Any] = {"epoch": epoch, "horizon": horizon, "model": self._model(broker)}
        if after < horizon:
            return {**answer, "seq": feed.settled(), "head": feed.settled(), "changes": [], "rebuild": True}
        rows, upto = feed.since(after, limit)
        ids = list(dict.fromkeys(memory_id for _, memory_id in rows))
        points = self._store(broker, "feed", lambda: broker.store.points(ids)) if ids else {}
        changes = [
            {"seq": seq, "id": memory_id, "memory": self._memory(registry, peer, points.get(memory_id))}
            for seq, memory_id in rows
        ]
        seq = rows[-1][0] if len(rows) == limit else upto
        return {**answer, "seq": seq, "head": upto, "changes": changes, "rebuild": False}

    def snapshot(self, request: Request) -> dict[str, Any]:
        peer = self._peer(request)
        broker = self._broker()
        feed = broker.feed
        assert feed is not None
        limit = self._int(request, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
        cursor = request.query_params.get("cursor") or ""
        if cursor:
            seq_text, _, offset = cursor.partition(":")
            try:
                seq = int(seq_text)
            except ValueError:
                raise ApiError(400, "cursor: as the previous page answered it") from None
        else:
            seq, offset = feed.settled(), ""  # the feed from here covers every change made while paging
        registry = broker.registry.current()
        rows, following = self._store(broker, "snapshot", lambda: broker.store.points_page(limit, offset or None))
        memories = []
        for memory_id, payload, vector in rows:
            memory = self._memory(registry, peer, (payload, vector))
            if memory is not None:
                memories.append({"id": memory_id, "memory": memory})
        return {
            "epoch": epoch_of(feed.epoch, registry, peer),
            "seq": seq,
            "model": self._model(broker),
            "memories": memories,
            "scanned": len(rows),
            "cursor": f"{seq}:{following}" if following else None,
        }

    @staticmethod
    def _store(broker: Broker, what: str, fn: Any) -> Any:
        try:
            return broker.thread.call(what, fn, patient=True)
        except StoreDown as exc:
            raise ApiError(503, f"the hub's store cannot answer now: {exc}") from None

    def routes(self, redact: Any) -> list[Route]:
        def endpoint(work: Any) -> Any:
            async def run(request: Request) -> Response:
                try:
                    return JSONResponse(await run_in_threadpool(work, request))
                except Exception as exc:
                    return as_response(exc, request, redact())

            return run

        return [
            Route(FEED_PATH, endpoint(self.feed), methods=["GET"]),
            Route(SNAPSHOT_PATH, endpoint(self.snapshot), methods=["GET"]),
        ]
