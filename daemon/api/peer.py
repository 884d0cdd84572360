"""The hub's peer API (issue 48): the spokes' agents' L4 requests, on ``fleet.listen`` (docs/fleet-l4.md).

A spoke's daemon (``conversation.backend: hub``: daemon/conversation/hub.py) sends each L4 request of
its agents here, with two headers: ``Authorization: Bearer <host key>`` (``memstrata fleet add-host``
wrote it; the hub keeps its SHA-256 only: daemon/ops/fleet_peers.py) and ``X-Memstrata-Agent: X``,
the local agent asking.  The key names the host H (an unknown key: 401); X must be one of H's
enrolled agents (else 403, in the audit log).  The caller is then ``H/X`` and never the
administrator: the request's own ``agent`` (body or query) must be X or absent, and is rewritten to
``H/X`` before the route's work runs, so ownership, visibility, projects (``H/X`` as a member in the
registry) and write ids per owner apply to ``H/X`` exactly as to the hub's own agents.

The routes are the socket API's L4 memory routes, built from the same table (daemon/api/app.py's
``l4_work``): search, add, list, delete-all, get, delete, update, history, restore.  Nothing else:
no ``/v1/search`` (L3 is the spoke's own), no reindex, no administrator's route, no status beyond
``GET /v1/peer/health`` (the key alone: is the hub there, and for whom).  A search here never falls
back to the hub's L3 (the hub has no index of ``H/X``'s files): with the store down it answers 503,
and the spoke answers from its own L3.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from daemon.api.app import L4_HOW, DaemonApi, l4_work
from daemon.api.gate import Caller, Gate, sends_body, token_of
from daemon.api.metrics import Metrics
from daemon.api.peer_feed import FeedRoutes
from daemon.api.requests import SCHEMAS
from daemon.api.requests import Request as Schema
from daemon.api.responses import ApiError, JSONResponse, as_response
from daemon.common.echo import cut
from daemon.ops.fleet_peers import PeerTable

AGENT_HEADER = "X-Memstrata-Agent"
HEALTH_PATH = "/v1/peer/health"


class PeerGate(Gate):
    """The gate of the peer API: a host key and one of its agents, instead of a token."""

    def __init__(self, peers: PeerTable, audit: Callable[..., None], daemon: DaemonApi) -> None:
        super().__init__(lambda _token: None, lambda: daemon.guard.redact, daemon.courtesy)
        self.peers = peers
        self.audit = audit  # the hub's audit log: (event, **fields)

    def who(self, request: Request) -> Caller:
        close = sends_body(request)
        peer = self.peers.peer_of(token_of(request))
        if peer is None:
            raise ApiError(
                401,
                "a host key enrolled on the hub is required (Authorization: Bearer <the key `memstrata fleet add-host` "
                "wrote>)",
                close=close,
            )
        values = request.headers.getlist(AGENT_HEADER)
        agent = values[0] if len(values) == 1 else ""
        if agent not in peer.agents:
            self.audit("peer_agent_denied", host=peer.host, agent=cut(agent, limit=80), path=request.url.path)
            raise ApiError(
                403,
                f"host {peer.host!r} may not act as agent {cut(agent, limit=80)!r} ({AGENT_HEADER}: one of its "
                f"enrolled agents: {', '.join(peer.agents)})",
                close=close,
            )
        return Caller(f"{peer.host}/{agent}", True)

    def fields(self, request: Request, caller: Caller, fields: Mapping[str, object]) -> Mapping[str, object]:
        """The request's ``agent`` is the header's agent or absent; it is given as that agent (the schema's
        pattern checks it), and :meth:`arguments` makes it ``H/X``."""
        assert caller.id is not None
        agent = caller.id.split("/", 1)[1]
        given = fields.get("agent")
        if given is not None and given != agent:
            self.audit("impersonation_denied", caller=caller.id, agent=cut(str(given), limit=80), path=request.url.path)
            raise ApiError(
                403,
                f"this request acts as {caller.id!r} ({AGENT_HEADER}): its agent is {agent!r} or left out, "
                f"not {cut(str(given), limit=80)!r}",
            )
        return {**fields, "agent": agent}

    def arguments(self, caller: Caller, args: Schema) -> Schema:
        update: dict[str, Any] = {"agent": caller.id}
        if "fallback" in type(args).model_fields:
            update["fallback"] = False  # the hub has no L3 of H/X: a store down is 503, the spoke falls back
        return args.model_copy(update=update)


def build_peer_app(daemon: DaemonApi, peers: PeerTable, metrics: Metrics | None = None) -> Starlette:
    """The peer API's routes; ``daemon``: the hub's (its broker, guard and fair lanes)."""

    def audit(event: str, **fields: object) -> None:
        if daemon.broker is not None:
            daemon.broker.audit.record(event, **fields)

    gate = PeerGate(peers, audit, daemon)
    work = l4_work(daemon, metrics or Metrics())
    routes = [
        Route(path, gate.route(fn, schema=SCHEMAS[method, path], **L4_HOW.get((method, path), {})), methods=[method])
        for (method, path), fn in work.items()
    ]

    async def health(request: Request) -> Response:
        peer = peers.peer_of(token_of(request))
        if peer is None:
            return as_response(
                ApiError(401, "a host key enrolled on the hub is required"), request, daemon.guard.redact
            )
        writes = getattr(daemon.broker, "writes", None)
        infer = bool(getattr(writes, "llm_configured", False))  # whether an add infers by default, here
        return JSONResponse({"status": "ok", "host": peer.host, "agents": list(peer.agents), "infer_default": infer})

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(
            {"error": f"no such endpoint of the hub's peer API: {request.method} {request.url.path}"[:1000]}, 404
        )

    async def not_allowed(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": f"{request.method} is not a method of {request.url.path}"[:1000]}, 405)

    replicas = FeedRoutes(lambda: daemon.broker, peers).routes(lambda: daemon.guard.redact)  # the spokes' replicas
    app = Starlette(
        routes=[*routes, *replicas, Route(HEALTH_PATH, health, methods=["GET"])],
        exception_handlers={404: not_found, 405: not_allowed},
    )
    app.router.redirect_slashes = False
    return app
