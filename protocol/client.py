"""The one client of the daemon's API: an AF_UNIX HTTP transport, one 429 retry policy, one error decoding.

Standard library only (``http.client`` over ``AF_UNIX``): every ``memstrata`` call an agent makes goes
through here, and importing httpx cost more CPU than the rest of a ``search`` call (docs/facts.md); the
skill runs a copy of it under whatever ``python3`` an agent has.  :meth:`Client.call` sends any operation
of protocol/operations.py; the methods named after the operations build one from their keyword arguments
(a misspelled keyword fails with TypeError, where the daemon would ignore an unknown field).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import socket
import time
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlencode

from protocol.answers import Answer
from protocol.errors import DaemonRequestError, DaemonUnavailableError, MemstrataError, TokenError
from protocol.limits import CLIENT_RETRIES, CLIENT_RETRY_CAP_S, check_query
from protocol.locations import SOCKET_ENV
from protocol.operations import (
    Add,
    Backup,
    Cleanup,
    Consolidate,
    Delete,
    DeleteAll,
    Get,
    History,
    List,
    MemorySearch,
    Operation,
    Reindex,
    Restore,
    RestoreMemory,
    Search,
    Status,
    Update,
)


def retry_delay(retry_after: str | None) -> float:
    """How long to wait after a 429: the daemon's Retry-After (capped), spread a little so that
    callers told the same figure do not all come back in the same instant."""
    try:
        seconds = float(retry_after) if retry_after else 1.0
    except ValueError:
        seconds = 1.0
    return min(CLIENT_RETRY_CAP_S, max(0.1, seconds)) * random.uniform(1.0, 1.25)


def token_shaped(token: str) -> bool:
    """Printable ASCII: every token memstrata issues (``secrets.token_urlsafe``) is, and a header can carry it."""
    return token.isascii() and token.isprintable()


class UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix socket: what http.client lacks and httpx would have to be installed for."""

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

    def send(self, data: Any) -> None:
        """Send, or stop sending if the daemon has already answered and closed (a refusal before the
        body is read, like a 401): getresponse() then reads that answer, or fails if there is none."""
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            super().send(data)


def query_string(params: dict[str, Any] | None) -> str:
    """``?k=v&…`` of the values given (None left out, a boolean lower-case), or nothing."""
    clean = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in (params or {}).items() if v is not None}
    return "?" + urlencode(clean) if clean else ""


def decode(status: int, raw: bytes, waited: float = 0.0) -> Answer:
    """The JSON answer, or a :class:`DaemonRequestError` carrying the daemon's ``{"error": …}`` message."""
    text = raw.decode("utf-8", errors="replace")
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        data = None
    if status >= 400:
        message = data.get("error") if isinstance(data, dict) else None
        said = str(message or text.strip() or http.client.responses.get(status, "error"))
        if status == 429:
            said = (
                f"the daemon is busy with this caller's earlier requests: {said} "
                f"(tried {CLIENT_RETRIES + 1} times over {waited:.0f} s)"
            )
        raise DaemonRequestError(status, said)
    if not isinstance(data, dict):
        raise MemstrataError(f"the daemon's answer is not a JSON object: {text[:200]!r}")
    return data


