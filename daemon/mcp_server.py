"""``memstrata mcp``: an agent's memory as MCP tools, served over stdio.

A thin layer over the daemon's Unix-socket API: the daemon owns the L4 store and
applies every rule (tokens, visibility, the secret guard, the outage queue), so
this server adds none of its own and cannot weaken them.  The agent id is fixed
when the server starts and no tool takes one: a model talking to the server
cannot ask for another agent's memory, and the daemon still checks the token
(``$MEMSTRATA_TOKEN``, see :func:`daemon.tokens.caller_token`) against that id.

L1 core memory is read straight from the agent's workspace, as ``memstrata
core`` does, so it keeps working while the daemon is down.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from daemon import __version__
from daemon.broker import client_timeout
from daemon.client import DaemonClient, DaemonRequestError, DaemonUnavailableError, connect
from daemon.config import Config
from daemon.limits import MAX_QUERY_CHARS, QueryTooLongError
from daemon.workspaces import core_of, get_agent
from layers.conversation.policy import MEMORY_TYPES, VISIBILITIES

# Enums in the tools' JSON schema, so a model picks a valid value up front; built from
# the policy's tuples so the schema cannot drift from what the daemon accepts.
MemoryType = Literal[MEMORY_TYPES]  # type: ignore[valid-type]
Visibility = Literal[VISIBILITIES]  # type: ignore[valid-type]

INSTRUCTIONS = """\
memstrata is this agent's long-term memory, in layers:
- L1 core (memory_core): who you are and who you work for (IDENTITY, SOUL, USER, CORE_INDEX and the
  cluster's shared core). Read it at the start of a session.
- L4 conversation memory (memory_search, memory_add, memory_get_all): facts, decisions and preferences
  shared between the agents of a cluster. Each memory has a visibility: public (every agent), project
  (the agents of one project) or private (only you). Search before you answer from assumptions; add
  what a future session (yours or another agent's) should know.
memory_status says whether the shared store is reachable and how your workspace is doing."""


def _daemon_error(exc: Exception) -> ToolError:
    """A daemon failure as a message a model can act on (no traceback, no retry hint when futile)."""
    if isinstance(exc, DaemonUnavailableError):
        return ToolError(
            f"{exc}: conversation memory is served by the memstrata daemon (`memstrata run`); "
            "memory_core still works without it"
        )
    if isinstance(exc, DaemonRequestError):
        return ToolError(f"the memstrata daemon refused the request (HTTP {exc.status}): {exc}")
    return ToolError(str(exc))


def _ask(config: Config, agent_id: str, request: Callable[[DaemonClient], dict]) -> dict:
    """Run one request as ``agent_id``; daemon errors become :class:`ToolError`."""
    try:
        with connect(config, agent_id, timeout=client_timeout(config)) as client:
            return request(client)
    except QueryTooLongError as exc:  # refused before sending: a model can shorten it and retry
        raise ToolError(str(exc)) from None
    except (DaemonRequestError, DaemonUnavailableError) as exc:
        raise _daemon_error(exc) from None


def _own_status(status: dict, agent_id: str) -> dict:
    """The parts of the daemon's status that concern this agent: the store, and its own workspace."""
    mine = next((a for a in status.get("agents") or [] if a.get("id") == agent_id), None)
    return {"conversation": status.get("conversation") or {}, "agent": mine}


def build_server(config: Config, agent_id: str) -> MCPServer:
    """The MCP server for ``agent_id``; raises UnknownAgentError for an agent without a workspace."""
    agent = get_agent(config, agent_id)
    server = MCPServer(name="memstrata", instructions=INSTRUCTIONS, version=__version__)

    def ask(request: Callable[[DaemonClient], dict]) -> dict:
        return _ask(config, agent.id, request)

    @server.tool()
    def memory_search(
        query: Annotated[
            str, Field(description=f"What to look for, in natural language (at most {MAX_QUERY_CHARS} characters).")
        ],
        limit: Annotated[int, Field(ge=1, le=100, description="Most results to return.")] = 10,
        fallback: Annotated[
            bool, Field(description="While the shared store is down, answer from your local index (degraded).")
        ] = True,
    ) -> dict[str, Any]:
        """Search the shared conversation memory (L4) for what you may read: public memories, those of
        your projects, and your private ones. Use it before answering from assumptions about people,
        decisions, preferences or the state of work. `degraded: true` means the shared store was down
        and the results come from your own local files instead."""
        return ask(lambda c: c.memory_search(agent.id, query, limit=limit, fallback=fallback))

    @server.tool()
    def memory_add(
        text: Annotated[str, Field(description="One self-contained fact, decision or preference.")],
        type: Annotated[
            MemoryType | None, Field(description="Kind of memory; it sets how long it lives (default: knowledge).")
        ] = None,
        visibility: Annotated[
            Visibility | None,
            Field(
                description="Who may read it: public (every agent), project (the agents of `project`) or "
                "private (only you). Default: a project named in the text, else private."
            ),
        ] = None,
        project: Annotated[str | None, Field(description="Project of a project memory.")] = None,
        expires: Annotated[
            str | None, Field(description="Last day it is shown, YYYY-MM-DD (default: by type).")
        ] = None,
    ) -> dict[str, Any]:
        """Remember something in the shared conversation memory (L4), as this agent. Write what a future
        session (yours or another agent's) should know; never secrets (they are refused). Choose the
        visibility deliberately: private for notes about your own work, project for your team, public only
        for what every agent should know (it needs permission). `queued: true` means the store was down
        and the write will be applied once it is back."""
        fields = {"type": type, "visibility": visibility, "project": project, "expires": expires}
        return ask(lambda c: c.add(agent.id, text, **fields))

    @server.tool()
    def memory_get_all(
        limit: Annotated[int, Field(ge=1, le=1000, description="Most memories to return.")] = 100,
        cursor: Annotated[str | None, Field(description="`next_cursor` of the previous page.")] = None,
    ) -> dict[str, Any]:
        """List every conversation memory (L4) you may read, page by page (follow `next_cursor`). Use it
        to review or audit what is remembered; to answer a question, memory_search is better."""
        return ask(lambda c: c.get_all(agent.id, limit=limit, cursor=cursor))

    @server.tool()
    def memory_status() -> dict[str, Any]:
        """Whether the shared conversation store (L4) is reachable, its write queue, and the state of your
        workspace (last commit, files held back by the secret guard). Use it when a memory tool reports
        a problem or answers `degraded`."""
        return _own_status(ask(lambda c: c.status()), agent.id)

    @server.tool()
    def memory_core(
        include_reference: Annotated[
            bool, Field(description="Also load the reference files AGENTS.md and TOOLS.md.")
        ] = False,
        budget: Annotated[
            int | None, Field(ge=1, description="Token budget (default: the configured core.budget_tokens).")
        ] = None,
    ) -> str:
        """Your L1 core memory: the cluster's shared core, CORE_INDEX, IDENTITY, SOUL and USER, cut at a
        token budget with a visible marker. Read it at the start of a session. It comes from your
        workspace files (edit them to change it), not from the conversation memory."""
        return core_of(config, agent, include_reference, budget).render()

    return server
