"""The daemon's answers as every client sees them, defined once: the types each edge is checked against.

The daemon builds these documents (daemon/conversation/reads.py and writes.py for L4, L3's
layers/local/ranking/hybrid_search.py for a local search), the front reads them (the CLI's printing, the
MCP server), and the MCP server declares each tool's ``outputSchema`` from them
(:func:`protocol.json_schema.json_schema`), so a key added to an answer is added here and nowhere else.
daemon/common/contracts.py re-exports them beside what stays the daemon's own (the status document).

Standard library TypedDicts that mypy checks strictly and Python 3.10 reads (no ``NotRequired``: a key
that may be absent is in a ``total=False`` class).  A value the store reads from a memory's payload is
``X | None``: a memory written by an older version, or imported from mem0, may lack it.
"""

from __future__ import annotations

from typing import Any, TypedDict

# A JSON object as the daemon answers it (what protocol.client returns before a caller narrows it).
Answer = dict[str, Any]


# ---------------------------------------------------------------- L3: a search of an agent's own files

# The days a query named, and the words they were read from ("from" is a keyword, hence the functional form).
NamedDays = TypedDict("NamedDays", {"since": str, "until": str, "from": list[str], "reference": str})


class LocalHit(TypedDict, total=False):
    """One L3 result; ``ranks`` only when the search was asked to explain itself."""

    text: str
    snippet: str
    score: float
    source: str  # "local"
    path: str
    lines: list[int]  # the chunk's first and last line
    heading: str | None
    focus: list[int] | None  # the line holding the query's rarest terms (first, last); None when no line has one
    ranks: dict[str, int]  # list name -> the result's rank in it
    passage: list[int]  # the item or paragraph holding the focus line (first, last): what matched
    passage_why: str  # with explain: why the passage is those lines (the item, or a conversation's reply)
    told: str  # with explain: the line whose own time words, read in its note's time, name days inside the question's
    whole: bool  # a max_tokens answer: the text is the whole section (else only the passage)
    superseded_by: str  # a question about the present: the newer note's line (file:line) stating this anew
    relevance: float | None  # with a threshold or explain: the calibrated cosine with the query (None: no vector)
    confidence: float  # the chance (0-1) that this is the passage that answers (layers/local/ranking/calibration.py)
    cosine: float  # with explain, when the query had a vector: the model's cosine with the result's best passage


class Budget(TypedDict):
    """How a ``max_tokens`` answer spent its budget (layers/local/ranking/budget.py; an L4 search's too)."""

    max_tokens: int
    used: int  # estimated tokens of what the results hold (text, heading, path)
    whole: int  # results given as their whole section
    left_out: int  # results that did not fit


class Embedded(TypedDict):
    """How much of the index the vector lists could search: a first index is searched while it is embedded."""

    chunks: int
    with_vectors: int


class MinScore(TypedDict):
    """A least confidence asked of an L3 search's results (layers/local/ranking/calibration.py)."""

    value: float
    dropped: int  # results left out


class Threshold(TypedDict):
    """A relevance threshold on an L3 search: the same scale as L4's (layers/local/models/vectors.py)."""

    value: float
    applied: str  # "relevance", or "full matches only: why" (no query vector: nothing to measure)
    dropped: int  # results left out


class SearchAnswer(TypedDict):
    """An L3 search's answer (``POST /v1/search``): its results, and how they were found."""

    query: str
    mode: str
    results: list[LocalHit]
    relaxed: bool  # no chunk had every term: the lexical list matched any of them
    vectors: str  # "used", or "unavailable: why"
    lists: list[str]  # the ranked lists that contributed
    dates: NamedDays | None  # the day range the query named
    matched: str | None  # lexical side: "all" terms, "some" (relaxed), "none"; None when not asked
    embedded: Embedded | None  # when vectors were used: how many chunks they covered
    threshold: Threshold | None  # when one was given: how it was applied
    budget: Budget | None  # when max_tokens was given: how the answer spent it
    min_score: MinScore | None  # when one was given: how many results had less confidence
    ranked_newest: int | None  # more chunks held every term than this: BM25 ranked the newest this many


class LocalFallbackAnswer(SearchAnswer, total=False):
    """``memstrata search --layer all`` while the daemon is down: the L3 answer standing in for L4's
    (the daemon's own stand-in is a :class:`MemoryAnswer` with ``layer: local``)."""

    layer: str  # "local"
    degraded: bool
    reason: str


# ---------------------------------------------------------------- L4: conversation memory


class Degraded(TypedDict, total=False):
    """What a get or a listing adds when a spoke's replica of the hub answered it, the hub away
    (daemon/conversation/hub_replica.py); never in a search's results, each a memory."""

    degraded: bool
    reason: str  # why: the hub unreachable, answered from the replica
    replica_age_s: float | None  # since the replica last heard the hub's feed


