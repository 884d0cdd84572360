"""The real OpenClaw's gateway, as tests/openclaw_install.py runs it for the memory plugin's tests (issue 49).

``openclaw gateway run`` on a loopback port with a token of the test's: ready when ``/readyz``
answers, ``/tools/invoke`` answering OpenClaw's own ``memory_search`` (memory-core's, no LLM) with
the token and refusing without it, and nothing of it left running once the block ends.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.openclaw_install import OpenClaw

pytestmark = pytest.mark.slow


def test_the_gateway_runs_on_loopback_with_a_token_answers_tools_invoke_and_stops(tmp_path):
    oc = OpenClaw(tmp_path / "home").onboard()
    with oc.gateway() as gateway:
        status, answer = gateway.invoke("memory_search", {"query": "lighthouse"}, timeout=300)
        assert status == 200 and answer["ok"] is True, answer
        assert answer["result"]["content"][0]["type"] == "text"
        request = urllib.request.Request(f"{gateway.url}/tools/invoke", data=b'{"tool": "memory_search"}')
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
        assert refused.value.code == 401, "no token, no tool"
        assert f"127.0.0.1:{gateway.port}" in gateway.url
    assert gateway.proc.returncode is not None
    assert _alive_in_group(gateway.proc.pid) == [], "nothing of its process group left running"


def _alive_in_group(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that still run (a zombie, awaiting its reaper, is not running)."""
    alive = []
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (OSError, ValueError):
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "(comm)": state, ppid, pgrp, …
        if entry.isdigit() and int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(entry))
    return alive
