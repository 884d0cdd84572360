"""A 100 KB search query: one clear line and exit 2 everywhere, never a traceback.

Before the fix ``memstrata search <100 KB>`` died with ``httpx.InvalidURL`` (the
query went into the URL).  Searches now travel in a POST body; above
``MAX_QUERY_CHARS`` (4,096, in README.md) the daemon answers 413 with both
figures, and the CLI, the skill scripts and the MCP tool refuse before sending.

The search body limit holds the longest query escaped at worst: 4,096 emoji, which
the daemon's own client sends as JSON escapes ("\\ud83d\\ude00", 12 bytes each),
were refused with a 413 about the body (49 KB of a 32 KiB limit), not about the query.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters

from daemon.common.daemon_limits import MAX_QUERY_CHARS, QueryTooLongError
from daemon.front.daemon_client import DaemonClient
from tests.helpers import FAST, REPO_ROOT, init_root, run_cli, wait_for

pytestmark = pytest.mark.slow

HUGE = "长" * 10 + "x" * (100 * 1024 - 10)  # 102,400 characters
SKILL = REPO_ROOT / "skills" / "mem0-integration"


def one_line_refusal(proc, what: str, length: str = "102,400") -> str:
    assert proc.returncode == 2, f"{what}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, f"{what}: {proc.stderr}"
    assert length in lines[0] and "4,096" in lines[0], f"{what}: {lines[0]}"
    return lines[0]


def test_oversized_search_query_is_refused_cleanly(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    run_cli("agent", "add", "a", config=config)
    ws = tmp_path / "workspace" / "agents" / "a-workspace"
    (ws / "memory" / "2026-11-30.md").write_text("the aardvark ledger\n")
    daemon = daemons(config)
    admin = (tmp_path / "state" / "admin.token").read_text().strip()
    token = (ws / ".memstrata" / "token").read_text().strip()
    http = httpx.Client(
        transport=httpx.HTTPTransport(uds=str(daemon.socket)),
        base_url="http://memstrata",
        timeout=60,
        headers={"Authorization": f"Bearer {token}"},
    )
    wait_for(lambda: http.post("/v1/search", json={"agent": "a", "q": "aardvark"}).json()["results"], what="indexed")
    with DaemonClient(daemon.socket, timeout=10, token=admin) as as_admin:
        wait_for(lambda: as_admin.status()["conversation"]["reachable"], timeout=120, what="L4 reachable")

    # The CLI, every layer: refused before anything is sent.
    for layer in ("local", "conversation", "all"):
        one_line_refusal(run_cli("search", HUGE, "--agent", "a", "--layer", layer, config=config, check=False), layer)

    # The skill scripts, from inside the workspace as an agent runs them.
    env = {**os.environ, "MEMSTRATA_CONFIG": str(config)}
    env.pop("MEMSTRATA_TOKEN", None)
    for script, flags, args in (
        ("mem0_client.py", ["-I"], ["search", HUGE]),  # isolated: the standard library only
        ("local_search.py", [], [HUGE, "--agent", "a"]),  # imports memstrata from beside itself
    ):
        proc = _run([sys.executable, *flags, str(SKILL / script), *args], cwd=ws, env=env)
        one_line_refusal(proc, script)

    # The API itself (an older or foreign client): 413 with the figures, in a body or in the URL.
    just_over = "y" * (MAX_QUERY_CHARS + 1)
    for path in ("/v1/search", "/v1/memories/search"):
        refused = http.post(path, json={"agent": "a", "q": just_over})
        assert refused.status_code == 413 and "4,097" in refused.json()["error"], refused.text
        legacy = http.get(path, params={"agent": "a", "q": just_over})
        assert legacy.status_code == 413 and "4,096" in legacy.json()["error"], legacy.text
        huge_body = http.post(path, json={"agent": "a", "q": HUGE})
        assert huge_body.status_code == 413, huge_body.text

    # At the limit, everything answers.
    at_limit = "aardvark " + "z" * (MAX_QUERY_CHARS - 9)
    assert len(at_limit) == MAX_QUERY_CHARS
    for layer in ("local", "conversation"):
        assert run_cli("search", at_limit, "--agent", "a", "--layer", layer, config=config, check=False).returncode == 0
    assert http.post("/v1/memories/search", json={"agent": "a", "q": at_limit}).status_code == 200

    # The longest query of 4-byte characters, each escaped to 12 bytes of JSON: answered by the API, the
    # client and the CLI; one character more is refused by the query limit, with its message, everywhere.
    emoji = "aardvark " + "\N{GRINNING FACE}" * (MAX_QUERY_CHARS - 9)
    over = emoji + "\N{GRINNING FACE}"
    query_limit = f"the query is {MAX_QUERY_CHARS + 1:,} characters; the limit is {MAX_QUERY_CHARS:,}"
    for path in ("/v1/search", "/v1/memories/search"):
        for query, status in ((emoji, 200), (over, 413)):
            escaped = json.dumps({"agent": "a", "q": query}).encode()  # ensure_ascii, as DaemonClient sends it
            answer = http.post(path, content=escaped, headers={"Content-Type": "application/json"})
            assert answer.status_code == status, f"{path} {len(escaped):,} bytes: {answer.text}"
        assert answer.json()["error"].startswith(query_limit), answer.text
    with DaemonClient(daemon.socket, timeout=60, token=token) as client:
        assert [r["path"] for r in client.search("a", emoji)["results"]] == ["memory/2026-11-30.md"]
        assert client.memory_search("a", emoji)["degraded"] is False
        for ask in (client.search, client.memory_search):
            with pytest.raises(QueryTooLongError) as refused:
                ask("a", over)
            assert str(refused.value).startswith(query_limit)
    for layer in ("local", "conversation"):
        assert run_cli("search", emoji, "--agent", "a", "--layer", layer, config=config, check=False).returncode == 0
        refusal = one_line_refusal(
            run_cli("search", over, "--agent", "a", "--layer", layer, config=config, check=False), layer, "4,097"
        )
        assert query_limit in refusal, refusal
    skill = _run([sys.executable, "-I", str(SKILL / "mem0_client.py"), "search", emoji], cwd=ws, env=env)
    assert skill.returncode == 0, skill.stderr
    assert query_limit in one_line_refusal(
        _run([sys.executable, "-I", str(SKILL / "mem0_client.py"), "search", over], cwd=ws, env=env),
        "mem0_client.py",
        "4,097",
    )

    # MCP: a tool error a model can act on (the daemon is not even asked).
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "daemon", "--config", str(config), "mcp", "--agent", "a"],
        env={**os.environ, "MEMSTRATA_TOKEN": token},
        cwd=REPO_ROOT,
    )

    async def scenario() -> None:
        with anyio.fail_after(120):
            async with Client(params, read_timeout_seconds=60) as mcp:
                result = await mcp.call_tool("memory_search", {"query": HUGE})
                text = "\n".join(getattr(part, "text", "") for part in result.content)
                assert result.is_error and "102,400" in text and "4,096" in text, text

    anyio.run(scenario)
    http.close()
    assert daemon.stop() == 0


def _run(cmd: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
