"""The daemon's own documents (the status report), and the answers it shares with every client, re-exported.

The answers a client reads (an L4 memory, a search, a page of the listing, a write's, an update's, a
delete's and a history's answer, the L3 search answer) are defined once in protocol/answers.py, standard
library only: the CLI, the MCP server (which declares its tools' output schemas from them) and the skill's
copy of the protocol package read them there; this module re-exports them for the daemon's builders.

The status document stays here, the daemon's: it is built in four places (the daemon's snapshot, the
broker's part of it, the offline survey in daemon/front/status.py, the scoped view in
daemon/api/app.py) and read in four (``status.render``, the MCP server's
``memory_status``, ``reindex --vectors``'s wait, and the stdlib skill's
``format_status``).  These TypedDicts say which keys exist; every key is
optional (``total=False``) because the documents differ by who asks (an agent
sees its own part, a caller without a token only health) and by whether the
daemon runs.  The records inside them (a commit, a line held back, …) carry
every key.  The skill does not import this module, so it keeps its own list of the keys it reads,
under a drift test (tests/daemon/front/test_front.py).  mypy holds the builders and readers to
these types (strictly: see pyproject.toml).

Standard library only (and layers/local/shapes.py and protocol/, stdlib only too), no import of
the service: the front reads these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from layers.local.shapes import IndexStats

# The answers every client reads: protocol/answers.py's, re-exported (one definition)
from protocol.answers import AddAnswer as AddAnswer
from protocol.answers import LocalFallbackAnswer as LocalFallbackAnswer
from protocol.answers import LocalHit as LocalHit
from protocol.answers import Memory as Memory
from protocol.answers import MemoryAnswer as MemoryAnswer
from protocol.answers import MemoryPage as MemoryPage
from protocol.answers import NamedDays as NamedDays
from protocol.answers import SearchAnswer as SearchAnswer

# ---------------------------------------------------------------- status


class IndexProgress(TypedDict, total=False):
    """A rebuild or sync under way: files done of the total (empty when none runs)."""

    done: int
    total: int
    phase: str  # rebuild, sync


class StartingInfo(TypedDict, total=False):
    """How far the daemon's start has got (daemon/files/starting.py), while the agents are being checked
    (only ``text`` before the loop began counting)."""

    files: int
    checked: int
    agent: str | None
    step: str
    index: IndexProgress | None  # the index being built now: how far it got
    text: str


class WorkspaceRefusal(TypedDict):
    """A workspace path refused (daemon/common/workspace_guard.py): never watched, nothing written there."""

    agent: str
    path: str
    reason: str


class DaemonInfo(TypedDict, total=False):
    running: bool
    pid: int
    version: str
    started: str | None
    uptime_s: float
    as_of: str | None  # when the loop built this document (the parts that move alone are fresh)
    age_s: float  # how long ago: over a second when the loop was too busy to build one for this call
    config: str | None
    socket: str
    state_dir: str
    summary: str
    config_error: str | None
    restart_needed: list[str] | None  # settings the last SIGHUP read that only a restart applies
    workspaces_refused: list[WorkspaceRefusal] | None  # workspace paths no agent may have (the administrator's view)
    starting: StartingInfo  # only while the daemon starts
    stopped: str | None  # the snapshot's last word: when the daemon stopped
    reason: str  # offline: why no daemon answered
    last_seen: str | None  # offline: when the daemon was last seen (its last snapshot)


class WatcherInfo(TypedDict, total=False):
    mode: str
    reason: str
    roots: list[str]


class ReconcileInfo(TypedDict, total=False):
    """The last full pass over the workspaces (daemon/files/reconcile.py)."""

    time: str | None
    repaired: int
    duration_ms: float | None
    interval_s: float


class Limits(TypedDict):
    """The settings ``status`` shows (daemon/common/settings.py ``limits_of``)."""

    max_file_mb: float
    debounce_ms: int
    quiet_period_s: float
    max_delay_s: float


class StorageProblem(TypedDict, total=False):
    """One place whose writes fail (daemon/common/storage.py); a caller it does not concern sees
    only ``place``, ``since``, ``failures`` and ``retry_in_s`` (daemon/api/app.py)."""

    place: str
    agent: str | None
    path: str | None
    error: str
    since: str
    failures: int
    retry_in_s: float


class StorageReport(TypedDict):
    ok: bool
    problems: list[StorageProblem]


class LastRebuild(TypedDict):
    time: float  # time.time()
    reason: str
    seconds: float


class IndexReport(IndexStats, total=False):
    """An agent's index: its statistics (layers/local/shapes.py) and the daemon's view of it."""

    path: str
    state: str  # ready, missing (…), refused, unavailable, rebuilding, unusable: …, not open
    error: str | None
    last_rebuild: LastRebuild | None
    queued_updates: int
    progress: IndexProgress
    phase: str


class LastCommit(TypedDict):
    sha: str  # short
    time: str
    subject: str


class HeldBack(TypedDict):
    """A line a never_store pattern keeps out of git."""

    path: str
    line: int
    kind: str


class PathReason(TypedDict):
    path: str
    reason: str


class CommitsFailing(TypedDict):
    reason: str | None
    attempts: int
    since: str


class CommitProgress(TypedDict):
    """The commit running now: files committed of those found (0 of 0 while it lists them)."""

    done: int
    total: int


class LostHistory(TypedDict):
    """A history the workspace no longer holds, kept in the daemon's copy."""

    commit: str  # memstrata's last commit in it (short)
    subject: str
    time: str
    found: str  # when the daemon found it gone
    copy: str  # the copy's path


