"""The loopback TCP ports answer only requests that name them: the ``Host`` header is checked first.

A loopback port is reachable from a browser on the host, and through DNS rebinding from any web
page it opens: ``evil.example`` resolves to the attacker's server, then to 127.0.0.1, and the
page's scripts read the answers as same-origin.  The metrics port answered such a request (``Host:
evil.example``) with every agent id and its counts; the mem0 REST port has its token, but checked
no Host either.  A browser always sends the name it resolved as ``Host``, so a port that answers
only its own names is out of a rebinding page's reach.

Accepted: the address the port is bound to, ``localhost``, ``127.0.0.1`` and ``[::1]``, each with
or without the port's own number (a port in ``Host`` must be this one).  Anything else, and a
request without a Host, is 421 (Misdirected Request) with a JSON error naming what is accepted,
before the request reaches the gate (no token is looked at, no body read; the connection closes).

The Unix socket is not checked: a browser cannot open it, its clients send any name
(``memstrata``, ``localhost``), and its mode (0660) decides who may connect.
"""

from __future__ import annotations

import json
from typing import Any

from daemon.common.echo import cut

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
MISDIRECTED = 421

Scope = dict[str, Any]
Receive = Any
Send = Any


def host_names(bound: str, also: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The names a port bound to ``bound`` answers to (an IPv6 address in brackets, as ``Host`` writes it);
    ``also``: the names its setting gave (the peer API's ``fleet.listen`` may name the hub's tailnet name)."""
    own = [f"[{name}]" if ":" in name and not name.startswith("[") else name for name in (bound, *also)]
    return tuple(dict.fromkeys((*(n.lower() for n in own), *LOOPBACK_NAMES)))


def allowed(host: str | None, bound: str, port: int | None, also: tuple[str, ...] = ()) -> bool:
    """Whether a ``Host`` header names this port: one of :func:`host_names`, with no port or this one."""
    if not host:
        return False
    name, port_text = _split(host.strip().lower())
    if name not in host_names(bound, also):
        return False
    return port_text is None or (port is not None and port_text == str(port))


def _split(host: str) -> tuple[str, str | None]:
    """``name`` and ``port`` of a Host value (``[::1]:8765`` → ``[::1]``, ``8765``)."""
    if host.startswith("["):
        address, bracket, rest = host.partition("]")
        if not bracket:
            return host, None  # "[::1" is no address
        if not rest:
            return address + "]", None
        if rest.startswith(":"):
            return address + "]", rest[1:]
        return host, None  # something after the bracket: a name no port of ours has
    name, colon, port = host.partition(":")
    return name, port if colon else None


class HostCheck:
    """ASGI middleware for a loopback port: a request whose ``Host`` names another host is refused (421)."""

    def __init__(self, app: Any, also: tuple[str, ...] = ()) -> None:
        self.app = app
        self.also = also  # names besides the bound address (see host_names)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        bound, port = _server(scope)
        host = _header(scope, b"host")
        if allowed(host, bound, port, self.also):
            await self.app(scope, receive, send)
            return
        names = ", ".join(f"{n}:{port}" if port else n for n in host_names(bound, self.also))
        given = f"Host {cut(host)!r}" if host else "no Host header"
        message = (
            f"this port answers requests for {names} only (with or without the port), not {given}: "
            "a request that names another host is refused (DNS rebinding)"
        )
        body = json.dumps({"error": message, "detail": message}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": MISDIRECTED,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),  # the body, if any, is never read
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _server(scope: Scope) -> tuple[str, int | None]:
    """The address and port the request came in on (uvicorn reads them from the listening socket)."""
    server = scope.get("server") or ("127.0.0.1", None)
    return str(server[0]), server[1] if len(server) > 1 else None


def _header(scope: Scope, name: bytes) -> str | None:
    values = [v for k, v in scope.get("headers") or () if k.lower() == name]
    if len(values) != 1:
        return None  # none, or two that may disagree: not a request this port can tell is for it
    return values[0].decode("latin-1")
