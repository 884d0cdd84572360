"""The local API: HTTP/JSON over the daemon's Unix socket (Starlette served by uvicorn).

The socket is bound here, not by uvicorn, so its mode is 0660 from the first
moment (uvicorn would make it 0666): only root and the socket's group can talk
to the daemon.  A socket left behind by a crashed daemon is replaced; a live
one means another daemon owns it, and start-up stops with a clear message.

Each route is its work alone: who may call it, its body limit, its schema and
its lane are declared in :func:`build_app` and applied by daemon/api/gate.py;
errors become statuses in daemon/api/responses.py.  uvicorn serves with the
connection limits of daemon/common/daemon_limits.py and the header and idle deadlines of
daemon/api/http_deadlines.py.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from daemon.api.fairness import Courtesy
from daemon.api.gate import Caller, Gate
from daemon.api.hosts import HostCheck
from daemon.api.http_deadlines import DeadlineH11Protocol
from daemon.api.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from daemon.api.metrics import Metrics, readiness
from daemon.api.requests import SCHEMAS
from daemon.api.requests import Request as Args
from daemon.api.responses import INTERNAL_ERROR, ApiError, JSONResponse  # noqa: F401 - importable from here
from daemon.common.contracts import SearchAnswer, StatusCounts, StatusDocument
from daemon.common.daemon_limits import (
    KEEP_ALIVE_S,
    MAX_CONNECTIONS,
    MAX_HEADER_BYTES,
    MAX_MEMORY_BODY_BYTES,
    MAX_SEARCH_BODY_BYTES,
    MAX_SMALL_BODY_BYTES,
    check_query,
)
from daemon.common.guard import SecretGuard
from daemon.common.tokens import ADMIN
from daemon.conversation.broker import Broker
from daemon.conversation.hub import HubBroker
from daemon.ops.consolidation import ConsolidateOptions
from daemon.ops.fleet_view import NotTheHub
from daemon.ops.maintenance import DEFAULT_KEEP
from protocol import operations as op

SOCKET_MODE = 0o660
FLEET_WAIT_S = 20.0  # GET /v1/admin/fleet waits this long for a fresh reading of the fleet's repositories
T = TypeVar("T")


class DaemonApi(Protocol):
    broker: Broker | HubBroker | None  # HubBroker: a spoke whose L4 is the hub's (conversation.backend: hub)

    @property
    def trackers(self) -> Mapping[str, object]: ...  # agent id → its tracker: the agents the daemon knows

    courtesy: Courtesy  # where a flooding caller's requests make way (daemon/api/fairness.py)

    @property
    def guard(self) -> SecretGuard: ...  # the never_store patterns in force (errors are redacted with them)

    def status(self) -> StatusDocument: ...

    def identify(self, token: str | None) -> str | None: ...

    def search(self, o: op.Search) -> SearchAnswer: ...

    def reindex(self, agent_id: str | None, rebuild: bool = False) -> dict: ...

    def call_in_loop(self, fn: Callable[[], T], timeout: float = ...) -> T: ...

    def fleet(self, wait_s: float) -> dict[str, Any] | None: ...  # on the hub (daemon/ops/fleet_view.py); NotTheHub


class SocketInUseError(RuntimeError):
    """Another process is serving on the configured socket."""


def authorize(daemon: DaemonApi, caller: Caller, agent: str, path: str) -> bool:
    """Check that ``caller`` may act as ``agent``; True when the caller is the administrator.

    The administrator may act as any agent the daemon knows, and then acts *as* it: what it reads
    and changes is what ``agent`` may read and change, never more (``memstrata get ID --agent beta``
    as root answers "no memory" for alpha's private one, as beta's own token does).  Being the
    administrator only marks what it writes as the operator's (trust high, source operator) and
    keeps its looking from counting as the agent's use; the audit log names it (``admin as beta``).
    There is no route that reads or changes another agent's memory by id for the administrator:
    to act on alpha's memory, it acts as alpha.

    A valid token of another agent is 403 and goes to the audit log (it is an
    attempt to read or write as someone else); a missing one never gets here.
    """
    if caller.admin:
        if agent not in daemon.trackers:
            raise ApiError(404, f"unknown agent {agent!r}")
        return True
    if caller.id != agent:
        if daemon.broker is not None:
            daemon.broker.audit.record("impersonation_denied", caller=caller.id, agent=agent, path=path)
        raise ApiError(403, f"this token belongs to agent {caller.id!r}, not {agent!r}")
    return False


# What a caller without the administrator's token sees of the daemon and of L4: health
# and counts, never a path, a workspace, or another agent's files.
_PUBLIC_DAEMON = ("running", "pid", "version", "started", "uptime_s", "summary", "stopped", "starting")
_PUBLIC_SYNC = ("host", "reachable", "failing_since", "last_contact", "retry_in_s")  # no URL, no error text
_PUBLIC_STORAGE = ("place", "since", "failures", "retry_in_s")  # no agent, path or error text
_PUBLIC_CONVERSATION = (
    "enabled",
    "backend",
    "collection",
    "reachable",
    "rtt_ms",
    "breaker",
    "last_error",
    "error",
    "queue",
    "infer_default",
    "hub",
)


def scoped_status(snapshot: StatusDocument, caller: str | None) -> StatusDocument:
    """The status a caller may see: everything for the administrator, its own entry for an
    agent, daemon-level health and counts for anyone else (``GET /v1/status`` needs no token).
    """
    agents = snapshot.get("agents") or []
    counts: StatusCounts = {
        "agents": len(agents),
        "files": sum(a.get("files", 0) for a in agents),
        "held_back": sum(len(a.get("held_back") or ()) for a in agents),
        "pending_commits": sum(1 for a in agents if a.get("pending_commit")),
        "agents_with_errors": sum(1 for a in agents if a.get("last_error") or (a.get("index") or {}).get("error")),
    }
    if caller == ADMIN:
        return {**snapshot, "access": ADMIN, "counts": counts}
    view: dict = {
        "access": f"agent {caller}" if caller else "none",
        "daemon": {k: v for k, v in (snapshot.get("daemon") or {}).items() if k in _PUBLIC_DAEMON},
        "counts": counts,
    }
    for key in ("reconcile", "limits", "vectors"):
        if key in snapshot:
            view[key] = snapshot[key]
    if "watcher" in snapshot:
        view["watcher"] = {k: v for k, v in snapshot["watcher"].items() if k != "roots"}
    conversation = snapshot.get("conversation")
    if conversation is not None:
        view["conversation"] = (
            dict(conversation) if caller else {k: v for k, v in conversation.items() if k in _PUBLIC_CONVERSATION}
        )
        if conversation.get("backend") == "hub":  # where the hub is: the administrator's (docs/fleet-l4.md)
            view["conversation"].pop("url", None)
        queue = conversation.get("queue")
        if isinstance(queue, dict) and queue.get("set_aside_recent"):  # which writes, and whose: the owner's only
            mine = [w for w in queue["set_aside_recent"] or [] if caller and w.get("agent_id") == caller]
            view["conversation"]["queue"] = {**queue, "set_aside_recent": mine}
    storage = snapshot.get("storage")
    if storage is not None:  # health for anyone; where and why only for the agent it concerns
        view["storage"] = {
            "ok": storage.get("ok", True),
            "problems": [
                p if caller and p.get("agent") == caller else {k: p.get(k) for k in _PUBLIC_STORAGE}
                for p in storage.get("problems", [])
            ],
        }
    sync = snapshot.get("sync")
    if sync is not None:  # whether this host keeps up with the remote for anyone; its agents' for their own
        view["sync"] = {k: v for k, v in sync.items() if k in _PUBLIC_SYNC}
        if caller:
            view["sync"]["agents"] = [a for a in sync.get("agents") or [] if a.get("id") == caller]
    if caller:
        view["agents"] = [a for a in agents if a.get("id") == caller]
    return cast(StatusDocument, view)  # assembled key by key, each part cut to what the caller may see


def _conversation(daemon: DaemonApi) -> Broker | HubBroker:
    if daemon.broker is None:
        raise ApiError(503, "conversation memory is disabled (conversation.enabled: false)")
    return daemon.broker


def health_routes(daemon: DaemonApi, gate: Gate, metrics: Metrics, caller_of: Callable[[Caller], str | None]) -> list:
    """``/healthz`` (the API answers), ``/readyz`` (started and the store open) and ``/metrics``,
    each seeing the status as ``caller_of(caller)`` may (the loopback port: the administrator's view)."""

    def healthz(request: Request, caller: Caller, _args: None) -> dict:
        return {"status": "ok"}

    def readyz(request: Request, caller: Caller, _args: None) -> Response:
        ready, reasons = readiness(daemon.status())
        return JSONResponse({"ready": ready, "reasons": reasons}, 200 if ready else 503)

    def metrics_text(request: Request, caller: Caller, _args: None) -> Response:
        view = scoped_status(daemon.status(), caller_of(caller))
        fleet = None
        if caller_of(caller) == ADMIN:  # host and agent names of the whole fleet: the administrator's
            with contextlib.suppress(NotTheHub):
                fleet = daemon.fleet(0)  # the last reading as it is: a scrape never waits on git
        return Response(metrics.exposition(view, fleet), media_type=METRICS_CONTENT_TYPE)

    anyone: dict[str, Any] = {"who": "anyone", "lane": "status"}
    return [
        ("/healthz", "GET", gate.route(healthz, **anyone)),
        ("/readyz", "GET", gate.route(readyz, **anyone)),
        ("/metrics", "GET", gate.route(metrics_text, **anyone)),
    ]


# The L4 memory routes, (method, path) → how each is served beyond the defaults (agent, no body, the work lane):
# the socket API's, and the hub's peer API's (daemon/api/peer.py) from this same table.
L4_HOW: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/v1/memories/search"): {"body_limit": MAX_SEARCH_BODY_BYTES},
    ("POST", "/v1/memories"): {"body_limit": MAX_MEMORY_BODY_BYTES},
    ("PUT", "/v1/memories/{memory_id}"): {"body_limit": MAX_MEMORY_BODY_BYTES},
    ("POST", "/v1/memories/{memory_id}/restore"): {"body_limit": MAX_SMALL_BODY_BYTES},
}