class AgentReport(TypedDict, total=False):
    id: str
    workspace: str
    files: int
    last_commit: LastCommit | None
    pending_commit: bool  # changes seen and not yet committed (or a commit of them running)
    held_back: list[HeldBack]
    not_indexed: list[PathReason]
    naming_violations: list[str]  # the first REPORT_LISTED (daemon/files/tracker.py), sorted
    naming_violations_total: int
    skipped: list[PathReason]
    commits_failing: CommitsFailing | None
    last_error: str | None
    refused: list[PathReason]
    committing: CommitProgress | None
    history_lost: list[LostHistory]  # newest first
    recovered: list[str]  # what a power cut broke and the daemon put right, newest last (daemon/files/recovery.py)
    commits_total: int  # since the daemon started
    commit_failures_total: int  # failed commit attempts since the daemon started
    index: IndexReport


class QueueStatus(TypedDict):
    """The L4 write queue (daemon/conversation/status_section.py); a figure the queue cannot give now is None."""

    depth: int | None
    oldest_age_s: float | None
    writable: bool
    replayed: int
    skipped_already_written: int
    replay_rate_per_s: float | None
    eta_s: float | None
    set_aside: int | None
    set_aside_recent: list[dict[str, Any]] | None  # write ids, agents and reasons, never the text
    # the write-ahead log (issue 45): writes in the store and answered, whose rows stay until the store's
    # next flush; the flush's last failure ("" when it worked): the rows stay in the log meanwhile
    unflushed: int | None
    checkpoints: int
    checkpoint_error: str


class TailscaleView(TypedDict, total=False):
    """What ``tailscale status`` says of the L4 server's peer (daemon/conversation/tailscale.py)."""

    peer: str
    available: bool
    reason: str
    host_name: Any  # the rest as tailscale's JSON has them
    online: Any
    last_seen: Any
    cur_addr: Any
    relay: Any


