"""A spoke's client of the hub's peer API (daemon/api/peer.py): one request, as one local agent, with the host key.

``http.client`` with a timeout, a connection per request (nothing held open across a link that may drop).
What the hub answers comes back as it is (status and JSON); no answer at all (refused, reset, timed out,
not JSON) is :class:`HubUnreachable`, whose message never holds the key.
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from protocol.client import query_string, token_shaped

AGENT_HEADER = "X-Memstrata-Agent"  # daemon/api/peer.py's
HEALTH_PATH = "/v1/peer/health"


class HubUnreachable(Exception):
    """No answer from the hub; the message says why (never the key, never the URL's credentials: it has none)."""


@dataclass(frozen=True)
class HubAnswer:
    status: int
    data: Any  # the JSON the hub answered ({} for an empty body)
    retry_after: str | None
    rtt_ms: float


def read_key(path: Path) -> str:
    """The host key in ``path`` (``conversation.hub.key_file``); ValueError naming the file, never the key."""
    key = path.read_text(encoding="utf-8").strip()
    if not key or not token_shaped(key) or len(key) > 512:
        raise ValueError(f"{path} holds no host key (one line, as `memstrata fleet add-host` wrote it on the hub)")
    return key


class HubClient:
    """The hub at ``url`` (``http://HOST:PORT``), as this host (``key``)."""

    def __init__(self, url: str, key: str, timeout_s: float) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"conversation.hub.url: {url!r} is not http://HOST:PORT")
        self.url = url.rstrip("/")
        self.host, self.port = parts.hostname, parts.port or 80
        self.timeout_s = timeout_s
        self._key = key

    def handed(self) -> dict[str, Any]:
        """What a child process needs to ask the hub as this host (replica_build.py: given on its stdin, never
        on its command line, where ``ps`` would show the key)."""
        return {"url": self.url, "key": self._key, "timeout_s": self.timeout_s}

    def send(
        self,
        agent: str | None,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        body: dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> HubAnswer:
        """One request; ``timeout_s`` (at most the configured one) for a caller that must not wait that long."""
        timeout = self.timeout_s if timeout_s is None else min(timeout_s, self.timeout_s)
        headers = {"Accept": "application/json", "Authorization": f"Bearer {self._key}"}
        if agent is not None:
            headers[AGENT_HEADER] = agent
        payload = None
        if body is not None:
            payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        started = time.monotonic()
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            connection.request(method, path + query_string(params), body=payload, headers=headers)
            response = connection.getresponse()
            raw = response.read()
            retry_after = response.getheader("Retry-After")
        except TimeoutError:
            raise HubUnreachable(f"no answer within {timeout:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise HubUnreachable(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from None
        finally:
            connection.close()
        try:
            data = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise HubUnreachable(
                f"the hub's answer ({response.status}) is not JSON: is {self.url} the peer API?"
            ) from None
        return HubAnswer(response.status, data, retry_after, round((time.monotonic() - started) * 1000, 1))