class Memory(Degraded, total=False):
    """One L4 memory as the API answers it (layers/conversation/adapters/store.py ``memory_view``).

    A search hit also has ``score`` and ``phase`` (``score_details`` with explain); a result of the L3
    fallback (daemon/common/contracts.py ``local_view``) only ``memory``, ``snippet``, ``score``,
    ``source: local``, ``path``, ``lines``, ``heading``, ``focus`` and perhaps ``superseded_by``.
    """

    id: str
    memory: str
    agent_id: str | None
    visibility: str | None  # public, project or private
    project_id: str | None
    memory_type: str | None
    created_at: str | None
    updated_at: str | None
    expiration_date: str | None  # the day it expires (ISO date), None: never
    expires_at: float | None  # the same moment in epoch seconds (what the store filters on)
    hash: str | None  # mem0's hash of the text
    score: float | None
    user_id: str | None  # mem0's ids: data about the memory, never the caller's identity
    run_id: str | None
    actor_id: str | None
    role: str | None
    metadata: dict[str, Any]  # the caller's own keys
    write_id: str | None  # the write that made it (a retry with the same id finds it)
    phase: str
    score_details: dict[str, Any]  # with explain: phase, why visible, cosine, relevance, role weight, importance
    valid_from: str | None  # its validity window (layers/conversation/policy/validity.py)
    invalid_at: str | None
    superseded_by: str | None
    state: str  # valid, superseded or archived
    archived: str | None
    restored_at: str | None  # when an archived memory was brought back (its age counts from there)
    access_count: int  # decay by use (layers/conversation/policy/decay.py)
    last_accessed: str | None
    importance: float
    trust: str  # high, medium or low (layers/conversation/policy/rules.py)
    provenance: str | None  # the write's source: user_direct, agent_output, tool_result, inferred, operator
    source: str  # conversation, or local for the L3 fallback's
    path: str | None
    lines: list[int] | None
    heading: str | None
    snippet: str | None
    focus: list[int] | None


class MemoryAnswer(TypedDict, total=False):
    """``POST /v1/memories/search``: the memories the caller may read, best first; ``degraded`` with
    ``layer: local`` when the store was down and the agent's own L3 index answered instead."""

    results: list[Memory]
    layer: str  # conversation, or local
    degraded: bool
    reason: str  # degraded: why
    replica_age_s: float | None  # degraded, answered by a spoke's replica of the hub: since it last heard the hub
    query: str
    vectors: str | None  # degraded: the L3 search's vectors
    budget: Budget  # with max_tokens: how the answer spent it
    truncated: bool  # never in a search's: a listing's (MemoryPage), which the skill reads as this shape
    next_cursor: str | None  # the same


class MemoryPage(Degraded):
    """``GET /v1/memories``: one page of what the caller may read; ``next_cursor`` asks for the next."""

    results: list[Memory]
    next_cursor: str | None
    truncated: bool  # a next page exists


class WriteResult(TypedDict, total=False):
    """What one write did to the store: ADD, UPDATE (a merge, or the LLM's), DELETE, NOOP (the memory was
    there already), EXISTS (a retried write_id found what it wrote)."""

    id: str | None
    event: str | None
    memory: str | None
    previous_memory: str | None  # UPDATE: the text it replaced
    score: float  # NOOP or a merge: the cosine with the memory that was there


class AddAnswer(TypedDict, total=False):
    """``POST /v1/memories``: where the memory went and what was stored, or that the write was queued."""

    write_id: str
    visibility: str
    project_id: str | None
    visibility_inferred: bool
    memory_type: str
    expiration_date: str | None
    infer: bool
    trust: str
    provenance: str
    user_id: str  # the mem0 ids and metadata kept with it, when given
    run_id: str
    actor_id: str
    metadata: dict[str, Any]
    queued: bool  # the store was down: the write waits in the queue (results come with the replay)
    results: list[WriteResult]
    ahead: int  # queued: writes before it
    reason: str  # queued: why, and how long the queue is
    supersedes: str  # a superseding write: the memory it replaced
    superseded: bool  # whether that memory is now marked superseded


class UpdateAnswer(Memory, total=False):
    """``PUT /v1/memories/{id}``: the memory as it is now, the event, and the text it had."""

    event: str  # UPDATE
    previous_memory: str | None


class DeleteAnswer(TypedDict):
    """``DELETE /v1/memories/{id}``: the id deleted (its history keeps what it said)."""

    deleted: str


class HistoryEvent(TypedDict, total=False):
    """One event of a memory's history, as mem0's history database keeps it."""

    id: str
    memory_id: str
    old_memory: str | None
    new_memory: str | None
    event: str  # ADD, UPDATE, DELETE
    created_at: str | None
    updated_at: str | None
    is_deleted: bool
    actor_id: str | None
    role: str | None


class ChainStep(TypedDict):
    """A memory of a supersede chain (daemon/conversation/reads.py ``_chain``): a ``superseded_by`` the
    caller may not read is null."""

    id: str
    memory: str | None
    agent_id: str | None
    visibility: str | None
    valid_from: str | None
    invalid_at: str | None
    superseded_by: str | None
    state: str | None


class HistoryAnswer(TypedDict):
    """``GET /v1/memories/{id}/history``: its events, oldest first, and the chain of memories it replaced and
    that replaced it (empty for a deleted memory)."""

    memory_id: str
    results: list[HistoryEvent]
    chain: list[ChainStep]