class Client:
    """The daemon's API over its Unix socket; ``token`` authenticates the caller as an agent (or the administrator).

    Nothing stays open between requests (each uses its own connection).  Subclasses may say where a token
    comes from (:attr:`TOKEN_SOURCE`), what to do while the daemon is away (:attr:`OFFLINE_ADVICE`), and
    whether JSON bodies escape non-ASCII text (:attr:`ASCII_JSON`).
    """

    TOKEN_SOURCE: ClassVar[str] = "$MEMSTRATA_TOKEN or a token file"
    OFFLINE_ADVICE: ClassVar[str] = ""
    ASCII_JSON: ClassVar[bool] = False
    REQUEST_ERROR: ClassVar[type[DaemonRequestError]] = DaemonRequestError

    def __init__(self, socket_path: Path | str, timeout: float = 5.0, token: str | None = None) -> None:
        self.socket_path = Path(socket_path)
        self.timeout = timeout
        if token and not token_shaped(token):
            # never quoted: a secret (http.client's refusal of the header would show it whole)
            raise TokenError(
                f"the token given ({self.TOKEN_SOURCE}) holds characters no memstrata token has "
                f"({len(token)} characters; not shown): memstrata tokens are printable ASCII"
            )
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    # ------------------------------------------------------------ the transport

    def call(self, operation: Operation, timeout: float | None = None) -> Answer:
        """Send ``operation`` and return the daemon's answer; a search's query over the limit is refused
        here, before anything is sent (``protocol.limits.QueryTooLongError``; the daemon would answer 413)."""
        if isinstance(operation, (Search, MemorySearch)):
            check_query(operation.query)
        method, path, params, body = operation.request()
        return self.request(method, path, params, body, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        body: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> Answer:
        """One request; told 429 (this caller's earlier requests fill its share), waits and tries again."""
        headers = dict(self._headers)
        payload = None
        if body is not None:
            payload = json.dumps(body, ensure_ascii=self.ASCII_JSON).encode("utf-8")
            headers["Content-Type"] = "application/json"
        target = path + query_string(params)
        waited = 0.0
        status, raw, retry_after = self._exchange(method, target, payload, headers, timeout)
        for _ in range(CLIENT_RETRIES):
            if status != 429:
                break
            pause = retry_delay(retry_after)
            time.sleep(pause)
            waited += pause
            status, raw, retry_after = self._exchange(method, target, payload, headers, timeout)
        try:
            return decode(status, raw, waited)
        except DaemonRequestError as exc:
            if type(exc) is self.REQUEST_ERROR:
                raise
            raise self.REQUEST_ERROR(exc.status, exc.message) from None

    def _exchange(
        self, method: str, path: str, payload: bytes | None, headers: dict[str, str], timeout: float | None
    ) -> tuple[int, bytes, str | None]:
        seconds = self.timeout if timeout is None else timeout
        connection = UnixConnection(self.socket_path, seconds)
        try:
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            return response.status, response.read(), response.getheader("Retry-After")
        except (http.client.HTTPException, OSError) as exc:
            raise self.unavailable(exc, method, path, seconds) from None
        finally:
            connection.close()

    def unavailable(self, exc: BaseException, method: str, path: str, timeout: float) -> DaemonUnavailableError:
        """Why no answer came, with what to do about it."""
        where = self.socket_path
        if isinstance(exc, TimeoutError):
            return DaemonUnavailableError(f"no answer from the daemon within {timeout:g} s ({method} {path})")
        if isinstance(exc, (http.client.HTTPException, ConnectionResetError, BrokenPipeError)):
            return DaemonUnavailableError(f"the daemon closed the connection ({exc!r})")
        if isinstance(exc, FileNotFoundError):
            why = (
                f"no daemon socket at {where}: is the daemon running (`memstrata run`, `systemctl status memstrata`)? "
                f"If it listens elsewhere, pass --socket PATH or set ${SOCKET_ENV}."
            )
        elif isinstance(exc, PermissionError):
            why = f"permission denied on {where}: this user must be in the socket's group."
        elif isinstance(exc, ConnectionRefusedError):
            why = f"nothing listens on {where}: the daemon is not running."
        else:
            why = f"daemon not reachable at {where}: {exc}."
        return DaemonUnavailableError(why + self.OFFLINE_ADVICE)

    # ------------------------------------------------------------ one method per operation

    def status(self) -> Answer:
        return self.call(Status())

    def search(self, agent: str, query: str, **options: Any) -> Answer:
        """L3 search of ``agent``'s own index (:class:`protocol.operations.Search`)."""
        return self.call(Search(agent, query, **options))

    def memory_search(self, agent: str, query: str, **options: Any) -> Answer:
        """L4 search (:class:`protocol.operations.MemorySearch`)."""
        return self.call(MemorySearch(agent, query, **options))

    def add(self, agent: str, text: str, **options: Any) -> Answer:
        """An L4 write (:class:`protocol.operations.Add`)."""
        return self.call(Add(agent, text, **options))

    def update(self, agent: str, memory_id: str, text: str, **options: Any) -> Answer:
        return self.call(Update(agent, memory_id, text, **options))

    def restore_memory(self, agent: str, memory_id: str) -> Answer:
        """Bring an archived (faded) or superseded memory of ``agent``'s back to valid."""
        return self.call(RestoreMemory(agent, memory_id))

    def delete(self, agent: str, memory_id: str) -> Answer:
        return self.call(Delete(agent, memory_id))

    def delete_all(self, agent: str, **options: Any) -> Answer:
        return self.call(DeleteAll(agent, **options))

    def list(self, agent: str, **options: Any) -> Answer:
        """One page of the L4 listing (:class:`protocol.operations.List`)."""
        return self.call(List(agent, **options))

    def get(self, agent: str, memory_id: str) -> Answer:
        return self.call(Get(agent, memory_id))

    def history(self, agent: str, memory_id: str) -> Answer:
        return self.call(History(agent, memory_id))

    def reindex(self, agent: str | None = None, rebuild: bool = False, timeout: float = 3600) -> Answer:
        return self.call(Reindex(agent, rebuild), timeout=timeout)

    def cleanup(self, **options: Any) -> Answer:
        return self.call(Cleanup(**options))

    def consolidate(self, **options: Any) -> Answer:
        return self.call(Consolidate(**options))

    def backup(self, **options: Any) -> Answer:
        return self.call(Backup(**options))

    def restore(self, path: str) -> Answer:
        return self.call(Restore(path))

    def close(self) -> None:
        """Nothing stays open between requests (each uses its own connection)."""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
