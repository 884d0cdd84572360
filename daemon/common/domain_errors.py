"""Domain exceptions the front (API mapping, CLI, MCP) names without importing the service.

Each one stands for a condition a caller can act on; daemon/api/responses.py maps
them to status codes in one place (``STATUS_OF``).  Anything else raised while
answering a request is a bug and becomes a 500 with a log line: a ``KeyError`` or
an ``IndexError`` too, which is why "not found" is a class of its own here and not
Python's ``LookupError``.
"""

from __future__ import annotations


class DaemonError(RuntimeError):
    """A condition that prevents the daemon (or an offline command) from starting, with a message for a person."""


class ConversationUnavailableError(RuntimeError):
    """The store cannot answer and the request has no fallback; the message says why."""


class NotStoredError(RuntimeError):
    """A write neither the store nor the queue could keep (a full disk): nothing was kept."""


class SecretRefusedError(ValueError):
    """Content matched a never_store pattern; the message names the kinds, never the text."""


class InvalidRequestError(ValueError):
    """A request whose values cannot be used (HTTP 400); the message says which and why."""


class ConflictError(RuntimeError):
    """The request cannot run in the present state (HTTP 409): a run already under way, an undo over later changes."""


class IndexUnavailableError(RuntimeError):
    """An agent's L3 index cannot answer now (refused, damaged and being rebuilt, a full disk): HTTP 503."""


class StateUnreadableError(RuntimeError):
    """A file of the state directory the daemon needs cannot be read (HTTP 503); the message says how to fix it."""


class NotFoundError(LookupError):
    """What a request names does not exist, or not for this caller (HTTP 404); the message says what.

    A ``LookupError`` for the code that catches one (the CLI's user errors), but only this class is
    mapped to 404: a ``KeyError`` from a bug answered "not found" would make a caller give up on a
    request that was fine.
    """


class UnknownAgentError(NotFoundError):
    """No workspace, or no agent the daemon knows, for the requested agent id."""


class NoSuchMemoryError(NotFoundError):
    """No L4 memory with this id that the caller may read (another's private one is not admitted to exist)."""


class HubAnswerError(RuntimeError):
    """The fleet's hub refused a spoke's L4 request (daemon/conversation/hub.py): its status and its message,
    passed on to the spoke's caller unchanged (``headers``: its Retry-After, if any)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = dict(headers or {})
