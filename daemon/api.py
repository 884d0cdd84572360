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
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

log = logging.getLogger(__name__)

SOCKET_MODE = 0o660


class StatusSource(Protocol):
    def status(self) -> dict: ...


class SocketInUseError(RuntimeError):
    """Another process is serving on the configured socket."""


def build_app(daemon: StatusSource) -> Starlette:
    async def status(_request: Request) -> JSONResponse:
        return JSONResponse(daemon.status())

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": f"no such endpoint: {request.method} {request.url.path}"}, status_code=404)

    return Starlette(routes=[Route("/v1/status", status, methods=["GET"])], exception_handlers={404: not_found})


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

    def __init__(self, path: Path, daemon: StatusSource) -> None:
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
