"""Where an L4 read goes: search (with the L3 fallback), list, get, history, each checked against the registry.

Private memories are only ever returned to their owner, project memories to the
project's members (layers/conversation/policy/rules.py); a denied read is audited and
answered as "not found".  While the store is down, a search is answered from the
caller's own L3 index with ``degraded: true`` and the reason; the other reads
are refused (503).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from typing import Any

from daemon.common.audit import AuditLog
from daemon.common.contracts import SearchAnswer, fit_memories, local_answer
from daemon.common.domain_errors import ConversationUnavailableError, NoSuchMemoryError
from daemon.conversation.store_thread import StoreDown, StoreThread
from layers.conversation.lifecycle.tombstones import Tombstones
from layers.conversation.policy.filters import FilterError, check
from layers.conversation.policy.registry import RegistryCache
from layers.conversation.policy.rules import PolicyError, may_read, read_phases
from protocol.operations import List, MemorySearch, Search

CHAIN_MAX = 32  # steps a history's chain follows each way


def checked_filters(filters: Any) -> dict | None:
    """A caller's mem0 filter, checked (400 naming the part that is wrong); None when it restricts nothing.

    A whole number past ±(2^53 − 1) in it is refused too, naming where (layers/conversation/policy/filters.py:
    no memory holds one, and a range filter would compare it as a double, rounded).
    """
    try:
        return check(filters)
    except FilterError as exc:
        raise PolicyError(str(exc)) from None


def made_between(filters: dict | None, since: str | None, until: str | None) -> dict | None:
    """``filters`` narrowed to memories made from the start of the local day ``since`` to the end of ``until``.

    Days are the daemon's local days, as L3's daily notes are; ``created_at`` is stored in UTC with its
    offset, and the filter language compares moments, so each bound is a local midnight with its offset.
    """
    bounds: dict[str, str] = {}
    if since is not None:
        bounds["gte"] = _local_midnight("since", since)
    if until is not None:
        bounds["lt"] = _local_midnight("until", until, days_after=1)
    if not bounds:
        return filters
    made = {"created_at": bounds}
    return made if filters is None else {"AND": [filters, made]}


def _local_midnight(name: str, text: str, days_after: int = 0) -> str:
    """The start of the local day ``text`` (plus ``days_after``) as an ISO moment; 400 for no such day."""
    try:
        day = date.fromisoformat(text) + timedelta(days=days_after)
        return datetime.combine(day, time.min).astimezone().isoformat(timespec="seconds")
    except (ValueError, OverflowError):
        raise PolicyError(f"{name} must be a calendar day, YYYY-MM-DD, not {text!r}") from None


def is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def audit_denied(audit: AuditLog, event: str, agent: str, memory: dict) -> None:
    """A cross-scope attempt, for the audit log (ids and placement, never the text)."""
    audit.record(
        event,
        agent=agent,
        memory_id=memory.get("id"),
        owner=memory.get("agent_id"),
        visibility=memory.get("visibility"),
        project=memory.get("project_id"),
    )


def l3_fallback(o: MemorySearch, reason: str, local_search: Callable[[Search], SearchAnswer]) -> dict:
    """A search L4 cannot answer now (``reason``): from the caller's own L3 index, ``degraded: true`` with the
    reason; 503 for a filtered search (the local index has no user_id or metadata) or one without fallback.
    The broker's answer while its store is down, and a spoke's while the hub is (daemon/conversation/hub.py)."""
    if checked_filters(o.filters) is not None:
        raise ConversationUnavailableError(
            f"{reason}; a filtered search is not answered from the local index (it has no user_id or metadata)"
        )
    if not o.fallback:
        raise ConversationUnavailableError(reason)
    # the same scale there; L3's days are daily notes' days
    local = local_search(Search(o.agent, o.query, limit=o.limit, threshold=o.threshold, since=o.since, until=o.until))
    answer = local_answer(o.query, reason, local)
    return answer if o.max_tokens is None else fit_memories(answer, o.max_tokens)


class Reads:
    def __init__(
        self,
        thread: StoreThread,
        registry: RegistryCache,
        audit: AuditLog,
        tombstones: Tombstones,
        local_search: Callable[[Search], SearchAnswer],
        on_returned: Callable[[list[str]], None] = lambda ids: None,
    ) -> None:
        """``on_returned``: told the ids of the memories a search or a get returned to an agent (decay by use)."""
        self.on_returned = on_returned
        self.thread = thread
        self.registry = registry
        self.audit = audit
        self.tombstones = tombstones
        self.local_search = local_search

    def search(self, o: MemorySearch) -> dict:
        """What ``o.agent`` may read, best first; ``o.filters`` (mem0's language) narrows each visibility phase.
        ``o.max_tokens`` keeps the best results that fit in that many (estimated) tokens, and says so in ``budget``;
        ``o.since``/``o.until`` keep memories made in those (local) days, and pass to the L3 fallback as its days.

        Superseded memories are left out (inside the store's query) unless ``o.show_superseded``; with
        ``o.trust_min`` only memories trusted that much or more (layers/conversation/policy/rules.py).

        With a filter the L3 fallback is not taken: the local index holds the agent's files, not user_id
        or metadata, and an unfiltered answer could put one end user's memories in another's prompt.
        """
        agent, query, limit, threshold, max_tokens = o.agent, o.query, o.limit, o.threshold, o.max_tokens
        wanted = checked_filters(o.filters)
        if threshold is not None and not 0.0 <= threshold <= 1.0:
            raise PolicyError(f"threshold must be between 0 and 1 (inclusive), not {threshold}")
        registry = self.registry.current()
        phases = read_phases(registry, agent)
        options: dict[str, Any] = {
            "filters": made_between(wanted, o.since, o.until),
            "threshold": threshold or 0.0,
            "explain": o.explain,
            "include_expired": o.show_expired,
            "show_superseded": o.show_superseded,
            "trust_min": o.trust_min,
        }
        try:
            found = self.thread.call("search", lambda: self.thread.store.search(query, phases, limit, **options))
        except StoreDown as exc:
            reason = str(exc)
        else:
            results = [r for r in found if may_read(registry, agent, r)]  # the filters already did; checked again
            if o.show_superseded:
                self._hide_links(registry, agent, results)
            answer: dict[str, Any] = {"layer": "conversation", "degraded": False, "query": query, "results": results}
            if max_tokens is not None:
                answer = fit_memories(answer, max_tokens)
            self.on_returned([r["id"] for r in answer["results"]])  # what reached the agent counts as used
            return answer
        return l3_fallback(o, reason, self.local_search)

    def get_all(self, o: List) -> dict:
        """One page of what ``o.agent`` may read, from ``o.cursor`` on."""
        agent = o.agent
        wanted = checked_filters(o.filters)
        registry = self.registry.current()
        phases = read_phases(registry, agent)
        options: dict[str, Any] = {"filters": wanted, "show_superseded": o.show_superseded}
        options.update(include_expired=o.show_expired, show_archived=o.show_archived)
        try:
            page, next_cursor = self.thread.call(
                "list", lambda: self.thread.store.list(phases, o.limit, o.cursor, **options)
            )
        except StoreDown as exc:
            raise ConversationUnavailableError(str(exc)) from None
        except ValueError as exc:
            raise PolicyError(str(exc)) from None
        results = [r for r in page if may_read(registry, agent, r)]
        if o.show_superseded:
            self._hide_links(registry, agent, results)
        return {"results": results, "next_cursor": next_cursor, "truncated": next_cursor is not None}

    def fetch(self, memory_id: str) -> dict | None:
        """One memory by id, unchecked (the caller checks who may see it); None when there is none."""

        if not is_uuid(memory_id):
            return None  # memory ids are UUIDs; anything else is simply not found
        try:
            return self.thread.call("get", lambda: self.thread.store.get(memory_id))
        except StoreDown as exc:
            raise ConversationUnavailableError(str(exc)) from None

    def get(self, agent: str, memory_id: str, admin: bool = False) -> dict:
        """One memory ``agent`` may read.  ``admin``: the administrator asks as ``agent`` (it sees exactly what
        ``agent`` may, no more: ``--agent X`` means "as X"), and looking is not the memory being used."""
        memory = self.fetch(memory_id)
        if memory is None:
            raise NoSuchMemoryError(f"no memory {memory_id}")
        registry = self.registry.current()
        if not may_read(registry, agent, memory):
            audit_denied(self.audit, "read_denied", agent, memory)
            raise NoSuchMemoryError(f"no memory {memory_id}")  # another's memory is not even admitted to exist
        self._hide_links(registry, agent, [memory])
        if not admin:
            self.on_returned([memory_id])
        return memory

    def history(self, agent: str, memory_id: str) -> dict:
        """mem0's ADD/UPDATE/DELETE events of a memory the caller may read (or could, before it was deleted)."""

        memory = self.fetch(memory_id)
        if memory is None:
            memory = self.tombstones.lookup(memory_id) if is_uuid(memory_id) else None
        if memory is None:
            raise NoSuchMemoryError(f"no memory {memory_id}")
        if not may_read(self.registry.current(), agent, memory):
            audit_denied(self.audit, "history_denied", agent, memory)
            raise NoSuchMemoryError(f"no memory {memory_id}")
        try:
            events = self.thread.call("history", lambda: self.thread.store.history(memory_id))
            chain = self._chain(memory_id, memory, agent)
        except StoreDown as exc:
            raise ConversationUnavailableError(str(exc)) from None
        return {"memory_id": memory_id, "results": events, "chain": chain}

    def _chain(self, memory_id: str, memory: dict, agent: str) -> list[dict]:
        """What ``memory_id`` replaced and what replaced it, oldest first, as far as ``agent`` may read.

        Walks ``superseded_by`` forward to the memory that is valid now, and the memories each step
        replaced backward (by the indexed ``superseded_by``), at most CHAIN_MAX steps each way.  A
        memory the caller may not read ends the walk there, unnamed.
        """
        registry = self.registry.current()
        thread = self.thread  # its store is read by each job when it runs (a reload may replace it meanwhile)

        def predecessors(memory_id: str) -> Callable[[], list[dict]]:
            return lambda: thread.store.predecessors(memory_id)

        def fetched(memory_id: str) -> Callable[[], dict | None]:
            return lambda: thread.store.get(memory_id)

        def readable(view: dict) -> bool:
            return may_read(registry, agent, view)

        def step(view: dict) -> dict:
            keys = ("id", "memory", "agent_id", "visibility", "valid_from", "invalid_at", "superseded_by", "state")
            return {k: view.get(k) for k in keys}

        current = memory if "state" in memory else None  # a deleted memory's tombstone has no window
        if current is None:
            return []
        back: list[dict] = []
        frontier = [memory_id]
        seen = {memory_id}
        while frontier and len(back) < CHAIN_MAX:
            earlier = [
                p for p in self.thread.call("history", predecessors(frontier[0])) if p["id"] not in seen and readable(p)
            ]
            frontier = frontier[1:] + [p["id"] for p in earlier]
            seen.update(p["id"] for p in earlier)
            back = earlier + back
        forward: list[dict] = []
        view = current
        while view.get("superseded_by") and len(forward) < CHAIN_MAX:
            following = view["superseded_by"]
            if following in seen or not is_uuid(following):
                break
            nxt = self.thread.call("history", fetched(following))
            if nxt is None or not readable(nxt):
                break
            seen.add(following)
            forward.append(nxt)
            view = nxt
        chain = [step(m) for m in back] + [step(current)] + [step(m) for m in forward]
        self._hide_links(registry, agent, chain)
        return chain

    def _hide_links(self, registry, agent: str, views: list[dict]) -> None:
        """A ``superseded_by`` naming a memory ``agent`` may not read is shown as null: not even its id is told."""
        links = {v["superseded_by"] for v in views if v.get("superseded_by")}
        if not links:
            return
        thread = self.thread
        try:
            targets = self.thread.call("get", lambda: {i: thread.store.get(i) for i in links if is_uuid(i)})
        except StoreDown:
            targets = {}
        for view in views:
            target = targets.get(view.get("superseded_by") or "")
            if view.get("superseded_by") and (target is None or not may_read(registry, agent, target)):
                view["superseded_by"] = None
