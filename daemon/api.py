"""The local API: HTTP/JSON over the daemon's Unix socket (Starlette served by uvicorn).

The socket is bound here, not by uvicorn, so its mode is 0660 from the first
moment (uvicorn would make it 0666): only root and the socket's group can talk
to the daemon.  A socket left behind by a crashed daemon is replaced; a live
one means another daemon owns it, and start-up stops with a clear message.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse as _StarletteJSONResponse
from starlette.routing import Route

from daemon.broker import Broker
from daemon.contracts import StatusDocument
from daemon.errors import (
    ConversationUnavailableError,
    IndexUnavailableError,
    InvalidRequestError,
    NotStoredError,
    SecretRefusedError,
    StateUnreadableError,
)
from daemon.limits import MAX_SEARCH_BODY_BYTES, QueryTooLongError, check_query
from daemon.maintenance import DEFAULT_KEEP, CleanupOptions
from daemon.tokens import ADMIN
from layers.conversation.backup import NotABackupError
from layers.conversation.edge import EdgeLockedError
from layers.conversation.policy import ForbiddenError, PolicyError
from layers.conversation.store import StoreRequestError
from layers.daily import RepoBusyError
from layers.ids import InvalidIdError
from layers.local.index import Filters
from layers.local.query import EmptyQueryError
from layers.local.search import MODES as SEARCH_MODES
from layers.local.vectors import VectorsUnavailableError
from layers.names import json_safe
from layers.yamlfile import YamlFileError

log = logging.getLogger(__name__)

SOCKET_MODE = 0o660


class DaemonApi(Protocol):
    broker: Broker | None
    trackers: dict  # agent id → its tracker: the agents the daemon knows

    def status(self) -> StatusDocument: ...

    def identify(self, token: str | None) -> str | None: ...

    def search(self, agent_id: str, text: str, **options) -> dict: ...

    def reindex(self, agent_id: str | None, rebuild: bool = False) -> dict: ...

    def call_in_loop(self, fn, timeout: float = ...) -> object: ...


class SocketInUseError(RuntimeError):
    """Another process is serving on the configured socket."""


class JSONResponse(_StarletteJSONResponse):
    """JSON that a file name which is not UTF-8 cannot break: such strings go out escaped.

    The reports escape names at the source (:mod:`layers.names`); this is the
    net under them, so one bad name never costs every agent its status.
    """

    def render(self, content: object) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return super().render(json_safe(content))


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# The domain exceptions of the layers, the broker and the daemon, as HTTP statuses: the one place
# that says which condition is whose fault (first match wins).  Anything else, a bare ValueError or
# RuntimeError included, is a bug: a 500 with a log line (see _as_response), never "bad request"
# (the caller would change a request that was fine) or "retry" (it would fail again).
_STATUS_OF: tuple[tuple[type[BaseException], int], ...] = (
    (ApiError, 0),
    (NotStoredError, 507),  # a full disk: neither the store nor the queue kept the write
    (SecretRefusedError, 422),
    (QueryTooLongError, 413),
    (ForbiddenError, 403),
    (ConversationUnavailableError, 503),
    (IndexUnavailableError, 503),
    (StateUnreadableError, 503),
    (RepoBusyError, 503),  # another git process holds a workspace's index.lock: a moment later it works
    (EdgeLockedError, 503),  # another process holds the embedded store
    (LookupError, 404),  # unknown agent, no such memory
    (FileNotFoundError, 404),  # no backup at that path
    (EmptyQueryError, 400),
    (PolicyError, 400),
    (InvalidIdError, 400),
    (InvalidRequestError, 400),
    (StoreRequestError, 400),  # the store refused the request itself (mem0's validation)
    (NotABackupError, 400),
    (YamlFileError, 400),
    (VectorsUnavailableError, 409),
)
# Bugs are caught by these too, so that they are answered as a 500 in JSON and logged once.
_BUG_KINDS = (ValueError, RuntimeError)

INTERNAL_ERROR = "internal error in the memstrata daemon (a bug, not your request): its log has the details"


def _as_response(exc: BaseException, request: Request | None = None) -> JSONResponse:
    for kind, status in _STATUS_OF:
        if isinstance(exc, kind):
            if isinstance(exc, ApiError):
                return _error(exc.status, str(exc))
            message = str(exc.args[0]) if isinstance(exc, LookupError) and exc.args else str(exc)
            if isinstance(exc, VectorsUnavailableError):
                message = f"vectors unavailable: {message}"
            return _error(status, message)
    where = f"{request.method} {request.url.path}" if request is not None else "a request"
    log.error("%s failed with %s (answered 500)", where, type(exc).__name__, exc_info=exc)
    return _error(500, f"{INTERNAL_ERROR} ({type(exc).__name__})")


def _token_of(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def authorize(daemon: DaemonApi, request: Request, agent: str | None) -> bool:
    """Check that the caller may act as ``agent``; True when the caller is the administrator.

    A missing or unknown token is 401; a valid token of another agent is 403 and
    goes to the audit log (it is an attempt to read or write as someone else).
    """
    if not agent:
        raise ApiError(400, "agent is required")
    caller = daemon.identify(_token_of(request))
    if caller is None:
        raise ApiError(
            401, "a valid token is required (Authorization: Bearer …, from the workspace's .memstrata/token)"
        )
    if caller == ADMIN:
        if agent not in daemon.trackers:
            raise ApiError(404, f"unknown agent {agent!r}")
        return True
    if caller != agent:
        if daemon.broker is not None:
            daemon.broker.audit.record("impersonation_denied", caller=caller, agent=agent, path=request.url.path)
        raise ApiError(403, f"this token belongs to agent {caller!r}, not {agent!r}")
    return False


# What a caller without the administrator's token sees of the daemon and of L4: health
# and counts, never a path, a workspace, or another agent's files.
_PUBLIC_DAEMON = ("running", "pid", "version", "started", "uptime_s", "summary", "stopped", "starting")
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
)


def scoped_status(snapshot: StatusDocument, caller: str | None) -> StatusDocument:
    """The status a caller may see: everything for the administrator, its own entry for an
    agent, daemon-level health and counts for anyone else (``GET /v1/status`` needs no token).
    """
    agents = snapshot.get("agents") or []
    counts = {
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
        queue = conversation.get("queue")
        if isinstance(queue, dict) and queue.get("set_aside_recent"):  # which writes, and whose: the owner's only
            mine = [w for w in queue["set_aside_recent"] if caller and w.get("agent_id") == caller]
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
    if caller:
        view["agents"] = [a for a in agents if a.get("id") == caller]
    return view


def _conversation(daemon: DaemonApi) -> Broker:
    if daemon.broker is None:
        raise ApiError(503, "conversation memory is disabled (conversation.enabled: false)")
    return daemon.broker


def _int_param(value: str | None, default: int, low: int, high: int, name: str) -> int:
    if value in (None, ""):
        return default
    try:
        return max(low, min(int(value), high))
    except ValueError:
        raise ApiError(400, f"{name} must be a number") from None


def _str_arg(args: Mapping, name: str) -> str | None:
    value = args.get(name)
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ApiError(400, f"{name} must be a string")
    return value


def _flag(value: object, default: bool | None = None) -> bool | None:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    return str(value).lower() in ("1", "true", "yes")


def build_app(daemon: DaemonApi) -> Starlette:
    # Plain (sync) endpoints: Starlette runs them in its thread pool, so a slow
    # search or reindex never blocks the event loop.
    def status(request: Request) -> JSONResponse:
        token = _token_of(request)
        caller = daemon.identify(token)
        view = scoped_status(daemon.status(), caller)
        if token and caller is None:
            view["note"] = "the token presented belongs to no agent: showing daemon-level health only"
        return JSONResponse(view)

    # Errors raised by the layers and the broker become HTTP statuses in one place
    # (the exception handlers below), so the endpoints read as the happy path.
    def handled(fn):
        def endpoint(request: Request) -> JSONResponse:
            return JSONResponse(fn(request))

        return endpoint

    def handled_with_body(fn, max_bytes: int | None = None):
        async def endpoint(request: Request) -> JSONResponse:
            declared = request.headers.get("content-length", "")
            if max_bytes and declared.isdigit() and int(declared) > max_bytes:
                raise ApiError(413, f"the request body is {int(declared):,} bytes; the limit is {max_bytes:,}")
            raw = await request.body()
            if max_bytes and len(raw) > max_bytes:
                raise ApiError(413, f"the request body is {len(raw):,} bytes; the limit is {max_bytes:,}")
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                raise ApiError(400, "the request body is not JSON") from None
            if not isinstance(body, dict):
                raise ApiError(400, "the request body must be a JSON object")
            return JSONResponse(await run_in_threadpool(fn, request, body))

        return endpoint

    def query_of(args: Mapping) -> str:
        text = args.get("q")
        if not isinstance(text, str):
            raise ApiError(400, "q is required")
        check_query(text)
        return text

    # Searches: POST with a JSON body (what every client sends: a query has no room in a URL),
    # GET with query parameters for older clients. Both take the same fields.
    def search(request: Request, args: Mapping) -> dict:
        authorize(daemon, request, args.get("agent"))
        text = query_of(args)
        filters = Filters(
            layer=_str_arg(args, "layer"),
            path_glob=_str_arg(args, "path"),
            since=_str_arg(args, "since"),
            until=_str_arg(args, "until"),
        )
        mode = _str_arg(args, "mode") or "auto"
        if mode not in SEARCH_MODES:
            raise ApiError(400, f"unknown search mode {mode!r} (choose from {', '.join(SEARCH_MODES)})")
        return daemon.search(
            args["agent"],
            text,
            mode=mode,
            limit=_int_param(args.get("limit"), 10, 1, 200, "limit"),
            filters=filters,
            explain=bool(_flag(args.get("explain"), False)),
        )

    def memory_search(request: Request, args: Mapping) -> dict:
        authorize(daemon, request, args.get("agent"))
        text = query_of(args)
        if not text.strip():
            raise ApiError(400, "q is required")
        return _conversation(daemon).search(
            args["agent"],
            text,
            limit=_int_param(args.get("limit"), 10, 1, 100, "limit"),
            fallback=bool(_flag(args.get("fallback"), True)),
        )

    search_get = handled(lambda request: search(request, request.query_params))
    search_post = handled_with_body(search, MAX_SEARCH_BODY_BYTES)
    memory_search_get = handled(lambda request: memory_search(request, request.query_params))
    memory_search_post = handled_with_body(memory_search, MAX_SEARCH_BODY_BYTES)

    @handled_with_body
    def memory_add(request: Request, body: dict) -> dict:
        agent = body.get("agent")
        authorize(daemon, request, agent)
        text = body.get("text")
        if not isinstance(text, str):
            raise ApiError(400, "text is required")
        return _conversation(daemon).add(
            agent,
            text,
            memory_type=body.get("type"),
            visibility=body.get("visibility"),
            project=body.get("project"),
            expires=body.get("expires"),
            infer=_flag(body.get("infer")),
            write_id=body.get("write_id"),
            role=_str_arg(body, "role"),
        )

    def require_admin(request: Request) -> None:
        if daemon.identify(_token_of(request)) != ADMIN:
            raise ApiError(403, "this needs the administrator's token (state_dir/admin.token)")

    @handled_with_body
    def admin_cleanup(request: Request, body: dict) -> dict:
        require_admin(request)
        return _conversation(daemon).cleanup(CleanupOptions.from_dict(body))

    @handled_with_body
    def admin_backup(request: Request, body: dict) -> dict:
        require_admin(request)
        keep = body.get("keep", DEFAULT_KEEP)
        if not isinstance(keep, int) or keep < 1:
            raise ApiError(400, "keep must be a whole number, at least 1")
        return _conversation(daemon).backup(keep)

    @handled_with_body
    def admin_restore(request: Request, body: dict) -> dict:
        require_admin(request)
        if not isinstance(body.get("path"), str):
            raise ApiError(400, "path (of a backup) is required")
        return _conversation(daemon).restore(Path(body["path"]))

    @handled
    def memory_list(request: Request) -> dict:
        q = request.query_params
        authorize(daemon, request, q.get("agent"))
        return _conversation(daemon).get_all(
            q["agent"], limit=_int_param(q.get("limit"), 100, 1, 1000, "limit"), cursor=q.get("cursor") or None
        )

    @handled
    def memory_get(request: Request) -> dict:
        agent = request.query_params.get("agent")
        admin = authorize(daemon, request, agent)
        return _conversation(daemon).get(agent, request.path_params["memory_id"], admin=admin)

    @handled
    def memory_delete(request: Request) -> dict:
        agent = request.query_params.get("agent")
        admin = authorize(daemon, request, agent)
        return _conversation(daemon).delete(agent, request.path_params["memory_id"], admin=admin)

    @handled_with_body
    def memory_update(request: Request, body: dict) -> dict:
        agent = body.get("agent")
        admin = authorize(daemon, request, agent)
        text = body.get("text")
        if not isinstance(text, str):
            raise ApiError(400, "text is required (the memory's new text)")
        unknown = sorted(set(body) - {"agent", "text", "expires"})
        if unknown:
            raise ApiError(400, f"unknown field(s) {', '.join(unknown)}: an update takes text and expires")
        return _conversation(daemon).update(
            agent, request.path_params["memory_id"], text, expires=_str_arg(body, "expires"), admin=admin
        )

    @handled
    def memory_history(request: Request) -> dict:
        agent = request.query_params.get("agent")
        admin = authorize(daemon, request, agent)
        return _conversation(daemon).history(agent, request.path_params["memory_id"], admin=admin)

    @handled
    def memory_delete_all(request: Request) -> dict:
        q = request.query_params
        authorize(daemon, request, q.get("agent"))  # the administrator too deletes only the named agent's
        unknown = sorted(set(q) - {"agent", "type", "visibility", "project", "dry_run"})
        if unknown:
            raise ApiError(400, f"unknown parameter(s) {', '.join(unknown)}: filter by type, visibility, project")
        return _conversation(daemon).delete_all(
            q["agent"],
            memory_type=q.get("type") or None,
            visibility=q.get("visibility") or None,
            project=q.get("project") or None,
            dry_run=bool(_flag(q.get("dry_run"), False)),
        )

    @handled_with_body
    def reindex(request: Request, body: dict) -> dict:
        agent = body.get("agent")
        if agent is None and daemon.identify(_token_of(request)) != ADMIN:
            raise ApiError(403, "reindexing every agent needs the administrator's token")
        if agent is not None:
            authorize(daemon, request, agent)
        try:
            return daemon.call_in_loop(lambda: daemon.reindex(agent, rebuild=bool(body.get("rebuild"))))
        except KeyError:
            raise LookupError(f"unknown agent {agent!r}") from None

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return _error(404, f"no such endpoint: {request.method} {request.url.path}")

    async def mapped(request: Request, exc: Exception) -> JSONResponse:
        return _as_response(exc, request)

    return Starlette(
        routes=[
            Route("/v1/status", status, methods=["GET"]),
            Route("/v1/search", search_post, methods=["POST"]),
            Route("/v1/search", search_get, methods=["GET"]),
            Route("/v1/reindex", reindex, methods=["POST"]),
            Route("/v1/admin/cleanup", admin_cleanup, methods=["POST"]),
            Route("/v1/admin/backup", admin_backup, methods=["POST"]),
            Route("/v1/admin/restore", admin_restore, methods=["POST"]),
            Route("/v1/memories", memory_add, methods=["POST"]),
            Route("/v1/memories", memory_list, methods=["GET"]),
            Route("/v1/memories/search", memory_search_post, methods=["POST"]),
            Route("/v1/memories/search", memory_search_get, methods=["GET"]),
            Route("/v1/memories/{memory_id}", memory_get, methods=["GET"]),
            Route("/v1/memories", memory_delete_all, methods=["DELETE"]),
            Route("/v1/memories/{memory_id}", memory_delete, methods=["DELETE"]),
            Route("/v1/memories/{memory_id}", memory_update, methods=["PUT"]),
            Route("/v1/memories/{memory_id}/history", memory_history, methods=["GET"]),
        ],
        exception_handlers={404: not_found, **{kind: mapped for kind in (*(k for k, _ in _STATUS_OF), *_BUG_KINDS)}},
    )


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
    sock.listen(64)
    return sock


class ApiServer:
    """uvicorn in a background thread, on a socket bound by us."""

    def __init__(self, path: Path, daemon: DaemonApi) -> None:
        self.path = path
        self.app = build_app(daemon)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    def start(self) -> None:
        self._sock = bind_unix_socket(self.path)
        config = uvicorn.Config(
            self.app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=2
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name="api", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 3.0) -> None:
        """Stop serving; a request still running after ``timeout`` is left to its daemon thread."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        if self._sock is not None:
            self._sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
