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

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import ConfigDict, Field, model_validator

from daemon import __version__
from daemon.client import DaemonClient, DaemonRequestError, DaemonUnavailableError, connect
from daemon.contracts import StatusDocument
from daemon.limits import MAX_QUERY_CHARS, QueryTooLongError
from daemon.wiring import client_timeout
from daemon.workspaces import core_of, get_agent
from layers.conversation.policy import MEMORY_TYPES, VISIBILITIES, retention_for
from layers.conversation.registry import load_registry

if TYPE_CHECKING:
    from daemon.config import Config

# Enums in the tools' JSON schema, so a model picks a valid value up front; built from
# the policy's tuples so the schema cannot drift from what the daemon accepts.
MemoryType = Literal[MEMORY_TYPES]  # type: ignore[valid-type]
Visibility = Literal[VISIBILITIES]  # type: ignore[valid-type]

INSTRUCTIONS = """\
memstrata is this agent's long-term memory, in layers:
- L1 core (memory_core): who you are and who you work for (IDENTITY, SOUL, USER, CORE_INDEX and the
  cluster's shared core). Read it at the start of a session.
- L4 conversation memory (memory_search, memory_add, memory_get_all, memory_get, memory_update,
  memory_delete, memory_history): facts, decisions and preferences shared between the agents of a
  cluster. Each memory has a visibility: public (every agent), project (the agents of one project) or
  private (only you). Search before you answer from assumptions; add
  what a future session (yours or another agent's) should know; correct (memory_update) or remove
  (memory_delete) a memory of yours that turned out wrong.
memory_status says whether the shared store is reachable, how your workspace is doing, and where you may
write."""


def _daemon_error(exc: Exception) -> ToolError:
    """A daemon failure as a message a model can act on (no traceback, no retry hint when futile)."""
    if isinstance(exc, DaemonUnavailableError):
        return ToolError(
            f"{exc}: conversation memory is served by the memstrata daemon (`memstrata run`); "
            "memory_core still works without it"
        )
    if isinstance(exc, DaemonRequestError) and exc.status == 500:
        return ToolError(f"the memstrata daemon failed on this request (HTTP 500): {exc}")
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


def _own_status(status: StatusDocument, agent_id: str) -> dict:
    """The parts of the daemon's status that concern this agent: the store, and its own workspace."""
    mine = next((a for a in status.get("agents") or [] if a.get("id") == agent_id), None)
    return {"conversation": status.get("conversation") or {}, "agent": mine}


def _permissions(config: Config, agent_id: str) -> dict:
    """The agent's projects and whether it may write public memories, from the project registry."""
    try:
        registry = load_registry(config.paths.registry)
    except (OSError, ValueError) as exc:
        return {"error": f"the project registry {config.paths.registry} cannot be read: {exc}"}
    return {
        "projects": sorted(registry.projects_of(agent_id)),
        "can_write_public": registry.can_write_public(agent_id),
        "may_write": [
            "private",
            *(["project"] if registry.projects_of(agent_id) else []),
            *(["public"] if registry.can_write_public(agent_id) else []),
        ],
    }


def _lifetimes(config: Config) -> str:
    """Each memory type's lifetime, as configured, for the memory_add description."""
    parts = []
    for name in MEMORY_TYPES:
        days = retention_for(name, config.conversation.retention_days)
        parts.append(f"{name} ({'never expires' if days is None else f'{days} days'})")
    return "; ".join(parts)


def _one_paragraph(text: str | None) -> str:
    """A docstring as a tool description: no indentation, no hard line breaks."""
    return " ".join(inspect.cleandoc(text or "").split())


def _strict_arguments(base: type, tool: str, agent_id: str) -> type:
    """The tool's argument model, refusing what it does not know (pydantic ignores extras by default).

    An ``agent_id`` argument in particular would otherwise be dropped without a word, and a model
    could believe it had read or written as another agent.
    """
    allowed = {field.alias or name for name, field in base.model_fields.items()}

    class Strict(base):  # type: ignore[misc, valid-type]
        model_config = ConfigDict(**base.model_config, extra="forbid")

        @model_validator(mode="before")
        @classmethod
        def _known_only(cls, data: Any) -> Any:
            if isinstance(data, dict):
                unknown = sorted(set(data) - allowed)
                if unknown:
                    who = (
                        f" this server acts for agent {agent_id!r} only (fixed when it started), and no tool "
                        "takes an agent id."
                        if {"agent_id", "agent", "user_id"} & set(unknown)
                        else ""
                    )
                    known = ", ".join(sorted(allowed)) or "none"
                    raise ValueError(f"unknown argument(s) {', '.join(unknown)} for {tool} (it takes: {known});{who}")
            return data

    Strict.__name__ = base.__name__
    return Strict


READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def build_refusing_server(reason: str) -> MCPServer:
    """A server that says why it cannot serve, for an agent id the configuration does not know.

    Exiting at start leaves the reason in a log few MCP clients show; a server that starts,
    states the problem in its instructions and answers every call with it puts the message
    where the user of the client sees it."""
    message = f"memstrata cannot serve this agent: {reason}. Fix the --agent argument of the MCP server's command."
    server = MCPServer(name="memstrata", instructions=message, version=__version__)

    @server.tool(annotations=READ_ONLY)
    def memory_status() -> dict[str, Any]:
        """Why this memstrata MCP server has no memory to offer (its agent is unknown)."""
        raise ToolError(message)

    return server


