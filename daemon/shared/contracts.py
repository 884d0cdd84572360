"""The documents the daemon answers with, defined once: the status report and the search answers.

The status document is built in four places (the daemon's snapshot, the
broker's part of it, the offline survey in daemon/front/status.py, the scoped view in
daemon/api/app.py) and read in four (``status.render``, the MCP server's
``memory_status``, ``reindex --vectors``'s wait, and the stdlib skill's
``format_status``).  These TypedDicts say which keys exist; every key is
optional (``total=False``) because the documents differ by who asks (an agent
sees its own part, a caller without a token only health) and by whether the
daemon runs.  The skill cannot import this module (stdlib only, any python3),
so it keeps its own copy of the keys it reads, under a drift test
(tests/daemon/front/test_front.py).

Standard library only, no import of the service: the front reads these.
"""

from __future__ import annotations

from typing import Any, TypedDict

# ---------------------------------------------------------------- status


class DaemonInfo(TypedDict, total=False):
    running: bool
    pid: int
    version: str
    started: str | None
    uptime_s: float
    config: str | None
    socket: str
    state_dir: str
    summary: str
    config_error: str | None
    restart_needed: str | None
    stopped: str | None  # the snapshot's last word: when the daemon stopped
    reason: str  # offline: why no daemon answered
    last_seen: str | None  # offline: when the daemon was last seen (its last snapshot)


class WatcherInfo(TypedDict, total=False):
    mode: str
    reason: str
    roots: list[str]


class IndexReport(TypedDict, total=False):
    path: str
    state: str  # ready, missing (…), refused, unavailable, rebuilding, unusable: …
    error: str
    last_rebuild: Any
    queued_updates: int
    progress: dict
    phase: str
    files: int
    chunks: int
    last_indexed: str | None
    pending_embeddings: int
    vectors: Any
    identity: Any


class AgentReport(TypedDict, total=False):
    id: str
    workspace: str
    files: int
    last_commit: dict | None
    pending_commit: list
    held_back: list
    not_indexed: list
    naming_violations: list  # the first REPORT_LISTED (daemon/files/tracker.py), sorted
    naming_violations_total: int
    skipped: list
    commits_failing: dict | None
    last_error: str | None
    refused: list
    committing: dict | None  # {"done", "total"} files of the commit running now
    history_lost: list  # histories the workspace no longer holds, kept in the daemon's copy (newest first)
    index: IndexReport


# The broker's part; "import" is a keyword, hence the functional form.
ConversationStatus = TypedDict(
    "ConversationStatus",
    {
        "enabled": bool,
        "backend": str,
        "engine": str | None,
        "import": dict | None,
        "index": dict | None,  # Edge: indexed vs unindexed points, the optimize under way / the last one
        "collection": str,
        "url": str | None,
        "reachable": bool,
        "rtt_ms": float | None,
        "breaker": dict,
        "last_error": str,
        "error": str | None,
        "queue": dict,
        "infer_default": bool,
        "registry_error": str | None,
        "tailscale": dict | None,
    },
    total=False,
)


class StatusDocument(TypedDict, total=False):
    """``GET /v1/status``, the snapshot file (state_dir/status.json) and ``memstrata status --json``."""

    daemon: DaemonInfo
    watcher: WatcherInfo
    reconcile: dict
    limits: dict
    vectors: dict
    conversation: ConversationStatus
    agents: list[AgentReport]
    storage: dict
    note: str  # a token that belongs to no agent: why only health is shown


# ---------------------------------------------------------------- answers


class LocalHit(TypedDict, total=False):
    """One L3 result."""

    path: str
    lines: list[int]
    heading: str | None
    snippet: str
    text: str
    score: float
    ranks: dict[str, int]


class SearchAnswer(TypedDict, total=False):
    """``POST /v1/search``: layers.local.search.SearchAnswer as a dict, plus the daemon's degraded note."""

    query: str
    mode: str
    results: list[LocalHit]
    relaxed: bool
    vectors: str
    lists: list[str]
    dates: dict | None
    matched: str | None
    degraded: bool
    reason: str


class Memory(TypedDict, total=False):
    """One L4 memory as the API answers it (a search hit also has ``score``; a local fallback ``source``)."""

    id: str
    memory: str
    agent_id: str
    visibility: str
    project_id: str | None
    memory_type: str
    created_at: str
    updated_at: str | None
    expiration_date: str | None
    score: float | None
    source: str
    path: str | None
    lines: list[int] | None
    heading: str | None
    snippet: str | None


class MemoryAnswer(TypedDict, total=False):
    """``POST /v1/memories/search`` and ``GET /v1/memories``."""

    results: list[Memory]
    degraded: bool
    reason: str
    layer: str
    query: str
    truncated: bool
    vectors: str
    next_cursor: str | None


class AddAnswer(TypedDict, total=False):
    """``POST /v1/memories``: where the memory went and what was stored, or that the write was queued."""

    results: list[dict]  # each {id, memory, event}
    visibility: str
    project_id: str | None
    visibility_inferred: bool
    memory_type: str
    expiration_date: str | None
    infer: bool
    queued: bool
    write_id: str
    reason: str
    ahead: int


def keys_of(contract: type) -> frozenset[str]:
    """Every key a contract allows (for the drift tests)."""
    return frozenset(contract.__annotations__)