def l4_work(daemon: DaemonApi, metrics: Metrics) -> dict[tuple[str, str], Callable[[Request, Caller, Any], object]]:
    """The work of each L4 memory route (search, add, list, delete-all, get, delete, update, history, restore):
    each checks that its caller may act as the request's agent, then asks the broker as that agent."""

    def memory_search(request: Request, caller: Caller, args: Args) -> dict:
        authorize(daemon, caller, args.get("agent"), request.url.path)
        check_query(args.get("query"))  # over the limit: 413
        o = args.to(op.MemorySearch)
        if not o.query.strip():
            raise ApiError(400, "q is required")
        return _conversation(daemon).search(o)

    def memory_add(request: Request, caller: Caller, args: Args) -> dict:
        admin = authorize(daemon, caller, args.get("agent"), request.url.path)
        return _conversation(daemon).add(args.to(op.Add), admin=admin)

    def memory_list(request: Request, caller: Caller, args: Args) -> dict:
        o = args.to(op.List)
        authorize(daemon, caller, o.agent, request.url.path)
        return _conversation(daemon).get_all(o)

    def memory_get(request: Request, caller: Caller, args: Args) -> dict:
        o = args.to(op.Get, memory_id=request.path_params["memory_id"])
        admin = authorize(daemon, caller, o.agent, request.url.path)
        return _conversation(daemon).get(o.agent, o.memory_id, admin=admin)

    def memory_delete(request: Request, caller: Caller, args: Args) -> dict:
        o = args.to(op.Delete, memory_id=request.path_params["memory_id"])
        authorize(daemon, caller, o.agent, request.url.path)  # as o.agent: its own memories only
        return _conversation(daemon).delete(o.agent, o.memory_id)

    def memory_update(request: Request, caller: Caller, args: Args) -> dict:
        o = args.to(op.Update, memory_id=request.path_params["memory_id"])
        authorize(daemon, caller, o.agent, request.url.path)
        return _conversation(daemon).update(o)

    def memory_restore(request: Request, caller: Caller, args: Args) -> dict:
        o = args.to(op.RestoreMemory, memory_id=request.path_params["memory_id"])
        authorize(daemon, caller, o.agent, request.url.path)
        return _conversation(daemon).restore_memory(o)

    def memory_history(request: Request, caller: Caller, args: Args) -> dict:
        o = args.to(op.History, memory_id=request.path_params["memory_id"])
        authorize(daemon, caller, o.agent, request.url.path)
        return _conversation(daemon).history(o.agent, o.memory_id)

    def memory_delete_all(request: Request, caller: Caller, args: Args) -> dict:
        o = args.to(op.DeleteAll)
        authorize(daemon, caller, o.agent, request.url.path)  # the administrator too deletes only the named agent's
        return _conversation(daemon).delete_all(o)

    memory_search, memory_add = metrics.timed("memory_search", memory_search), metrics.timed("memory_add", memory_add)
    return {
        ("POST", "/v1/memories/search"): memory_search,
        ("GET", "/v1/memories/search"): memory_search,
        ("POST", "/v1/memories"): memory_add,
        ("GET", "/v1/memories"): memory_list,
        ("DELETE", "/v1/memories"): memory_delete_all,
        ("GET", "/v1/memories/{memory_id}"): memory_get,
        ("DELETE", "/v1/memories/{memory_id}"): memory_delete,
        ("PUT", "/v1/memories/{memory_id}"): memory_update,
        ("GET", "/v1/memories/{memory_id}/history"): memory_history,
        ("POST", "/v1/memories/{memory_id}/restore"): memory_restore,
    }