# The broker's part; "import" is a keyword, hence the functional form.  The parts
# typed dict[str, Any] are what the L4 layer reports (layers/conversation/), as it has them.
ConversationStatus = TypedDict(
    "ConversationStatus",
    {
        "enabled": bool,
        "backend": str,
        "engine": str | None,
        "import": dict[str, Any] | None,
        "index": dict[str, Any] | None,  # Edge: indexed vs unindexed points, the optimize under way / the last one
        "collection": str,
        "url": str | None,
        "reachable": bool,
        "rtt_ms": float | None,
        "breaker": dict[str, Any],
        "last_error": str | None,
        "error": str | None,
        "queue": QueueStatus,
        "infer_default": bool,
        "registry_error": str | None,
        "tailscale": TailscaleView | None,
        "consolidation": dict[str, Any] | None,  # a consolidation under way: phase, done, total, since
        "use": dict[str, Any],  # hits waiting to be written, written, dropped (daemon/conversation/access.py)
        # the hub (fleet.listen): its change feed for the spokes' replicas (daemon/conversation/feed.py); else None
        "feed": dict[str, Any] | None,
    },
    total=False,
)


class HubConversationStatus(ConversationStatus, total=False):
    """A spoke's section (``conversation.backend: hub``, daemon/conversation/hub.py): the hub's part besides."""

    hub: dict[str, Any]  # this host as the hub knows it, the last contact, the replay's last failed send
    replica: dict[str, Any]  # its replica of what its agents may read on the hub (daemon/conversation/hub_replica.py)


class SyncRefused(TypedDict):
    """A ref the remote refused (its ref moved: someone rewrote it there); kept back, never forced."""

    ref: str  # the copy's (refs/heads/daemon, refs/lost/...)
    remote_ref: str  # refs/memstrata/<host>/<agent>/...
    sha: str  # what was offered
    reason: str  # git's word: "fetch first", "non-fast-forward", "remote rejected: ..."
    since: str  # when it was first refused (ISO 8601)


class SyncRewound(TypedDict):
    """A ref the remote had moved back (or lost) behind what it acknowledged; a push brought it forward again."""

    remote_ref: str  # refs/memstrata/<host>/<agent>/...
    acknowledged: str  # the commit the remote had acknowledged there
    found: str  # what it held instead (a commit as git abbreviated it; "" for no ref)
    sha: str  # the commit pushed there since
    at: str  # when (ISO 8601)


class SyncAgent(TypedDict):
    """One agent's history on the remote: how far behind, what it last acknowledged."""

    id: str
    behind_commits: int  # commits of the daemon's history no acknowledged ref reaches
    behind_lost: int  # lost histories (refs/lost/) not acknowledged yet
    remote_ref: str  # where the daemon's history goes: refs/memstrata/<host>/<agent>/line/<n>
    last_pushed: str | None  # the commit the remote last acknowledged on that ref
    pushed_at: str | None  # when this daemon last had a push of it acknowledged (None: not since its start)
    refused: list[SyncRefused]
    rewound: list[SyncRewound]  # since this daemon started, the latest per ref


class SharedLocalEdit(TypedDict):
    """A spoke's edit of its copy of the shared core: never pushed, the hub's copy written back."""

    count: int  # edits found since the daemon started
    at: str  # the last one found (ISO 8601)
    files: list[str]  # what it changed, added or removed (relative to shared/)
    note: str
    kept_in: str | None  # where the edited files were copied before the hub's copy was written back


class SharedCoreStatus(TypedDict, total=False):
    """The cluster's shared core (refs/memstrata/shared/core): pushed by the hub, fetched by the spokes."""

    role: str  # hub | spoke (fleet.role)
    ref: str
    dir: str  # <main workspace>/shared
    commit: str | None  # what this host's shared/ holds (spoke) or the remote last took (hub)
    date: str | None  # that commit's date, as the hub made it
    age_s: float | None  # how old that commit is now
    poll_s: float  # a spoke asks the remote this often
    last_fetch: str | None  # spoke: the last fetch the remote answered
    last_push: str | None  # hub: the last push the remote took (or found it had)
    reachable: bool | None  # None: not tried yet
    last_error: str | None
    failing_since: str | None
    retry_in_s: float | None
    waiting: str | None  # why there is nothing to read or push yet (no core on the remote, no shared/)
    refused: dict[str, str] | None  # hub: the remote refused the push (sha, reason, since); never forced
    held_back: list[str]  # hub: files of shared/ holding a secret, never pushed
    skipped: list[str]  # spoke: symbolic links and submodules of the commit, not written
    local_edit: SharedLocalEdit | None  # spoke: an edit of shared/ here, not propagated


