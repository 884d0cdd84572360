"""``memstrata mcp``: an agent's memory as MCP tools, served over stdio.

A thin layer over the daemon's Unix-socket API: the daemon owns the L4 store and
applies every rule (tokens, visibility, the secret guard, the outage queue), so
this server adds none of its own and cannot weaken them.  The agent id is fixed
when the server starts and no tool takes one: a model talking to the server
cannot ask for another agent's memory, and the daemon checks the token against
that id.  The token is the agent's own (``$MEMSTRATA_TOKEN``, else the
workspace's ``.memstrata/token``, see :func:`daemon.common.tokens.own_token`), never
the administrator's, even when the server runs as root and could read it:
without the agent's token the server still starts and says why in its
instructions and in every answer.

L1 core memory is read straight from the agent's workspace, as ``memstrata
core`` does, so it keeps working while the daemon is down.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict

from daemon import __version__
from daemon.common.contracts import StatusDocument, fit_memories, local_answer
from daemon.common.daemon_limits import QueryTooLongError
from daemon.common.settings import client_timeout
from daemon.common.tokens import own_token
from daemon.common.workspaces import Agent, core_of, get_agent
from daemon.front.daemon_client import DaemonClient, DaemonRequestError, DaemonUnavailableError
from daemon.front.mcp_protocol import Param, TextAnswer, Tool, ToolError, names_shown, param_of
from daemon.front.mcp_stdio import StdioServer
from layers.conversation.policy.rules import MEMORY_TYPES, retention_for
from protocol import answers
from protocol import operations as op
from protocol.fields import describe

if TYPE_CHECKING:
    from daemon.common.config import Config

INSTRUCTIONS = """\
memstrata is this agent's long-term memory, in layers:
- L1 core (memory_core): who you are and who you work for (IDENTITY, SOUL, USER, CORE_INDEX and the
  cluster's shared core). Read it at the start of a session.
- L4 conversation memory (memory_search, memory_add, memory_get_all, memory_get, memory_update,
  memory_delete, memory_history): facts, decisions and preferences shared between the agents of a
  cluster. Each memory has a visibility: public (every agent), project (the agents of one project) or
  private (only you). Search before you answer from assumptions; add
  what a future session (yours or another agent's) should know; correct (memory_update) or remove
  (memory_delete) a memory of yours that turned out wrong; when a fact changed, add the new one with
  `supersedes` naming the old (kept in memory_history, no longer found by memory_search).
memory_status says whether the conversation store is reachable, how your workspace is doing, and where you may
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


def _token_problem(config: Config, agent: Agent) -> str | None:
    """Why this server has no token of the agent's own now, or None (looked up at each call: a
    token the daemon writes, or `memstrata agent token` issues, after the start is then used)."""
    return own_token(config.paths.state_dir, agent.id, agent.workspace)[1]


def _ask(config: Config, agent: Agent, request: Callable[[DaemonClient], Any]) -> Any:
    """Run one request as ``agent`` with its own token; no token and daemon errors become :class:`ToolError`."""
    token, problem = own_token(config.paths.state_dir, agent.id, agent.workspace)
    if problem:
        raise ToolError(problem)  # nothing is sent: without a token the daemon would answer for nobody
    try:
        with DaemonClient(config.paths.socket, timeout=client_timeout(config), token=token) as client:
            return request(client)
    except QueryTooLongError as exc:  # refused before sending: a model can shorten it and retry
        raise ToolError(str(exc)) from None
    except DaemonUnavailableError as exc:
        raise DaemonDown(exc) from None
    except DaemonRequestError as exc:
        raise _daemon_error(exc) from None


class DaemonDown(ToolError):
    """No daemon answered: the tool's error, unless the tool has a way without it (memory_search)."""

    def __init__(self, cause: DaemonUnavailableError) -> None:
        super().__init__(str(_daemon_error(cause)))
        self.cause = cause


def _local_fallback(
    agent: Agent, query: str, limit: int, reason: str, threshold: float | None = None
) -> dict[str, Any]:
    """memory_search while the daemon is down: the agent's own L3 index, read-only, full-text
    (the model is the daemon's), in the daemon's own degraded shape (daemon/conversation/reads.py).
    The index holds this agent's files only: nothing of another agent is reachable this way."""
    from layers.local.ranking.hybrid_search import search as search_index
    from layers.local.storage.index import ForeignFile, IndexStale, open_for_reading  # apsw: only on this path

    if not agent.index.exists():
        raise ToolError(f"{reason}, and there is no local index for {agent.id} yet ({agent.index})")
    try:
        with open_for_reading(agent.index) as index:
            found = search_index(index, query, limit=limit, mode="auto", no_embedder_reason=reason, threshold=threshold)
            local = found.to_dict()
    except (ForeignFile, IndexStale, OSError, ValueError) as exc:
        raise ToolError(f"{reason}, and the local index cannot answer: {exc}") from None
    return local_answer(query, reason, local)


class Permissions(TypedDict, total=False):
    """Where the agent may write, from the project registry (or why the registry cannot say)."""

    projects: list[str]
    can_write_public: bool
    may_write: list[str]  # private always, project with a project, public with permission
    error: str


class AgentStatus(TypedDict, total=False):
    """memory_status: the conversation store's state, the agent's own workspace and its permissions.

    The two status parts are the daemon's (daemon/common/contracts.py ``ConversationStatus`` and
    ``AgentReport``), passed on as they are and declared loosely here: a client holding the answer to its
    schema must not fail the one tool that says what is wrong because a report gained a key.
    """

    conversation: dict[str, Any]  # the status' conversation section, or {"error": why no daemon answered}
    agent: dict[str, Any] | None  # the agent's entry of the status (None without a token of its own)
    permissions: Permissions
    problem: str  # why the agent has no token: only the store's health is shown


def _own_status(status: StatusDocument, agent_id: str) -> dict:
    """The parts of the daemon's status that concern this agent: the store, and its own workspace."""
    mine = next((a for a in status.get("agents") or [] if a.get("id") == agent_id), None)
    return {"conversation": status.get("conversation") or {}, "agent": mine}


def _health(config: Config) -> dict:
    """The conversation store's health, asked without a token (what the daemon shows anyone)."""
    try:
        with DaemonClient(config.paths.socket, timeout=client_timeout(config)) as client:
            return {"conversation": client.status().get("conversation") or {}}
    except (DaemonRequestError, DaemonUnavailableError) as exc:
        return {"conversation": {"error": str(_daemon_error(exc))}}


def _permissions(config: Config, agent_id: str) -> dict:
    """The agent's projects and whether it may write public memories, from the project registry."""
    from layers.conversation.policy.registry import load_registry  # pydantic + yaml: only memory_status pays

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


def _refuse_unknown(tool: str, agent_id: str) -> Callable[[list[str], list[str]], str]:
    """The refusal of an argument the tool does not take.

    An ``agent_id`` argument in particular would otherwise be dropped without a word, and a model
    could believe it had read or written as another agent.
    """

    def message(unknown: list[str], known: list[str]) -> str:
        who = (
            f" this server acts for agent {agent_id!r} only (fixed when it started), and no tool takes an agent id."
            if {"agent_id", "agent", "user_id"} & set(unknown)
            else ""
        )
        listed = names_shown(unknown)  # the caller's names: cut, escaped, counted past a few
        return f"unknown argument(s) {listed} for {tool} (it takes: {', '.join(known) or 'none'});{who}"

    return message


def _hints(read_only: bool, destructive: bool, idempotent: bool) -> dict[str, bool]:
    """MCP tool annotations; every tool here acts on this cluster only (no open world)."""
    return {
        "destructiveHint": destructive,
        "idempotentHint": idempotent,
        "openWorldHint": False,
        "readOnlyHint": read_only,
    }


YOUR_MEMORY = "The id of one of your own memories."
READ_ONLY = _hints(read_only=True, destructive=False, idempotent=True)
WRITES = _hints(read_only=False, destructive=False, idempotent=False)
CHANGES = _hints(read_only=False, destructive=True, idempotent=True)


def build_refusing_server(reason: str) -> StdioServer:
    """A server that says why it cannot serve, for an agent id the configuration does not know.

    Exiting at start leaves the reason in a log few MCP clients show; a server that starts,
    states the problem in its instructions and answers every call with it puts the message
    where the user of the client sees it."""
    message = f"memstrata cannot serve this agent: {reason}. Fix the --agent argument of the MCP server's command."

    def memory_status() -> dict[str, Any]:
        raise ToolError(message)

    status = Tool(
        "memory_status",
        "Why this memstrata MCP server has no memory to offer (its agent is unknown).",
        memory_status,
        annotations=READ_ONLY,
        answer=AgentStatus,
    )
    return StdioServer(name="memstrata", version=__version__, instructions=message, tools=[status])


# A tool argument's name where it is not the operation's field's (the API's own name of it).
TOOL_NAMES = {"memory_type": "type"}
FIELD_NAMES = {tool: field for field, tool in TOOL_NAMES.items()}

FILTERS_DESCRIPTION = (
    'mem0\'s filters, e.g. {"user_id": "alice", "rating": {"gte": 4}}: AND/OR/NOT lists, eq ne in nin gt gte '
    'lt lte contains icontains, "*" for any value. They narrow what you may read, never widen it.'
)


def operation_params(operation: type[op.Operation], *names: str, **described: str) -> tuple[Param, ...]:
    """The tool arguments of ``operation``'s fields ``names``, in that order (never its agent: fixed when
    the server starts); ``described``: a field's description where a model is told it otherwise."""
    fields = {f.name: f for f in describe(operation)}
    params = []
    for name in names:
        param = param_of(fields[name], TOOL_NAMES.get(name), described.get(name))
        if name == "max_tokens":
            # the daemon takes any budget past its cap as the cap: no upper bound told (nor refused) here
            param = param_of(fields[name], description=described.get(name), maximum=None)
        params.append(param)
    return tuple(params)


def as_fields(arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool call's arguments by their operation's field names."""
    return {FIELD_NAMES.get(name, name): value for name, value in arguments.items()}


def build_server(config: Config, agent_id: str) -> StdioServer:
    """The MCP server for ``agent_id``; raises UnknownAgentError for an agent without a workspace."""
    agent = get_agent(config, agent_id)

    def ask(request: Callable[[DaemonClient], Any]) -> Any:
        return _ask(config, agent, request)

    def send(operation: type[op.Operation], arguments: dict[str, Any]) -> dict[str, Any]:
        """The tool's operation as this agent, built from its arguments (inside the request: a query
        too long is refused there, as a tool error)."""
        return ask(lambda c: c.call(operation(agent.id, **as_fields(arguments))))  # type: ignore[call-arg]

    def memory_search(**arguments: Any) -> dict[str, Any]:
        try:
            return send(op.MemorySearch, arguments)
        except DaemonDown as down:
            if not arguments["fallback"]:
                raise _daemon_error(down.cause) from None
            reason = f"the memstrata daemon is not running ({down.cause}; `memstrata run` starts it)"
            query, limit, threshold = arguments["query"], arguments["limit"], arguments["threshold"]
            answer = _local_fallback(agent, query, limit, reason, threshold)
        max_tokens = arguments["max_tokens"]
        return answer if max_tokens is None else fit_memories(answer, max_tokens)

    def memory_add(**arguments: Any) -> dict[str, Any]:
        return send(op.Add, arguments)

    def memory_get_all(**arguments: Any) -> dict[str, Any]:
        return send(op.List, arguments)

    def memory_get(**arguments: Any) -> dict[str, Any]:
        return send(op.Get, arguments)

    def memory_update(**arguments: Any) -> dict[str, Any]:
        return send(op.Update, arguments)

    def memory_delete(**arguments: Any) -> dict[str, Any]:
        return send(op.Delete, arguments)

    def memory_history(**arguments: Any) -> dict[str, Any]:
        return send(op.History, arguments)

    def memory_status() -> dict[str, Any]:
        problem = _token_problem(config, agent)
        if problem:  # the store's health needs no token; the agent's own entry does
            return {**_health(config), "agent": None, "permissions": _permissions(config, agent.id), "problem": problem}
        return {**_own_status(ask(lambda c: c.status()), agent.id), "permissions": _permissions(config, agent.id)}

    def memory_core(include_reference: bool, budget: int | None) -> str:
        bundle = core_of(config, agent, include_reference, budget).render()
        problem = _token_problem(config, agent)
        if problem:
            bundle = f"{bundle.rstrip()}\n\n(memstrata: conversation memory is unavailable: {problem})\n"
        return bundle

    tools = [
        Tool(
            "memory_search",
            """Search the conversation memory (L4) for what you may read: public memories, those of
            your projects, and your private ones. Use it before answering from assumptions about people,
            decisions, preferences or the state of work. `degraded: true` means the conversation store was down
            and the results come from your own local files instead, or, on a host of a fleet whose hub is away,
            from this host's copy of the hub's memories (`replica_age_s`: how old it is).""",
            memory_search,
            operation_params(
                op.MemorySearch,
                *("query", "limit", "fallback", "filters", "threshold", "explain", "show_superseded", "trust_min"),
                *("max_tokens", "since", "until"),
                filters=FILTERS_DESCRIPTION,
            ),
            READ_ONLY,
            answer=answers.MemoryAnswer,
        ),
        Tool(
            "memory_add",
            """Remember something in the conversation memory (L4), as this agent. Write what a future
            session (yours or another agent's) should know; never secrets (they are refused). Choose the
            visibility deliberately: private for notes about your own work, project for your team, public only
            for what every agent should know (it needs permission). `queued: true` means the store was down
            and the write will be applied once it is back."""
            f" How long each type lives: {_lifetimes(config)}.",
            memory_add,
            operation_params(
                op.Add,
                *("text", "memory_type", "visibility", "project", "expires", "user_id", "run_id", "actor_id"),
                *("metadata", "supersedes", "trust", "source"),
                memory_type="Kind of memory; it sets how long it lives (default: knowledge; see above).",
                visibility="Who may read it: public (every agent), project (the agents of `project`) or "
                "private (only you). Default: a project named in the text, else private.",
                supersedes="The id of one of your memories that this one replaces (a fact that changed): the old one "
                "is kept, marked superseded, and no longer found by memory_search. Not queued while the store "
                "is down.",
                trust="How far it can be trusted: medium (the default for you) or low (unverified, a guess). "
                "high is the operator's.",
                source="Where it came from: user_direct (the user said it), agent_output (your own conclusion, the "
                "default), tool_result, inferred.",
            ),
            WRITES,
            answer=answers.AddAnswer,
        ),
        Tool(
            "memory_get_all",
            """List every conversation memory (L4) you may read, page by page (follow `next_cursor`). Use it
            to review or audit what is remembered; to answer a question, memory_search is better. `degraded: true`:
            the fleet's hub is away and this host's copy of its memories answered (`replica_age_s`: how old).""",
            memory_get_all,
            operation_params(
                op.List,
                *("limit", "cursor", "filters", "show_superseded", "show_expired", "show_archived"),
                filters=FILTERS_DESCRIPTION,
            ),
            READ_ONLY,
            answer=answers.MemoryPage,
        ),
        Tool(
            "memory_get",
            """One conversation memory (L4) by id: its text, owner, visibility, type, created_at, updated_at and
            expiry. A memory you may not read is answered as not found. `degraded: true`: the fleet's hub is away
            and this host's copy of its memories answered (`replica_age_s`: how old).""",
            memory_get,
            operation_params(
                op.Get, "memory_id", memory_id="The memory's id, as memory_search or memory_add answered."
            ),
            READ_ONLY,
            answer=answers.Memory,
        ),
        Tool(
            "memory_update",
            """Correct one of your own conversation memories (L4): the text is replaced (the old one stays in
            memory_history), the memory keeps its id, visibility, type and created_at, and gets updated_at.
            Only the memory's owner may update it; while the conversation store is down the update is refused and
            nothing changes (try again later).""",
            memory_update,
            operation_params(op.Update, "memory_id", "text", "expires", memory_id=YOUR_MEMORY),
            CHANGES,
            answer=answers.UpdateAnswer,
        ),
        Tool(
            "memory_delete",
            """Delete one of your own conversation memories (L4) that is wrong or no longer true; its history
            (memory_history) keeps what it said. Only the owner may delete it; while the conversation store is down
            the delete is refused and nothing changes.""",
            memory_delete,
            operation_params(op.Delete, "memory_id", memory_id=YOUR_MEMORY),
            CHANGES,
            answer=answers.DeleteAnswer,
        ),
        Tool(
            "memory_history",
            """The changes of one conversation memory (L4) you may read, oldest first: ADD, UPDATE (with the
            old and new text) and DELETE events, also after it was deleted; and `chain`: the memories it
            replaced and the one that replaced it (valid_from, invalid_at), as far as you may read them.""",
            memory_history,
            operation_params(op.History, "memory_id"),
            READ_ONLY,
            answer=answers.HistoryAnswer,
        ),
        Tool(
            "memory_status",
            """Whether the conversation store (L4) is reachable, its write queue, the state of your
            workspace (last commit, files held back by the secret guard), and your permissions: the projects
            you belong to and where you may write (private always, project for your projects, public only
            with permission). Use it when a memory tool reports a problem or answers `degraded`.""",
            memory_status,
            (),
            READ_ONLY,
            answer=AgentStatus,
        ),
        Tool(
            "memory_core",
            """Your L1 core memory: the cluster's shared core, CORE_INDEX, IDENTITY, SOUL and USER, cut at a
            token budget with a visible marker. Read it at the start of a session. It comes from your
            workspace files (edit them to change it), not from the conversation memory.""",
            memory_core,
            (
                Param(
                    "include_reference", bool, "Also load the reference files AGENTS.md and TOOLS.md.", default=False
                ),
                Param(
                    "budget",
                    int,
                    "Token budget (default: the configured core.budget_tokens).",
                    default=None,
                    nullable=True,
                    minimum=1,
                ),
            ),
            READ_ONLY,
            answer=TextAnswer,
        ),
    ]
    for tool in tools:
        tool.description = _one_paragraph(tool.description)
        tool.unknown_arguments = _refuse_unknown(tool.name, agent.id)
    problem = _token_problem(config, agent)
    instructions = f"{INSTRUCTIONS}\n\nNOT AVAILABLE NOW: {problem}" if problem else INSTRUCTIONS
    return StdioServer(name="memstrata", version=__version__, instructions=instructions, tools=tools)
