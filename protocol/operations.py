"""Every operation of the daemon's API, once: its fields (with help, bounds, choices) and its route.

One frozen dataclass per operation, made a dataclass when first used (protocol/lazy_dataclass.py: a front
call that sends one operation does not pay for the other sixteen). Its field names, defaults, bounds and
choices are the API's: the daemon's request schemas (daemon/api/requests.py) are derived from them; a
default of None means "left to the daemon" (not sent), as the clients have always done.
:meth:`Operation.request` turns an operation into what travels: ``(method, path, query parameters or None,
JSON body or None)``, leaving out what is unset (None, and a flag left off), ``filters`` as JSON text in a
query string, booleans lower-case there, and the memory id quoted into the path. Nothing is checked when
an operation is built: the daemon checks every value at its API's edge (daemon/api/requests.py, the
routes), and the clients check the query's length before sending (protocol/client.py). So one built with a
long query is a valid value: mem0's REST search, which has no query limit, sends the broker one.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar
from urllib.parse import quote

from protocol.fields import describe, field
from protocol.lazy_dataclass import LazyDataclass, lazy_dataclass
from protocol.limits import ANSWER_TOKENS, L3_RESULTS, L4_PAGE, L4_RESULTS, MAX_QUERY_CHARS
from protocol.vocabulary import (
    AGENT_ID_PATTERN,
    DAY_PATTERN,
    ENTITY_ID_PATTERN,
    MEMORY_ID_PATTERN,
    MEMORY_TYPES,
    ROLES,
    RUN_ID_PATTERN,
    SEARCH_MODES,
    SOURCES,
    TRUST_LEVELS,
    VISIBILITIES,
    WRITE_ID_PATTERN,
)

# (method, path with the query string left out, query parameters, JSON body)
Request = tuple[str, str, "dict[str, Any] | None", "dict[str, Any] | None"]

AGENT_HELP = "The agent asking (its token must be this agent's)."
MEMORY_ID_HELP = "The memory's id (as an add or a search answered it)."
FILTERS_HELP = (
    'mem0\'s filters as a JSON object, e.g. {"user_id": "alice", "rating": {"gte": 4}} (AND/OR/NOT, eq ne in nin '
    "gt gte lt lte contains icontains, *): they narrow what the agent may read, never widen it."
)
THRESHOLD_HELP = "Leave out results whose relevance (0-1, the same scale on L3 and L4) is below this"


def _agent(help: str = AGENT_HELP) -> Any:
    return field(help, pattern=AGENT_ID_PATTERN, max_length=64)


def _memory_id() -> Any:
    return field(MEMORY_ID_HELP, pattern=MEMORY_ID_PATTERN, max_length=64, where="path")


def _query_text() -> Any:
    return field(f"What to look for, in natural language (at most {MAX_QUERY_CHARS} characters).", wire="q")


def _id(help: str) -> Any:
    """An optional agent or project id (the API's ids: at most 64 characters)."""
    return field(help, default=None, pattern=AGENT_ID_PATTERN, max_length=64)


def _entity(help: str) -> Any:
    """mem0's user_id, run_id or actor_id: data about whom a memory is (at most 128 characters)."""
    return field(help, default=None, pattern=ENTITY_ID_PATTERN, max_length=128)


def _only_type() -> Any:
    """The filter by memory type a delete-all and a cleanup share (``type`` on the wire)."""
    return field("Only memories of this type.", default=None, wire="type", choices=MEMORY_TYPES)


def _only_visibility() -> Any:
    """The filter by visibility a delete-all and a cleanup share."""
    return field("Only memories of this visibility.", default=None, choices=VISIBILITIES)


def _day(help: str) -> Any:
    """A calendar day, YYYY-MM-DD."""
    return field(help, default=None, pattern=DAY_PATTERN, max_length=10)


@lazy_dataclass(frozen=True)
class Operation(LazyDataclass):
    """An operation of the API; subclasses name their route in ``METHOD`` and ``PATH``."""

    METHOD: ClassVar[str] = "GET"
    PATH: ClassVar[str] = ""

    def request(self) -> Request:
        """What travels: the path with its fields filled in, and the rest in the query or the body."""
        path_values: dict[str, str] = {}
        params: dict[str, Any] = {}
        body: dict[str, Any] = {}
        for item in describe(type(self)):
            value = getattr(self, item.name)
            if value is None or (value is False and item.default is False):
                continue  # unset: the daemon decides (a flag left off is off)
            if item.where == "path":
                path_values[item.wire] = quote(str(value), safe="")
            elif item.where == "query":
                if isinstance(value, bool):
                    params[item.wire] = "true" if value else "false"
                elif isinstance(value, dict):
                    params[item.wire] = json.dumps(value, ensure_ascii=False)
                else:
                    params[item.wire] = value
            else:
                body[item.wire] = value
        path = self.PATH.format(**path_values)
        sends_body = self.METHOD in ("POST", "PUT")
        return self.METHOD, path, params or None, body if sends_body else None


# ---------------------------------------------------------------- searches


@lazy_dataclass(frozen=True)
class Search(Operation):
    """An L3 search of the agent's own index (POST /v1/search; the query in the body: a URL has no room)."""

    METHOD: ClassVar[str] = "POST"
    PATH: ClassVar[str] = "/v1/search"

    agent: str = _agent()
    query: str = _query_text()
    layer: str | None = field("Only this layer: core, daily or longterm.", default=None, max_length=1024)
    path: str | None = field("Only files matching this glob (e.g. 'memory/2026-11-*').", default=None, max_length=1024)
    since: str | None = field("Only daily notes from this day on (YYYY-MM-DD).", default=None, max_length=1024)
    until: str | None = field("Only daily notes up to this day (YYYY-MM-DD).", default=None, max_length=1024)
    mode: str = field(
        "How to rank: auto (hybrid when vectors exist, else full-text), fts, vector or hybrid.",
        default="auto",
        choices=SEARCH_MODES,
    )
    limit: int = field("Most results returned.", default=L3_RESULTS.default, results=L3_RESULTS)
    explain: bool = field("Say why each result was returned (the ranked lists it came from).", default=False)
    threshold: float | None = field(
        f"{THRESHOLD_HELP}; on L3 without vectors only full matches stay.", default=None, low=0, high=1
    )
    min_score: float | None = field(
        "Leave out results whose confidence is below this (0-1: the measured chance that a result is the passage "
        "that answers; of what 0.5 kept on the two recall sets, 75-76 in 100 were).",
        default=None,
        low=0,
        high=1,
    )
    max_tokens: int | None = field(
        "Cut the answer to about this many tokens: the passage that matched in each result first (best first, "
        "with its heading and file), whole sections where room is left.",
        default=None,
        results=ANSWER_TOKENS,
    )


@lazy_dataclass(frozen=True)
class MemorySearch(Operation):
    """An L4 search of the memories the agent may read; ``fallback``: the local index answers while L4 is down."""

    METHOD: ClassVar[str] = "POST"
    PATH: ClassVar[str] = "/v1/memories/search"

    agent: str = _agent()
    query: str = _query_text()
    limit: int = field("Most results returned.", default=L4_RESULTS.default, results=L4_RESULTS)
    fallback: bool = field(
        "While the conversation store is down, answer from the local index (marked degraded; not with filters).",
        default=True,
    )
    filters: dict[str, Any] | None = field(FILTERS_HELP, default=None)
    threshold: float | None = field(f"{THRESHOLD_HELP}; 0.1 drops most unrelated ones.", default=None, low=0, high=1)
    explain: bool = field("Say why each result was returned (phase, visibility, scores).", default=False)
    show_expired: bool = field("Also memories past their expiration date (until the cleanup).", default=False)
    show_superseded: bool = field(
        "Also memories another one has replaced (state superseded, with invalid_at and superseded_by).",
        default=False,
    )
    trust_min: str | None = field(
        "Only memories trusted this much or more: high (the operator's), medium (agents' by default), low. "
        "Equal scores rank by trust anyway.",
        default=None,
        choices=TRUST_LEVELS,
    )
    max_tokens: int | None = field(
        "Cut the answer to about this many tokens, best results first (what was left out is counted).",
        default=None,
        results=ANSWER_TOKENS,
    )
    since: str | None = _day("Only memories made on or after this day, YYYY-MM-DD (the daemon's local day).")
    until: str | None = _day("Only memories made on or before this day, YYYY-MM-DD (the daemon's local day).")


# ---------------------------------------------------------------- writing and editing memories


@lazy_dataclass(frozen=True)
class Add(Operation):
    """An L4 write; what is left None the daemon decides (type, placement, lifetime, infer, trust, source).

    ``user_id``/``run_id``/``actor_id`` and ``metadata`` are data kept with the memory (mem0's meaning);
    ``supersedes`` names a memory the new one replaces (kept, marked superseded, out of searches).
    """

    METHOD: ClassVar[str] = "POST"
    PATH: ClassVar[str] = "/v1/memories"

    agent: str = _agent()
    text: str = field("What to remember: one self-contained fact, decision or preference.")
    memory_type: str | None = field(
        "Memory type; it sets how long the memory lives (default: knowledge).",
        default=None,
        wire="type",
        choices=MEMORY_TYPES,
    )
    visibility: str | None = field(
        "Who may read it (default: a project whose keyword appears in the text, if the agent is a member, "
        "else private).",
        default=None,
        choices=VISIBILITIES,
    )
    project: str | None = _id("Project of a project memory (implies visibility project).")
    expires: str | None = _day("Last day the memory is shown, YYYY-MM-DD, today or later (default: by type).")
    infer: bool | None = field("Let the LLM extract and merge (needs conversation.llm).", default=None)
    write_id: str | None = field(
        "Idempotency key: a retry with the same id is written once.",
        default=None,
        pattern=WRITE_ID_PATTERN,
        min_length=1,
        max_length=128,
    )
    role: str | None = field("The speaker of a conversation turn (mem0's role).", default=None, choices=ROLES)
    user_id: str | None = _entity("The end user the memory is about (mem0's user_id: data, not identity).")
    run_id: str | None = _entity("The run or conversation it belongs to (mem0's run_id).")
    actor_id: str | None = _entity("Who said it (mem0's actor_id).")
    metadata: dict[str, Any] | None = field(
        'Custom metadata as a JSON object, e.g. {"category": "movies"} (filterable).', default=None
    )
    supersedes: str | None = field(
        "One of the agent's own memories this one replaces: it is kept, marked superseded, and leaves searches.",
        default=None,
        pattern=MEMORY_ID_PATTERN,
        max_length=64,
    )
    trust: str | None = field(
        "How far it is trusted (default: high with the administrator's token, e.g. as root; medium with the "
        "agent's, which may lower it, never raise it; low: unverified).",
        default=None,
        choices=TRUST_LEVELS,
    )
    source: str | None = field(
        "Where the text came from (default: operator with the administrator's token, else agent_output).",
        default=None,
        choices=SOURCES,
    )


@lazy_dataclass(frozen=True)
class OneMemory(Operation):
    """An operation on one memory, named by its id in the path, for an agent (who may or may not own it)."""

    agent: str = _agent()
    memory_id: str = _memory_id()


@lazy_dataclass(frozen=True)
class Update(OneMemory):
    """Replace the text of one of the agent's own memories (re-embedded; created_at kept)."""

    METHOD: ClassVar[str] = "PUT"
    PATH: ClassVar[str] = "/v1/memories/{memory_id}"

    text: str = field("The memory's corrected text, replacing the old one.")
    expires: str | None = _day("A new last day it is shown, YYYY-MM-DD, today or later.")


@lazy_dataclass(frozen=True)
class RestoreMemory(OneMemory):
    """Bring an archived (faded) or superseded memory of the agent's back to valid."""

    METHOD: ClassVar[str] = "POST"
    PATH: ClassVar[str] = "/v1/memories/{memory_id}/restore"


@lazy_dataclass(frozen=True)
class Delete(OneMemory):
    """Delete one of the agent's own memories (another's is refused)."""

    METHOD: ClassVar[str] = "DELETE"
    PATH: ClassVar[str] = "/v1/memories/{memory_id}"


@lazy_dataclass(frozen=True)
class DeleteAll(Operation):
    """Delete every one of the agent's own memories matching the filters (``dry_run``: only say which)."""

    METHOD: ClassVar[str] = "DELETE"
    PATH: ClassVar[str] = "/v1/memories"

    agent: str = _agent()
    memory_type: str | None = _only_type()
    visibility: str | None = _only_visibility()
    project: str | None = _id("Only memories of this project.")
    dry_run: bool | None = field("Say which would be deleted, delete nothing.", default=None)
    user_id: str | None = _entity("Only memories about this end user.")
    run_id: str | None = _entity("Only memories of this run.")
    actor_id: str | None = _entity("Only memories said by this actor.")


# ---------------------------------------------------------------- reading memories


@lazy_dataclass(frozen=True)
class List(Operation):
    """One page of the memories the agent may read (GET /v1/memories); ``cursor`` resumes a listing."""

    METHOD: ClassVar[str] = "GET"
    PATH: ClassVar[str] = "/v1/memories"

    agent: str = _agent()
    limit: int = field("Most memories in this page.", default=L4_PAGE.default, results=L4_PAGE)
    cursor: str | None = field("Resume where a listing ended (its next_cursor).", default=None, max_length=1024)
    filters: dict[str, Any] | None = field(FILTERS_HELP, default=None)
    show_superseded: bool = field("Also memories another one has replaced (marked superseded).", default=False)
    show_expired: bool = field("Also memories past their expiration date (until the cleanup).", default=False)
    show_archived: bool = field("Also memories the cleanup archived as faded (restorable).", default=False)


@lazy_dataclass(frozen=True)
class Get(OneMemory):
    """One memory by id, if the agent may read it."""

    METHOD: ClassVar[str] = "GET"
    PATH: ClassVar[str] = "/v1/memories/{memory_id}"


@lazy_dataclass(frozen=True)
class History(OneMemory):
    """A memory's history (mem0's ADD/UPDATE/DELETE events, oldest first, and what superseded it)."""

    METHOD: ClassVar[str] = "GET"
    PATH: ClassVar[str] = "/v1/memories/{memory_id}/history"


# ---------------------------------------------------------------- the daemon


@lazy_dataclass(frozen=True)
class Status(Operation):
    """The daemon's status document (with an agent's token, its own workspace; with none, the shared parts)."""

    METHOD: ClassVar[str] = "GET"
    PATH: ClassVar[str] = "/v1/status"


@lazy_dataclass(frozen=True)
class Fleet(Operation):
    """The fleet at a glance, on the hub: each host's last report and when it reached the hub (the administrator's)."""

    METHOD: ClassVar[str] = "GET"
    PATH: ClassVar[str] = "/v1/admin/fleet"


@lazy_dataclass(frozen=True)
class Reindex(Operation):
    """Bring an agent's L3 index (or every agent's) up to date with its files; ``rebuild`` starts it afresh."""

    METHOD: ClassVar[str] = "POST"
    PATH: ClassVar[str] = "/v1/reindex"

    agent: str | None = _id("Only this agent (default: every agent).")
    rebuild: bool = field("Rebuild the index from the files instead of updating it.", default=False)


# ---------------------------------------------------------------- the administrator's maintenance


@lazy_dataclass(frozen=True)
class Cleanup(Operation):
    """Delete expired memories (``execute``) or list what would go; narrowed by agent, placement and type."""

    METHOD: ClassVar[str] = "POST"
    PATH: ClassVar[str] = "/v1/admin/cleanup"

    execute: bool = field("Delete; without it, only list what would be deleted.")
    max_age_days: int | None = field("Also memories older than this many days.", default=None, low=0, high=36_500)
    include_permanent: bool | None = field("With max_age_days: permanent types too.", default=None)
    agent: str | None = _id("Only this agent's memories.")
    visibility: str | None = _only_visibility()
    project: str | None = _id("Only memories of this project.")
    memory_type: str | None = _only_type()


@lazy_dataclass(frozen=True)
class Consolidate(Operation):
    """Merge near-duplicate memories as one batch (``execute``), or show the plan; ``undo`` reverts a run."""

    METHOD: ClassVar[str] = "POST"
    PATH: ClassVar[str] = "/v1/admin/consolidate"

    execute: bool | None = field("Apply the plan; without it, only show it.", default=None)
    agent: str | None = _id("Only this agent's memories.")
    max_share: float | None = field(
        "Refuse a plan touching more than this share of an agent's memories (0-1].",
        default=None,
        low=0,
        high=1,
        low_exclusive=True,
    )
    undo: str | None = field("Revert this run (its id).", default=None, pattern=RUN_ID_PATTERN, max_length=32)
    force: bool | None = field("Apply even past max_share.", default=None)


@lazy_dataclass(frozen=True)
class Backup(Operation):
    """Snapshot the daemon's state (the L4 store, the queue, the indexes' sources) into a backup file."""

    METHOD: ClassVar[str] = "POST"
    PATH: ClassVar[str] = "/v1/admin/backup"

    keep: int | None = field("Keep this many newest backups (older ones are removed).", default=None, low=1)


@lazy_dataclass(frozen=True)
class Restore(Operation):
    """Put a backup back in place of the current state (the replaced state is kept)."""

    METHOD: ClassVar[str] = "POST"
    PATH: ClassVar[str] = "/v1/admin/restore"

    path: str = field("The backup file to restore.", min_length=1, max_length=4096)


OPERATIONS: tuple[type[Operation], ...] = (
    Search,
    MemorySearch,
    Add,
    Update,
    RestoreMemory,
    Delete,
    DeleteAll,
    List,
    Get,
    History,
    Status,
    Fleet,
    Reindex,
    Cleanup,
    Consolidate,
    Backup,
    Restore,
)
