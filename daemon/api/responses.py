"""How the API answers: JSON always, and every exception as the status that says whose fault it is.

An error message may quote what the caller sent (an unknown agent's name, a
project it is not in); every message is cut short and passed through the
never_store patterns before it goes out (daemon/common/echo.py), so a hostile value is
never repeated in full and a key sent in the wrong field is not sent back.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import JSONResponse as _StarletteJSONResponse

from daemon.common.daemon_limits import QueryTooLongError, TooManyItemsError
from daemon.common.domain_errors import (
    ConflictError,
    ConversationUnavailableError,
    HubAnswerError,
    IndexUnavailableError,
    InvalidRequestError,
    NotFoundError,
    NotStoredError,
    SecretRefusedError,
    StateUnreadableError,
)
from daemon.common.echo import Redact, cut
from layers.common.ids import InvalidIdError
from layers.common.names import json_safe
from layers.common.yamlfile import YamlFileError
from layers.conversation.adapters.edge import EdgeLockedError
from layers.conversation.adapters.store import StoreRequestError
from layers.conversation.lifecycle.backup import BackupNotFoundError, NotABackupError
from layers.conversation.policy.rules import ForbiddenError, PolicyError
from layers.daily.workspace_repo import RepoBusyError
from layers.local.models.vectors import VectorsUnavailableError
from layers.local.text.query import EmptyQueryError

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 1000  # an error message, whatever it quotes

INTERNAL_ERROR = "internal error in the memstrata daemon (a bug, not your request): its log has the details"


class JSONResponse(_StarletteJSONResponse):
    """JSON that a file name which is not UTF-8 cannot break: such strings go out escaped.

    The reports escape names at the source (:mod:`layers.common.names`); this is the
    net under them, so one bad name never costs every agent its status.
    """

    def render(self, content: object) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return super().render(json_safe(content))


class ApiError(Exception):
    """A refusal decided by the API itself; ``close``: the body was not read, so the connection ends."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.headers = dict(headers or {})
        if close:
            self.headers["Connection"] = "close"


# The domain exceptions of the layers, the broker and the daemon, as HTTP statuses: the one place
# that says which condition is whose fault (first match wins).  Anything else, a bare ValueError or
# RuntimeError included, is a bug: a 500 with a log line (see as_response), never "bad request"
# (the caller would change a request that was fine) or "retry" (it would fail again).  So is a bare
# KeyError, IndexError or FileNotFoundError: "not found" is NotFoundError and BackupNotFoundError.
STATUS_OF: tuple[tuple[type[BaseException], int], ...] = (
    (NotStoredError, 507),  # a full disk: neither the store nor the queue kept the write
    (SecretRefusedError, 422),
    (QueryTooLongError, 413),
    (TooManyItemsError, 413),  # a list in a request over its cap (messages of a mem0 add, a filter's parts)
    (ForbiddenError, 403),
    (ConflictError, 409),  # a consolidation under way; an undo that would overwrite later changes
    (ConversationUnavailableError, 503),
    (IndexUnavailableError, 503),
    (StateUnreadableError, 503),
    (RepoBusyError, 503),  # another git process holds a workspace's index.lock: a moment later it works
    (EdgeLockedError, 503),  # another process holds the embedded store
    (NotFoundError, 404),  # unknown agent, no such memory
    (BackupNotFoundError, 404),  # no backup at that path
    (EmptyQueryError, 400),
    (PolicyError, 400),
    (InvalidIdError, 400),
    (InvalidRequestError, 400),
    (StoreRequestError, 400),  # the store refused the request itself (mem0's validation)
    (NotABackupError, 400),
    (YamlFileError, 400),
    (VectorsUnavailableError, 409),
)


def error(status: int, message: str, redact: Redact, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": cut(message, redact, MAX_MESSAGE_CHARS)}, status_code=status, headers=headers)


def as_response(exc: BaseException, request: Request | None, redact: Redact) -> JSONResponse:
    """The answer for ``exc``: its status with its message, or a 500 for a bug (logged, message kept back)."""
    if isinstance(exc, (ApiError, HubAnswerError)):  # the hub's refusal: its status and message, as it said them
        return error(exc.status, str(exc), redact, exc.headers)
    for kind, status in STATUS_OF:
        if isinstance(exc, kind):
            message = str(exc)
            if isinstance(exc, VectorsUnavailableError):
                message = f"vectors unavailable: {message}"
            return error(status, message, redact)
    where = f"{request.method} {request.url.path}" if request is not None else "a request"
    log.error("%s failed with %s (answered 500)", where, type(exc).__name__, exc_info=exc)
    return error(500, f"{INTERNAL_ERROR} ({type(exc).__name__})", redact)
