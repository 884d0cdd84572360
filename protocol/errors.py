"""The errors every client raises: one hierarchy, so each front end keeps one ``except`` per kind.

:class:`MemstrataError` is the base the skill's command catches (one line, exit 1);
:class:`DaemonUnavailableError` is also a :class:`ConnectionError` (nothing answered: the daemon's front
says so with exit 3 and reads the files itself where it can); :class:`DaemonRequestError` carries the
daemon's HTTP ``status`` and its ``message``.
"""

from __future__ import annotations


class MemstrataError(Exception):
    """Anything a caller should see as one clear line (the skill's command prints it and exits 1)."""


class SetupError(MemstrataError):
    """No token, or no way to tell which agent is asking: nothing was sent."""


class TokenError(SetupError, ValueError):
    """A token no memstrata token looks like (not printable ASCII): refused before a header quotes it."""


class UsageError(MemstrataError):
    """The request cannot be valid as given (a query over the limit): nothing was sent; the skill exits 2."""


class DaemonUnavailableError(MemstrataError, ConnectionError):
    """No daemon answers on the socket (not running, no permission, gone mid-request or silent)."""


class DaemonRequestError(MemstrataError, RuntimeError):
    """The daemon answered with an error; ``status`` is the HTTP status, ``message`` the daemon's words."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