def build_server(config: Config, agent_id: str) -> MCPServer:
    """The MCP server for ``agent_id``; raises UnknownAgentError for an agent without a workspace."""
    agent = get_agent(config, agent_id)
    server = MCPServer(name="memstrata", instructions=INSTRUCTIONS, version=__version__)
    lifetimes = _lifetimes(config)

    def ask(request: Callable[[DaemonClient], dict]) -> dict:
        return _ask(config, agent.id, request)

    @server.tool(annotations=READ_ONLY)
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

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        )
    )
    def memory_add(
        text: Annotated[str, Field(description="One self-contained fact, decision or preference.")],
        type: Annotated[
            MemoryType | None,
            Field(description="Kind of memory; it sets how long it lives (default: knowledge; see above)."),
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
            str | None, Field(description="Last day it is shown, YYYY-MM-DD, today or later (default: by type).")
        ] = None,
    ) -> dict[str, Any]:
        """Remember something in the shared conversation memory (L4), as this agent. Write what a future
        session (yours or another agent's) should know; never secrets (they are refused). Choose the
        visibility deliberately: private for notes about your own work, project for your team, public only
        for what every agent should know (it needs permission). `queued: true` means the store was down
        and the write will be applied once it is back."""
        fields = {"type": type, "visibility": visibility, "project": project, "expires": expires}
        return ask(lambda c: c.add(agent.id, text, **fields))

    @server.tool(annotations=READ_ONLY)
    def memory_get_all(
        limit: Annotated[int, Field(ge=1, le=1000, description="Most memories to return.")] = 100,
        cursor: Annotated[str | None, Field(description="`next_cursor` of the previous page.")] = None,
    ) -> dict[str, Any]:
        """List every conversation memory (L4) you may read, page by page (follow `next_cursor`). Use it
        to review or audit what is remembered; to answer a question, memory_search is better."""
        return ask(lambda c: c.get_all(agent.id, limit=limit, cursor=cursor))

    @server.tool(annotations=READ_ONLY)
    def memory_get(
        memory_id: Annotated[str, Field(description="The memory's id, as memory_search or memory_add answered.")],
    ) -> dict[str, Any]:
        """One conversation memory (L4) by id: its text, owner, visibility, type, created_at, updated_at and
        expiry. A memory you may not read is answered as not found."""
        return ask(lambda c: c.get(agent.id, memory_id))

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        )
    )
    def memory_update(
        memory_id: Annotated[str, Field(description="The id of one of your own memories.")],
        text: Annotated[str, Field(description="Its corrected text, replacing the old one.")],
        expires: Annotated[
            str | None, Field(description="A new last day it is shown, YYYY-MM-DD, today or later.")
        ] = None,
    ) -> dict[str, Any]:
        """Correct one of your own conversation memories (L4): the text is replaced (the old one stays in
        memory_history), the memory keeps its id, visibility, type and created_at, and gets updated_at.
        Only the memory's owner may update it; while the shared store is down the update is refused and
        nothing changes (try again later)."""
        return ask(lambda c: c.update(agent.id, memory_id, text, expires=expires))

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        )
    )
    def memory_delete(
        memory_id: Annotated[str, Field(description="The id of one of your own memories.")],
    ) -> dict[str, Any]:
        """Delete one of your own conversation memories (L4) that is wrong or no longer true; its history
        (memory_history) keeps what it said. Only the owner may delete it; while the shared store is down
        the delete is refused and nothing changes."""
        return ask(lambda c: c.delete(agent.id, memory_id))

    @server.tool(annotations=READ_ONLY)
    def memory_history(
        memory_id: Annotated[str, Field(description="The memory's id.")],
    ) -> dict[str, Any]:
        """The changes of one conversation memory (L4) you may read, oldest first: ADD, UPDATE (with the
        old and new text) and DELETE events, also after it was deleted."""
        return ask(lambda c: c.history(agent.id, memory_id))

    @server.tool(annotations=READ_ONLY)
    def memory_status() -> dict[str, Any]:
        """Whether the shared conversation store (L4) is reachable, its write queue, the state of your
        workspace (last commit, files held back by the secret guard), and your permissions: the projects
        you belong to and where you may write (private always, project for your projects, public only
        with permission). Use it when a memory tool reports a problem or answers `degraded`."""
        return {**_own_status(ask(lambda c: c.status()), agent.id), "permissions": _permissions(config, agent.id)}

    @server.tool(annotations=READ_ONLY)
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

    for tool in server._tool_manager.list_tools():  # the SDK has no public hook for either
        tool.description = _one_paragraph(tool.description)
        if tool.name == "memory_add":
            tool.description += f" How long each type lives: {lifetimes}."
        tool.fn_metadata.arg_model = _strict_arguments(tool.fn_metadata.arg_model, tool.name, agent.id)
        tool.parameters["additionalProperties"] = False
    return server
