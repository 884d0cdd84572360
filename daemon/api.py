"""The local API: HTTP/JSON over the daemon's Unix socket (Starlette served by uvicorn).

The socket is bound here, not by uvicorn, so its mode is 0660 from the first
moment (uvicorn would make it 0666): only root and the socket's group can talk
to the daemon.  A socket left behind by a crashed daemon is replaced; a live
one means another daemon owns it, and start-up stops with a clear message.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from pathlib import Path
from typing import Protocol

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from layers.local.index import Filters
from layers.local.query import EmptyQueryError
from layers.local.vectors import VectorsUnavailableError

log = logging.getLogger(__name__)

SOCKET_MODE = 0o660


class DaemonApi(Protocol):
    def status(self) -> dict: ...

    def search(self, agent_id: str, text: str, **options) -> dict: ...

    def reindex(self, agent_id: str | None, rebuild: bool = False) -> dict: ...

    def call_in_loop(self, fn, timeout: float = ...) -> object: ...


class SocketInUseError(RuntimeError):
    """Another process is serving on the configured socket."""


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def build_app(daemon: DaemonApi) -> Starlette:
    # Plain (sync) endpoints: Starlette runs them in its thread pool, so a slow
    # search or reindex never blocks the event loop.
    def status(_request: Request) -> JSONResponse:
        return JSONResponse(daemon.status())

    def search(request: Request) -> JSONResponse:
        q = request.query_params
        if not q.get("agent") or "q" not in q:
            return _error(400, "agent and q are required")
        try:
            limit = int(q.get("limit", "10"))
            filters = Filters(
                layer=q.get("layer") or None,
                path_glob=q.get("path") or None,
                since=q.get("since") or None,
                until=q.get("until") or None,
            )
            answer = daemon.search(
                q["agent"],
                q["q"],
                mode=q.get("mode", "auto"),
                limit=max(1, min(limit, 200)),
                filters=filters,
                explain=q.get("explain") == "1",
            )
        except LookupError as exc:
            return _error(404, str(exc).strip("'\""))
        except (EmptyQueryError, ValueError) as exc:
            return _error(400, str(exc))
        except VectorsUnavailableError as exc:
            return _error(409, f"vectors unavailable: {exc}")
        except RuntimeError as exc:
            return _error(503, str(exc))
        return JSONResponse(answer)

    async def reindex(request: Request) -> JSONResponse:
        body = await request.json() if await request.body() else {}
        agent = body.get("agent")

        def run() -> dict:
            return daemon.reindex(agent, rebuild=bool(body.get("rebuild")))

        try:
            result = await run_in_threadpool(daemon.call_in_loop, run)
        except KeyError:
            return _error(404, f"unknown agent {agent!r}")
        return JSONResponse(result)

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return _error(404, f"no such endpoint: {request.method} {request.url.path}")

    return Starlette(
        routes=[
            Route("/v1/status", status, methods=["GET"]),
            Route("/v1/search", search, methods=["GET"]),
            Route("/v1/reindex", reindex, methods=["POST"]),
        ],
        exception_handlers={404: not_found},
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

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=3)
        if self._sock is not None:
            self._sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