class SyncStatus(TypedDict, total=False):
    """``git.remote``: the history copies pushed to the central remote (daemon/files/sync.py)."""

    host: str  # this host's name there (fleet.host)
    remote: str  # the URL, any password masked
    reachable: bool | None  # None: not tried yet
    last_error: str | None  # why the last attempt failed
    failing_since: str | None  # since when it has been failing
    last_contact: str | None  # the last push the remote answered
    retry_in_s: float | None  # the next attempt, while failing
    report: dict[str, Any]  # this host's report (refs/memstrata/<host>/status): pushed_at, error
    agents: list[SyncAgent]
    shared_core: SharedCoreStatus  # the shared core's side of it (daemon/files/shared_sync.py)


class StatusCounts(TypedDict):
    """What anyone may know of the agents: how many, and how they are (daemon/api/app.py)."""

    agents: int
    files: int
    held_back: int
    pending_commits: int
    agents_with_errors: int


class StatusDocument(TypedDict, total=False):
    """``GET /v1/status``, the snapshot file (state_dir/status.json) and ``memstrata status --json``."""

    daemon: DaemonInfo
    watcher: WatcherInfo
    reconcile: ReconcileInfo
    limits: Limits
    vectors: dict[str, Any]  # the embedder's (layers/local/models/vectors.py) and its worker's state
    conversation: ConversationStatus
    agents: list[AgentReport]
    storage: StorageReport
    sync: SyncStatus  # only with git.remote set
    access: str  # the API's: whose view this is
    counts: StatusCounts  # the API's
    note: str  # a token that belongs to no agent: why only health is shown


# ---------------------------------------------------------------- the answers' helpers


def keys_of(contract: type) -> frozenset[str]:
    """Every key a contract allows, its bases' included (for the drift tests)."""
    return frozenset(contract.__annotations__)


def local_answer(query: str, reason: str, local: Mapping[str, Any]) -> dict[str, Any]:
    """A conversation search answered from the agent's L3 index instead (``local``: its search
    answer), marked degraded with the ``reason``: the one shape of the daemon's fallback and the
    MCP server's own."""
    return {
        "layer": "local",
        "degraded": True,
        "reason": reason,
        "query": query,
        "results": [local_view(r) for r in local["results"]],
        "vectors": local.get("vectors"),
    }


def local_view(result: LocalHit) -> dict[str, Any]:
    """An L3 hit in the shape of a conversation result, so clients handle one list (the daemon's
    fallback, daemon/conversation/reads.py, and the MCP server's own, daemon/front/mcp_server.py)."""
    return {
        "memory": result["text"],
        "snippet": result.get("snippet"),
        # a memory's score is on 0-1; an L3 hit's fused score is not, its confidence is
        # (layers/local/ranking/calibration.py)
        "score": result.get("confidence", result.get("score")),
        "source": "local",
        "path": result.get("path"),
        "lines": result.get("lines"),
        "heading": result.get("heading"),
        "focus": result.get("focus"),
        **({"superseded_by": result["superseded_by"]} if result.get("superseded_by") else {}),
    }


def fit_memories(answer: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """A memory search's answer cut to ``max_tokens`` (estimated, layers/common/textcost.py): its results best
    first while they fit, what did not fit counted in ``budget``, as an L3 answer's is."""
    from layers.common.textcost import estimate_tokens

    left, kept, left_out = max_tokens, [], 0
    for result in answer.get("results", []):
        cost = estimate_tokens(str(result.get("memory", "")))
        if cost <= left:
            kept.append(result)
            left -= cost
        else:
            left_out += 1
    budget = {"max_tokens": max_tokens, "used": max_tokens - left, "whole": len(kept), "left_out": left_out}
    return {**answer, "results": kept, "budget": budget}
