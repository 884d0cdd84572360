"""Talking to a running daemon over its Unix socket.

Standard library only (``http.client`` over ``AF_UNIX``): every ``memstrata``
call an agent makes goes through here, and importing httpx cost more CPU than
the rest of a ``search`` call (docs/facts.md; bench/bench_front.py measures it).
"""

from __future__ import annotations

import contextlib
import http.client
import json as _json
import random
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from daemon.shared.contracts import MemoryAnswer, SearchAnswer, StatusDocument
from daemon.shared.limits import CLIENT_RETRIES, CLIENT_RETRY_CAP_S, L4_PAGE, L4_RESULTS, check_query


def retry_delay(retry_after: str | None) -> float:
    """How long to wait after a 429: the daemon's Retry-After (capped), spread a little so that
    callers told the same figure do not all come back in the same instant."""
    try:
        seconds = float(retry_after) if retry_after else 1.0
    except ValueError:
        seconds = 1.0
    return min(CLIENT_RETRY_CAP_S, max(0.1, seconds)) * random.uniform(1.0, 1.25)


def _token_shaped(token: str) -> bool:
    """Printable ASCII: every token memstrata issues (``secrets.token_urlsafe``) is, and a header can carry it."""
    return token.isascii() and token.isprintable()


class DaemonUnavailableError(ConnectionError):
    """No daemon answers on the socket (not running, or no permission)."""