def build_app(daemon: DaemonApi, metrics: Metrics | None = None) -> Starlette:
    gate = Gate(daemon.identify, lambda: daemon.guard.redact, daemon.courtesy)
    metrics = metrics or Metrics()

    def status(request: Request, caller: Caller, _args: None) -> StatusDocument:
        view = scoped_status(daemon.status(), caller.id)
        if caller.token_given and caller.id is None:
            view["note"] = "the token presented belongs to no agent: showing daemon-level health only"
        return view

    # Searches: POST with a JSON body (what every client sends: a query has no room in a URL),
    # GET with query parameters for older clients. Both take the same fields.
    def search(request: Request, caller: Caller, args: Args) -> SearchAnswer:
        authorize(daemon, caller, args.get("agent"), request.url.path)
        check_query(args.get("query"))  # over the limit: 413 (at this edge: mem0's REST search has no limit)
        return daemon.search(args.to(op.Search))

    def admin_cleanup(request: Request, caller: Caller, args: Args) -> dict:
        return _conversation(daemon).cleanup(args.to(op.Cleanup))

    def admin_consolidate(request: Request, caller: Caller, args: Args) -> dict:
        return _conversation(daemon).consolidate(ConsolidateOptions.of(args.to(op.Consolidate)))

    def admin_backup(request: Request, caller: Caller, args: Args) -> dict:
        keep = args.to(op.Backup).keep
        return _conversation(daemon).backup(DEFAULT_KEEP if keep is None else keep)

    def admin_restore(request: Request, caller: Caller, args: Args) -> dict:
        return _conversation(daemon).restore(Path(args.to(op.Restore).path))

    def admin_fleet(request: Request, caller: Caller, _args: None) -> dict:
        try:
            document = daemon.fleet(FLEET_WAIT_S)
        except NotTheHub as exc:
            raise ApiError(409, str(exc)) from None
        if document is None:
            raise ApiError(503, "the fleet's repositories are still being read: try again in a moment")
        return document

    def reindex(request: Request, caller: Caller, args: Args) -> dict:
        o = args.to(op.Reindex)
        if o.agent is None and not caller.admin:
            raise ApiError(403, "reindexing every agent needs the administrator's token")
        if o.agent is not None:
            authorize(daemon, caller, o.agent, request.url.path)
        return daemon.call_in_loop(lambda: daemon.reindex(o.agent, rebuild=bool(o.rebuild)))

    search = metrics.timed("search", search)
    work = {
        ("POST", "/v1/search"): search,
        ("GET", "/v1/search"): search,
        **l4_work(daemon, metrics),
        ("POST", "/v1/reindex"): reindex,
        ("POST", "/v1/admin/cleanup"): admin_cleanup,
        ("POST", "/v1/admin/consolidate"): admin_consolidate,
        ("POST", "/v1/admin/backup"): admin_backup,
        ("POST", "/v1/admin/restore"): admin_restore,
    }
    admin: dict[str, Any] = {"who": "admin", "lane": "maintenance", "body_limit": MAX_SMALL_BODY_BYTES}
    how: dict[
        tuple[str, str], dict[str, Any]
    ] = {  # who may call, the body limit, the lane (default: agent, none, work)
        ("POST", "/v1/search"): {"body_limit": MAX_SEARCH_BODY_BYTES},
        **L4_HOW,
        ("POST", "/v1/reindex"): {"body_limit": MAX_SMALL_BODY_BYTES, "lane": "maintenance"},
        ("POST", "/v1/admin/cleanup"): admin,
        ("POST", "/v1/admin/consolidate"): admin,
        ("POST", "/v1/admin/backup"): admin,
        ("POST", "/v1/admin/restore"): admin,
    }
    routes = [
        ("/v1/status", "GET", gate.route(status, who="anyone", lane="status")),
        (op.Fleet.PATH, op.Fleet.METHOD, gate.route(admin_fleet, who="admin", lane="status")),
        *(
            (path, method, gate.route(fn, schema=SCHEMAS[method, path], **how.get((method, path), {})))
            for (method, path), fn in work.items()
        ),
        *health_routes(daemon, gate, metrics, lambda caller: caller.id),
    ]

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": f"no such endpoint: {request.method} {request.url.path}"[:1000]}, 404)

    async def not_allowed(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": f"{request.method} is not a method of {request.url.path}"[:1000]}, 405)

    app = Starlette(
        routes=[Route(path, endpoint, methods=[method]) for path, method, endpoint in routes],
        exception_handlers={404: not_found, 405: not_allowed},
    )
    # No route ends in "/": a memory id of "/" (sent as %2F) made "/v1/memories//", which Starlette answered
    # with an empty 307 to "/v1/memories", and a client that follows it with DELETE asks for the collection.
    app.router.redirect_slashes = False
    return app


def bind_unix_socket(path: Path) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
    if path.exists() or path.is_symlink():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # stale: nobody is listening
        else:
            raise SocketInUseError(f"{path} is in use: is another memstrata daemon running?")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o117)  # the socket is created 0660, never briefly wider
    try:
        sock.bind(str(path))
    finally:
        os.umask(old_umask)
    os.chmod(path, SOCKET_MODE)
    sock.listen(256)  # a burst of clients waits in the backlog rather than being refused
    return sock


