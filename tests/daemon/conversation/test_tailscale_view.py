"""What `status` says about the Tailscale peer behind a remote Qdrant URL.

Tailscale cannot be installed on these machines: its CLI is played by a stand-in
script on PATH that prints what `tailscale status --json` prints.
"""

from __future__ import annotations

import json
import stat

from daemon.conversation.tailscale import tailscale_view
from daemon.front.status import _conversation_lines

STATUS = {
    "Peer": {
        "nodekey:abc": {
            "HostName": "qdrant-hub",
            "TailscaleIPs": ["100.115.94.1", "fd7a:115c:a1e0::1"],
            "Online": True,
            "LastSeen": "2026-11-30T10:00:00Z",
            "CurAddr": "203.0.113.7:41641",
            "Relay": "fra",
        }
    }
}


def stand_in(tmp_path, monkeypatch, output: str, code: int = 0) -> None:
    script = tmp_path / "bin" / "tailscale"
    script.parent.mkdir()
    assert "'" not in output
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' '{output}'\nexit {code}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(script.parent))


def test_only_tailscale_addresses_are_looked_up(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, json.dumps(STATUS))
    assert tailscale_view("http://127.0.0.1:6333") is None
    assert tailscale_view("http://qdrant.example.com:6333") is None


def test_peer_is_found_and_rendered(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, json.dumps(STATUS))
    view = tailscale_view("http://100.115.94.1:6333")
    assert view == {
        "peer": "100.115.94.1",
        "available": True,
        "host_name": "qdrant-hub",
        "online": True,
        "last_seen": "2026-11-30T10:00:00Z",
        "cur_addr": "203.0.113.7:41641",
        "relay": "fra",
    }
    conversation = {
        "enabled": True,
        "backend": "remote",
        "url": "http://100.115.94.1:6333",
        "collection": "mem0_v4_shared",
        "reachable": True,
        "rtt_ms": 3.2,
        "tailscale": view,
    }
    lines, problems = _conversation_lines(conversation)
    assert problems == []
    assert "tailscale: peer qdrant-hub (100.115.94.1) online, 203.0.113.7:41641" in lines[-1]
    assert "reachable (3.2 ms)" in lines[0]


def test_missing_cli_failed_cli_and_unknown_peer_say_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert "not installed" in tailscale_view("http://100.115.94.1:6333")["reason"]
    stand_in(tmp_path, monkeypatch, "not json", code=1)
    assert "tailscale status failed" in tailscale_view("http://100.115.94.1:6333")["reason"]


def test_unknown_peer(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, json.dumps(STATUS))
    assert "no peer" in tailscale_view("http://100.64.0.9:6333")["reason"]