class DaemonRequestError(RuntimeError):
    """The daemon answered with an error; ``status`` is the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix socket."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("memstrata", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.socket_path))
        except BaseException:
            sock.close()
            raise
        self.sock = sock

    def send(self, data) -> None:
        """Send, or stop sending if the daemon has already answered and closed (a refusal before the
        body is read, like a 401): getresponse() then reads that answer, or fails if there is none."""
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            super().send(data)


class DaemonClient:
    """The daemon's API; ``token`` authenticates the caller as an agent (or the administrator).

    The keyword arguments of :meth:`search`, :meth:`add`, :meth:`update` and :meth:`memory_search`
    are the fields of their request schemas (daemon/api/requests.py), named as the API names them:
    a misspelled one fails here, where the daemon would ignore it (it ignores unknown fields).
    tests/daemon/front/test_request_fields.py compares them with the schemas.
    """

    def __init__(self, socket_path: Path, timeout: float = 5.0, token: str | None = None) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        if token and not _token_shaped(token):
            # http.client would refuse the header quoting it whole: a secret on the terminal
            raise ValueError(
                "the token given ($MEMSTRATA_TOKEN or a token file) holds characters no memstrata token has "
                f"({len(token)} characters; not shown): memstrata tokens are printable ASCII"
            )
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: dict | None = None,
        params: dict | None = None,
        timeout: float | None = None,
    ) -> Any:
        """One request; told 429 (this caller's earlier requests fill its share), waits and tries again."""
        if not self.socket_path.exists():
            raise DaemonUnavailableError(f"no daemon socket at {self.socket_path}")
        headers = dict(self._headers)
        body = None
        if json is not None:
            body = _json.dumps(json).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if params:
            path += "?" + urlencode({k: str(v).lower() if isinstance(v, bool) else v for k, v in params.items()})
        waited = 0.0
        status, raw, retry_after = self._exchange(method, path, body, headers, timeout)
        for _ in range(CLIENT_RETRIES):
            if status != 429:
                break
            pause = retry_delay(retry_after)
            time.sleep(pause)
            waited += pause
            status, raw, retry_after = self._exchange(method, path, body, headers, timeout)
        text = raw.decode("utf-8", errors="replace")
        if status >= 400:
            try:
                message = _json.loads(text).get("error", text)
            except (ValueError, AttributeError):
                message = text
            if status == 429:
                message = (
                    f"the daemon is busy with this caller's earlier requests: {message} "
                    f"(tried {CLIENT_RETRIES + 1} times over {waited:.0f} s)"
                )
            raise DaemonRequestError(status, message)
        return _json.loads(text)

    def _exchange(
        self, method: str, path: str, body: bytes | None, headers: dict, timeout: float | None
    ) -> tuple[int, bytes, str | None]:
        connection = _UnixConnection(self.socket_path, self.timeout if timeout is None else timeout)
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read(), response.getheader("Retry-After")
        except (http.client.HTTPException, OSError) as exc:
            raise DaemonUnavailableError(f"daemon not reachable at {self.socket_path}: {exc}") from exc
        finally:
            connection.close()

    def status(self) -> StatusDocument:
        return self._request("GET", "/v1/status")

    def search(
        self,
        agent: str,
        query: str,
        *,
        layer: str | None = None,
        path: str | None = None,
        since: str | None = None,
        until: str | None = None,
        mode: str | None = None,
        limit: int | None = None,
        explain: bool = False,
        threshold: float | None = None,
        max_tokens: int | None = None,
        min_score: float | None = None,
    ) -> SearchAnswer:
        """L3 search; the query goes in the body (a URL has no room for it), checked against the limit first.
        ``threshold`` drops results under that relevance (0-1, the scale of :meth:`memory_search`'s);
        ``min_score`` those under that confidence (0-1: the chance a result is the passage that answers);
        ``max_tokens`` cuts the answer to that budget (passages first, whole sections where they fit)."""
        check_query(query)
        options: dict[str, Any] = {"layer": layer, "path": path, "since": since, "until": until, "mode": mode}
        options.update(limit=limit, threshold=threshold, max_tokens=max_tokens, min_score=min_score)
        clean = {k: v for k, v in {**options, "explain": explain}.items() if v not in (None, False)}
        return self._request("POST", "/v1/search", json={"agent": agent, "q": query, **clean})

    def reindex(self, agent: str | None = None, rebuild: bool = False, timeout: float = 3600) -> dict:
        return self._request("POST", "/v1/reindex", json={"agent": agent, "rebuild": rebuild}, timeout=timeout)

    def add(
        self,
        agent: str,
        text: str,
        *,
        type: str | None = None,
        visibility: str | None = None,
        project: str | None = None,
        expires: str | None = None,
        infer: bool | None = None,
        write_id: str | None = None,
        role: str | None = None,
        user_id: str | None = None,
        run_id: str | None = None,
        actor_id: str | None = None,
        metadata: dict | None = None,
        supersedes: str | None = None,
        trust: str | None = None,
        source: str | None = None,
    ) -> dict:
        """An L4 write; what is left None the daemon decides (type, placement, lifetime, infer, trust, source).

        ``user_id``/``run_id``/``actor_id`` and ``metadata`` are data kept with the memory (mem0's meaning);
        ``supersedes`` names a memory the new one replaces (kept, marked superseded, out of searches).
        """
        fields = {
            "user_id": user_id,
            "run_id": run_id,
            "actor_id": actor_id,
            "metadata": metadata,
            "type": type,
            "visibility": visibility,
            "project": project,
            "expires": expires,
            "infer": infer,
            "write_id": write_id,
            "role": role,
            "supersedes": supersedes,
            "trust": trust,
            "source": source,
        }
        body = {"agent": agent, "text": text, **{k: v for k, v in fields.items() if v is not None}}
        return self._request("POST", "/v1/memories", json=body)

    def memory_search(
        self,
        agent: str,
        query: str,
        limit: int = L4_RESULTS.default,
        fallback: bool = True,
        filters: dict | None = None,
        threshold: float | None = None,
        explain: bool = False,
        show_expired: bool = False,
        show_superseded: bool = False,
        trust_min: str | None = None,
        max_tokens: int | None = None,
    ) -> MemoryAnswer:
        """An L4 search; ``filters`` in mem0's language narrow what the agent may read (never widen it);
        ``threshold`` drops results under that relevance (0-1); ``explain`` says why each was returned."""
        check_query(query)
        body: dict = {"agent": agent, "q": query, "limit": limit, "fallback": fallback}
        if filters:
            body["filters"] = filters
        if threshold is not None:
            body["threshold"] = threshold
        if explain:
            body["explain"] = True
        if show_expired:
            body["show_expired"] = True
        if show_superseded:
            body["show_superseded"] = True
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if trust_min:
            body["trust_min"] = trust_min
        return self._request("POST", "/v1/memories/search", json=body)

    def get_all(
        self,
        agent: str,
        limit: int = L4_PAGE.default,
        cursor: str | None = None,
        filters: dict | None = None,
        show_superseded: bool = False,
        show_expired: bool = False,
        show_archived: bool = False,
    ) -> MemoryAnswer:
        params: dict[str, Any] = {"agent": agent, "limit": limit, **({"cursor": cursor} if cursor else {})}
        if filters:
            params["filters"] = _json.dumps(filters, ensure_ascii=False)
        shown = {"show_superseded": show_superseded, "show_expired": show_expired, "show_archived": show_archived}
        params.update({k: True for k, v in shown.items() if v})
        return self._request("GET", "/v1/memories", params=params)

    def get(self, agent: str, memory_id: str) -> dict:
        return self._request("GET", f"/v1/memories/{memory_id}", params={"agent": agent})

    def delete(self, agent: str, memory_id: str) -> dict:
        return self._request("DELETE", f"/v1/memories/{memory_id}", params={"agent": agent})

    def update(self, agent: str, memory_id: str, text: str, expires: str | None = None) -> dict:
        body = {"agent": agent, "text": text, **({"expires": expires} if expires else {})}
        return self._request("PUT", f"/v1/memories/{memory_id}", json=body)

    def restore_memory(self, agent: str, memory_id: str) -> dict:
        """Bring an archived (faded) or superseded memory of ``agent``'s back to valid."""
        return self._request("POST", f"/v1/memories/{memory_id}/restore", json={"agent": agent})

    def history(self, agent: str, memory_id: str) -> dict:
        return self._request("GET", f"/v1/memories/{memory_id}/history", params={"agent": agent})

    def delete_all(self, agent: str, **filters: object) -> dict:
        params = {"agent": agent, **{k: v for k, v in filters.items() if v not in (None, False)}}
        return self._request("DELETE", "/v1/memories", params=params)

    def admin(self, action: str, body: dict) -> dict:
        """An administrator's maintenance request: cleanup, backup, restore."""
        return self._request("POST", f"/v1/admin/{action}", json=body)

    def close(self) -> None:
        """Nothing stays open between requests (each uses its own connection)."""

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(config, agent: str | None = None, timeout: float = 5.0) -> DaemonClient:
    """A client for ``config``'s daemon carrying the caller's token (see :func:`caller_token`)."""
    from daemon.shared.tokens import caller_token
    from daemon.shared.workspaces import workspace_of

    workspace = workspace_of(config, agent) if agent else None
    return DaemonClient(config.paths.socket, timeout=timeout, token=caller_token(config.paths.state_dir, workspace))