def metrics_app(daemon: DaemonApi, metrics: Metrics) -> Starlette:
    """The loopback port's app: ``/healthz``, ``/readyz`` and ``/metrics`` only, no token asked.
    Its ``/metrics`` is the administrator's view (per-agent series: ids and counts, never a path
    or a memory's text): the operator who sets ``metrics.port`` chooses who on the host may read it."""
    gate = Gate(lambda _token: None, lambda: daemon.guard.redact, daemon.courtesy)
    routes = health_routes(daemon, gate, metrics, lambda _caller: ADMIN)
    return Starlette(routes=[Route(path, endpoint, methods=[method]) for path, method, endpoint in routes])


def bind_loopback(host: str, port: int, setting: str = "metrics.port", backlog: int = 64) -> socket.socket:
    """A listening TCP socket on a loopback address (the configuration admits no other); an error
    names the ``setting`` that asked for it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SocketInUseError(f"{setting}: cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    sock.listen(backlog)
    return sock


def _server_config(app: Starlette | HostCheck) -> uvicorn.Config:
    """uvicorn for a socket or port of ours: deadlines and limits, no log of its own."""
    return uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=2,
        http=DeadlineH11Protocol,  # h11 with header and idle deadlines
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        timeout_keep_alive=KEEP_ALIVE_S,
        limit_concurrency=MAX_CONNECTIONS,
    )


class ApiServer:
    """uvicorn in a background thread, on a socket bound by us."""

    def __init__(self, path: Path, daemon: DaemonApi, metrics_port: tuple[str, int] | None = None) -> None:
        self.path = path
        self.metrics = Metrics()  # one registry: the socket's and the port's /metrics show the same histograms
        self.app: Starlette | HostCheck = build_app(daemon, self.metrics)
        self.metrics_port = metrics_port
        # a loopback port answers only requests that name it (daemon/api/hosts.py: DNS rebinding)
        self._port_app = HostCheck(metrics_app(daemon, self.metrics)) if metrics_port else None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self._port_server: uvicorn.Server | None = None
        self._port_thread: threading.Thread | None = None
        self._port_sock: socket.socket | None = None

    def _bind(self) -> socket.socket:
        return bind_unix_socket(self.path)

    def start(self) -> None:
        if self.metrics_port and self._port_app is not None:
            self._port_sock = bind_loopback(*self.metrics_port)
            self._port_server = uvicorn.Server(_server_config(self._port_app))
            self._port_thread = threading.Thread(
                target=self._port_server.run, kwargs={"sockets": [self._port_sock]}, name="metrics", daemon=True
            )
            self._port_thread.start()
        self._sock = self._bind()
        self._server = uvicorn.Server(_server_config(self.app))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name="api", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 3.0) -> None:
        """Stop serving; a request still running after ``timeout`` is left to its daemon thread."""
        for server in (self._server, self._port_server):
            if server is not None:
                server.should_exit = True
        for thread in (self._thread, self._port_thread):
            if thread is not None:
                thread.join(timeout=timeout)
        for sock in (self._sock, self._port_sock):
            if sock is not None:
                sock.close()
        self._unbind()

    def _unbind(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class TcpApiServer(ApiServer):
    """The same server on a TCP port (mem0's REST API: daemon/api/mem0_rest.py), bound to a loopback address;
    the hub's peer API (daemon/api/peer.py) on the address of ``fleet.listen``."""

    def __init__(self, host: str, port: int, app: Starlette, setting: str = "conversation.mem0_api") -> None:
        self.host, self.port, self.setting = host, port, setting
        self.app = HostCheck(app, (host,))  # requests that name another host are refused (daemon/api/hosts.py)
        self.metrics_port, self._port_app = None, None  # the metrics port is the Unix socket server's
        self._server = self._port_server = None
        self._thread = self._port_thread = None
        self._sock = self._port_sock = None

    def _bind(self) -> socket.socket:
        sock = bind_loopback(self.host, self.port, self.setting, backlog=256)
        self.port = sock.getsockname()[1]  # port 0: the one the system chose
        return sock

    def _unbind(self) -> None:
        """Nothing on the file system to remove."""
