"""What ``tailscale status`` says about the remote Qdrant peer, for `memstrata status`.

Only for a URL whose host is a Tailscale address (100.64.0.0/10, fd7a:115c:a1e0::/48);
read at most every TAILSCALE_REFRESH_S by the L4 probe loop, never on a request.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import time
from urllib.parse import urlparse

from daemon.common.contracts import TailscaleView
from layers.conversation.adapters.store import describe_error

TAILSCALE_REFRESH_S = 60.0
_TAILSCALE_NETS = (ipaddress.ip_network("100.64.0.0/10"), ipaddress.ip_network("fd7a:115c:a1e0::/48"))


def tailscale_view(url: str) -> TailscaleView | None:
    """What ``tailscale status`` says about the peer at ``url`` (None when it is no Tailscale address)."""
    host = urlparse(url).hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if not any(address in net for net in _TAILSCALE_NETS):
        return None
    exe = shutil.which("tailscale")
    if exe is None:
        return {"peer": host, "available": False, "reason": "the tailscale CLI is not installed here"}
    try:
        out = subprocess.run([exe, "status", "--json"], capture_output=True, text=True, timeout=3, check=True).stdout
        peers = json.loads(out).get("Peer") or {}
    except (subprocess.SubprocessError, OSError, ValueError) as exc:
        return {"peer": host, "available": False, "reason": f"tailscale status failed: {describe_error(exc)}"}
    for peer in peers.values():
        if host in (peer.get("TailscaleIPs") or []):
            return {
                "peer": host,
                "available": True,
                "host_name": peer.get("HostName"),
                "online": peer.get("Online"),
                "last_seen": peer.get("LastSeen"),
                "cur_addr": peer.get("CurAddr") or None,
                "relay": peer.get("Relay") or None,
            }
    return {"peer": host, "available": True, "reason": "no peer with this address in tailscale status"}


class TailscaleWatch:
    """The last view of the peer, refreshed at most every TAILSCALE_REFRESH_S."""

    def __init__(self) -> None:
        self.view: TailscaleView | None = None
        self._at = 0.0

    def refresh(self, backend: str, url: str | None) -> None:
        if backend != "remote" or time.monotonic() - self._at < TAILSCALE_REFRESH_S:
            return
        self._at = time.monotonic()
        self.view = tailscale_view(url or "")
