"""Talking to a running daemon over its Unix socket (httpx)."""

from __future__ import annotations

from pathlib import Path

import httpx


class DaemonUnavailableError(ConnectionError):
    """No daemon answers on the socket (not running, or no permission)."""


class DaemonClient:
    def __init__(self, socket_path: Path, timeout: float = 5.0) -> None:
        self.socket_path = socket_path
        self._client = httpx.Client(
            transport=httpx.HTTPTransport(uds=str(socket_path)), base_url="http://memstrata", timeout=timeout
        )

    def _get(self, path: str) -> dict:
        if not self.socket_path.exists():
            raise DaemonUnavailableError(f"no daemon socket at {self.socket_path}")
        try:
            response = self._client.get(path)
        except (httpx.TransportError, OSError) as exc:
            raise DaemonUnavailableError(f"daemon not reachable at {self.socket_path}: {exc}") from exc
        response.raise_for_status()
        return response.json()

    def status(self) -> dict:
        return self._get("/v1/status")

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
