"""Driving ``memstrata mcp`` with the official MCP SDK client, for the tests that need a real session.

A cluster is a root ``memstrata init`` made with agents of the test's choosing and,
optionally, a running daemon whose L4 store is reachable.  Each MCP server runs as its
own subprocess (``python -m daemon --config CFG mcp --agent ID``), started and stopped
by the SDK client, as an MCP client such as Claude Code does.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from tests.helpers import FAST, REPO_ROOT, DaemonProcess, init_root, run_cli, wait_for

CALL_TIMEOUT_S = 180  # longer than the server waits for the daemon, which waits for a model load


@dataclass
class Cluster:
    root: Path
    config: Path
    daemon: DaemonProcess | None

    def workspace(self, agent: str) -> Path:
        return self.root / "workspace" if agent == "main" else self.root / "workspace" / "agents" / f"{agent}-workspace"

    def token(self, agent: str) -> str:
        return (self.workspace(agent) / ".memstrata" / "token").read_text().strip()

    def store_settled(self) -> None:
        """Wait until the L4 store answers and holds every queued write."""
        assert self.daemon is not None

        def settled() -> bool:
            conversation = self.daemon.status()["conversation"]
            return conversation["reachable"] and conversation["queue"]["depth"] == 0

        wait_for(settled, timeout=180, what=f"conversation store reachable, queue empty\n{self.daemon.log()}")


def make_cluster(tmp_path: Path, daemons=None, agents: Iterable[str] = ("a", "b")) -> Cluster:
    """A root with ``agents``; with ``daemons``, a running daemon whose L4 store is reachable."""
    # L3 vectors off: these tests exercise L4 and L1, and L3's embedding worker would only
    # compete for the CPU (L4 then loads the same local model for itself, on first use).
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    for agent in agents:
        run_cli("agent", "add", agent, config=config)
    cluster = Cluster(tmp_path, config, daemons(config) if daemons else None)
    if cluster.daemon:
        cluster.store_settled()  # the store connects in the background after start
    return cluster


def server(cluster: Cluster, agent: str, token: str | None, cwd: Path = REPO_ROOT) -> StdioServerParameters:
    """``python -m daemon --config CFG mcp --agent AGENT`` with ``$MEMSTRATA_TOKEN`` set to ``token``
    (None: not set at all, as the README's ``claude mcp add`` line starts it)."""
    env = {k: v for k, v in os.environ.items() if k != "MEMSTRATA_TOKEN"}
    if token is not None:
        env["MEMSTRATA_TOKEN"] = token
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "daemon", "--config", str(cluster.config), "mcp", "--agent", agent],
        env=env,
        cwd=cwd,
    )


def with_mcp(params: StdioServerParameters, scenario: Callable[[Client], Awaitable[None]]) -> None:
    """Start the MCP server subprocess, run ``scenario`` against it, stop it (the SDK kills it on exit)."""

    async def main() -> None:
        with anyio.fail_after(300):
            async with Client(params, read_timeout_seconds=CALL_TIMEOUT_S) as client:
                await scenario(client)

    anyio.run(main)


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    """Call a tool that must succeed; its structured answer (a dict, or ``result`` for plain text)."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {text_of(result)}"
    assert result.structured_content is not None
    content = result.structured_content
    return content["result"] if set(content) == {"result"} else content


async def fail(client: Client, tool: str, **arguments: Any) -> str:
    """Call a tool that must fail; the error text it returns to the model."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} should have failed, answered {result.structured_content}"
    return text_of(result)


def text_of(result: CallToolResult) -> str:
    return "\n".join(getattr(part, "text", "") for part in result.content)


async def remember(client: Client, cluster: Cluster, **arguments: Any) -> dict:
    """memory_add that must reach the store. A write the daemon queued (the store was briefly down,
    say while a busy machine loaded the model) is waited out until it has been replayed."""
    added = await call(client, "memory_add", **arguments)
    if added["queued"]:
        await anyio.to_thread.run_sync(cluster.store_settled)
    return added


async def memory_texts(client: Client, tool: str, **arguments: Any) -> list[str]:
    """The memory texts a search or listing answers, after checking it came from the conversation store."""
    answer = await call(client, tool, **arguments)
    assert not answer.get("degraded"), answer
    return [r["memory"] for r in answer["results"]]


def add_as(cluster: Cluster, agent: str, text: str, visibility: str) -> dict:
    """A memory written by ``agent`` through the CLI with that agent's own token."""
    answer = json.loads(
        run_cli(
            "add",
            text,
            "--agent",
            agent,
            "--visibility",
            visibility,
            "--json",
            config=cluster.config,
            env={"MEMSTRATA_TOKEN": cluster.token(agent)},
        ).stdout
    )
    assert answer["visibility"] == visibility, answer
    if answer["queued"]:
        cluster.store_settled()
    return answer
