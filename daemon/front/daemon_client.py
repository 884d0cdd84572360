"""Talking to a running daemon over its Unix socket: the protocol's client, as the daemon's front uses it.

The transport, the 429 retry, the error decoding and the operations themselves are protocol/client.py's
and protocol/operations.py's (standard library only: importing httpx cost more CPU than the rest of a
``search`` call, docs/facts.md; bench/bench_front.py measures it).  This module adds what the front
keeps of its own: the answers typed as the daemon's contracts, ``add(type=…)`` as the API names the
field, the front's wording for a daemon that is not there, and :func:`connect` (the caller's token).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

from protocol.client import Client, retry_delay
from protocol.client import UnixConnection as _UnixConnection
from protocol.errors import DaemonRequestError, DaemonUnavailableError

if TYPE_CHECKING:
    from daemon.common.contracts import MemoryAnswer, MemoryPage, SearchAnswer, StatusDocument

__all__ = ["DaemonClient", "DaemonRequestError", "DaemonUnavailableError", "_UnixConnection", "connect", "retry_delay"]


class DaemonClient(Client):
    """The daemon's API; ``token`` authenticates the caller as an agent (or the administrator).

    The keyword arguments of :meth:`search`, :meth:`add`, :meth:`update` and :meth:`memory_search`
    are the fields of their operations (protocol/operations.py): a misspelled one fails with TypeError,
    where the daemon would ignore it (it ignores unknown fields).
    """

    ASCII_JSON: ClassVar[bool] = True  # JSON's default escapes: the body limits are reckoned with them

    def unavailable(self, exc: BaseException, method: str, path: str, timeout: float) -> DaemonUnavailableError:
        """The front's wording (its commands add what to do: `memstrata run`, the offline survey)."""
        if isinstance(exc, FileNotFoundError):
            return DaemonUnavailableError(f"no daemon socket at {self.socket_path}")
        return DaemonUnavailableError(f"daemon not reachable at {self.socket_path}: {exc}")

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """One request as sent before the operations existed (a raw body or query)."""
        return self.request(method, path, params, json, timeout=timeout)

    # The answers narrowed to the daemon's contracts (a TypedDict is no dict[str, Any] subtype to mypy).
    def status(self) -> StatusDocument:  # type: ignore[override]
        return cast("StatusDocument", super().status())

    def search(self, agent: str, query: str, **options: Any) -> SearchAnswer:  # type: ignore[override]
        """L3 search; the query goes in the body (a URL has no room for it), checked against the limit first.
        ``threshold`` drops results under that relevance (0-1, the scale of :meth:`memory_search`'s);
        ``min_score`` those under that confidence (0-1: the chance a result is the passage that answers);
        ``max_tokens`` cuts the answer to that budget (passages first, whole sections where they fit)."""
        return cast("SearchAnswer", super().search(agent, query, **options))

    def add(self, agent: str, text: str, *, type: str | None = None, **options: Any) -> dict[str, Any]:
        """An L4 write; ``type`` is the API's name of ``memory_type`` (both are taken)."""
        if type is not None:
            options["memory_type"] = type
        return super().add(agent, text, **options)

    def memory_search(self, agent: str, query: str, **options: Any) -> MemoryAnswer:  # type: ignore[override]
        """An L4 search; ``filters`` in mem0's language narrow what the agent may read (never widen it);
        ``threshold`` drops results under that relevance (0-1); ``explain`` says why each was returned."""
        return cast("MemoryAnswer", super().memory_search(agent, query, **options))

    def get_all(self, agent: str, **options: Any) -> MemoryPage:
        """One page of the L4 listing (protocol.operations.List)."""
        return cast("MemoryPage", self.list(agent, **options))

    def update(self, agent: str, memory_id: str, text: str, **options: Any) -> dict[str, Any]:
        if not options.get("expires"):
            options.pop("expires", None)  # an empty expiry was never sent
        return super().update(agent, memory_id, text, **options)

    def delete_all(self, agent: str, **filters: Any) -> dict[str, Any]:
        """``filters`` by the API's names (``type``) or the operation's (``memory_type``); unset ones left out."""
        given = {k: v for k, v in filters.items() if v not in (None, False)}
        if "type" in given:
            given["memory_type"] = given.pop("type")
        return super().delete_all(agent, **given)

    def __enter__(self) -> DaemonClient:
        return self


def connect(config: Any, agent: str | None = None, timeout: float = 5.0) -> DaemonClient:
    """A client for ``config``'s daemon carrying the caller's token (see :func:`caller_token`)."""
    from daemon.common.tokens import caller_token
    from daemon.common.workspaces import workspace_of

    workspace = workspace_of(config, agent) if agent else None
    socket_path: Path = config.paths.socket
    return DaemonClient(socket_path, timeout=timeout, token=caller_token(config.paths.state_dir, workspace))
