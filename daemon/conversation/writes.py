"""Where an L4 write goes: add, update, delete, each through the guard and the placement rules.

``add``: the secret guard (never_store), placement (visibility from the project
registry, private when unsure), lifetime (expiration from the memory type), then
the store (``infer=False``, or ``True`` with an LLM), with exact duplicates of a
memory in the same scope answered NOOP.  When the store cannot take it (or earlier
writes are still queued) the write goes to the durable queue, answered
``queued``, and is replayed later exactly once by write_id (daemon/conversation/replay.py).
A write_id is its owner's (layers/conversation/lifecycle/write_ids.py): it is looked up, queued and replayed
as ``(agent, write_id)``, so another agent's equal write_id is neither found nor revealed.
Updates and deletes are never queued: whose a memory is, and what it says now,
can only be read from the store, so while it is down they are refused (503).

Acknowledged means durable (issue 45), and each path chooses how:

- ``add`` (direct, queued, replayed): logged first in the write-ahead log (the durable queue,
  synced, group-committed) and applied at a deterministic point id, so the log replays it
  idempotently after a crash; answered without waiting for the store's flush, which the
  checkpoint makes later (daemon/conversation/checkpoint.py) before the row leaves the log;
- update, delete, delete_all, restore, supersede (and a dedup merge): not logged (they need the
  store as it is now): answered after ``checkpointer.durable()``, a store flush shared by every
  caller waiting at the time.  Their audit lines follow the store change, never precede it.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict
from datetime import datetime, timezone

import apsw

from daemon.common.audit import AuditLog
from daemon.common.config import DedupConfig
from daemon.common.daemon_limits import MAX_MEMORY_TEXT_CHARS
from daemon.common.domain_errors import (
    ConflictError,
    ConversationUnavailableError,
    NoSuchMemoryError,
    NotStoredError,
    SecretRefusedError,
)
from daemon.common.guard import SecretGuard
from daemon.common.storage import StorageHealth, is_storage_error
from daemon.conversation.checkpoint import Checkpointer
from daemon.conversation.queue import QueueAccess
from daemon.conversation.reads import Reads, audit_denied, checked_filters
from daemon.conversation.store_thread import StoreDown, StoreThread
from layers.conversation.adapters.store import NewMemory
from layers.conversation.lifecycle.cleanup import Selection
from layers.conversation.lifecycle.tombstones import Tombstones
from layers.conversation.policy import validity
from layers.conversation.policy.metadata import MetadataError, check_entity_id, check_metadata, strings
from layers.conversation.policy.registry import RegistryCache
from layers.conversation.policy.rules import (
    DEFAULT_TRUST,
    DEFAULT_TYPE,
    ForbiddenError,
    PolicyError,
    lifetime,
    may_read,
    place,
    provenance,
)
from protocol.operations import Add, DeleteAll, RestoreMemory, Update

MAX_TEXT_CHARS = MAX_MEMORY_TEXT_CHARS


def not_changed(exc: Exception, done: int = 0) -> str:
    """Why a change was refused while the store is down, and that it was not queued."""
    first = f"{done} deleted before the store stopped answering; " if done else ""
    return f"{exc}; {first}nothing (more) was changed and nothing was queued: try again once the store is back"


def refuse_secrets(guard: SecretGuard, audit: AuditLog, agent: str, values: list[str], what: str) -> None:
    """never_store on each value (the text, or every id and metadata string): refused, audited, never kept.

    Also a spoke's, before an add is queued for the hub (daemon/conversation/hub.py): a secret must not
    wait in the spoke's queue file for the hub to refuse it."""
    kinds = sorted({f.kind for value in values for f in guard.scan_text(value)})
    if kinds:
        audit.record("secret_refused", agent=agent, kinds=kinds)
        raise SecretRefusedError(
            f"refused: the {what} matches never_store pattern(s) {', '.join(kinds)}; "
            "remove the secret (store where it is kept, not the secret itself)"
        )


def normalised(text: str) -> str:
    """A memory's text as exact-duplicate detection compares it: whitespace collapsed, case folded."""
    return " ".join(text.split()).casefold()


DEDUP_CANDIDATES = 8  # nearest memories dedup looks at: equal texts with other data may take the first places


def _canonical(value: object) -> str:
    """A JSON value as dedup compares it: keys sorted, ``1``, ``1.0`` and ``true`` told apart."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def same_data(memory: Mapping, record: NewMemory) -> bool:
    """Whether a stored memory (a view) already holds everything ``record`` would store besides its text.

    A NOOP answers the write with the stored memory, so it may drop nothing the caller sent: the type
    (another lifetime), mem0's ids (whom and which run it is about, who spoke), the role, the caller's
    metadata, the trust and the source.  Anything else differing makes it another memory.
    """
    return (
        memory.get("memory_type") == record.memory_type
        and (memory.get("user_id"), memory.get("run_id"), memory.get("actor_id"))
        == (record.user_id, record.run_id, record.actor_id)
        and (memory.get("role") or "user") == record.role
        and _canonical(memory.get("metadata") or {}) == _canonical(record.extra)
        and (memory.get("trust"), memory.get("provenance")) == (record.trust or DEFAULT_TRUST, record.provenance)
    )


def _still_valid(memory: Mapping, memory_id: str) -> None:
    """A supersede target must be valid: one already replaced names what to supersede instead."""
    if memory.get("state") == validity.SUPERSEDED or memory.get("superseded_by"):
        raise PolicyError(
            f"memory {memory_id} was already superseded at {memory.get('invalid_at')} by "
            f"{memory.get('superseded_by')}: supersede that one instead"
        )


def _may_replace(write_id: str, earlier: list[str], old_id: str, states: Mapping[str, str]) -> None:
    """A retried superseding write's earlier memories may replace ``old_id`` only while valid and not it.

    Else the marking would make a cycle (``old_id`` replaced by a memory it replaced, or by itself) and
    leave the chain with no valid memory: refused (409), nothing changed.
    """
    if old_id in earlier:
        raise ConflictError(
            f"write_id {write_id} already wrote memory {old_id} itself: a memory cannot supersede itself; a "
            "write_id names one write: send the new text with a new write_id"
        )
    replaced = [i for i in earlier if states.get(i) == validity.SUPERSEDED]
    if replaced:
        raise ConflictError(
            f"write_id {write_id} already wrote memory {replaced[0]}, which is superseded since: marking "
            f"{old_id} superseded by it would leave no valid memory; a write_id names one write: send the "
            "new text with a new write_id"
        )


def seconds(value: float) -> str:
    return f"{value:.0f} s" if value < 120 else f"{value / 60:.0f} min"


class Writes:
    def __init__(
        self,
        thread: StoreThread,
        reads: Reads,
        queue: QueueAccess,
        registry: RegistryCache,
        audit: AuditLog,
        tombstones: Tombstones,
        storage: StorageHealth,
        guard: Callable[[], SecretGuard],
        checkpointer: Checkpointer,
        replay_rate: Callable[[], float | None],
        on_change: Callable[[], None],
    ) -> None:
        self.thread = thread
        self.reads = reads
        self.queue = queue
        self.registry = registry
        self.audit = audit
        self.tombstones = tombstones
        self.storage = storage
        self.guard = guard
        self.checkpointer = checkpointer  # durable(): a change the log cannot replay waits for the store's flush
        self.replay_rate = replay_rate
        self.on_change = on_change
        # conversation.* settings, replaced by a reload (see Broker.reconfigure)
        self.retention: dict[str, int | None] = {}
        self.dedup = DedupConfig()  # replaced by configure() before the first write
        self.llm_configured = False

    def configure(self, retention: Mapping[str, int | None], dedup: DedupConfig, llm_configured: bool) -> None:
        self.retention = dict(retention)
        self.dedup = dedup
        self.llm_configured = llm_configured

    # ------------------------------------------------------------ add

    def add(self, o: Add, *, admin: bool = False) -> dict:
        """The write ``o`` (protocol/operations.py) as ``o.agent``; ``admin``: the administrator's call.

        ``user_id``/``run_id``/``actor_id`` and ``metadata`` are data kept with the memory (mem0's meaning);
        they never change who writes it (``agent``, from the token) or where it goes (placement).

        ``supersedes``: the id of a memory the new one replaces (``agent``'s own, also with ``admin``): it stays,
        marked superseded (layers/conversation/policy/validity.py), and leaves search.  Such a write needs the store
        (whose the old memory is can only be read there): while it is down it is refused, never queued.

        ``trust`` and ``source`` (its provenance): by default medium and agent_output for an agent's write
        (inferred with an LLM), high and operator for the administrator's; an agent may lower its trust,
        never raise it (layers/conversation/policy/rules.py ``provenance``)."""
        agent, write_id, infer = o.agent, o.write_id, o.infer
        text = self.checked_text(agent, o.text)
        if o.role not in (None, "user", "assistant"):
            raise PolicyError(f"role must be user or assistant, not {o.role!r}")
        try:
            ids = {name: check_entity_id(value, name) for name, value in (("user_id", o.user_id), ("run_id", o.run_id))}
            ids["actor_id"] = check_entity_id(o.actor_id, "actor_id")
            extra = check_metadata(o.metadata)
        except MetadataError as exc:
            raise PolicyError(str(exc)) from None
        self.check_secrets(agent, [v for v in ids.values() if v] + list(strings(extra)), "metadata")
        try:
            placement = place(self.registry.current(), agent, text, o.visibility, o.project)
        except ForbiddenError as exc:
            self.audit.record("write_denied", agent=agent, visibility=o.visibility, project=o.project, reason=str(exc))
            raise
        memory_type = o.memory_type or DEFAULT_TYPE
        created = datetime.now(timezone.utc)
        life = lifetime(memory_type, self.retention, created, o.expires)
        if infer is None:
            infer = self.llm_configured
        elif infer and not self.llm_configured:
            raise PolicyError("infer needs an LLM: configure conversation.llm")
        try:
            trust, source = provenance(admin, o.trust, o.source, infer)
        except ForbiddenError as exc:
            self.audit.record("write_denied", agent=agent, trust=o.trust, source=o.source, reason=str(exc))
            raise
        retry = write_id is not None
        record = NewMemory(
            write_id=write_id or str(uuid.uuid4()),
            agent_id=agent,
            text=text,
            memory_type=memory_type,
            visibility=placement.visibility,
            project_id=placement.project_id,
            created_at=created.isoformat(timespec="seconds"),
            expiration_date=life.expiration_date,
            expires_at=life.expires_at,
            infer=infer,
            role=o.role or "user",
            **ids,
            extra=extra,
            trust=trust,
            provenance=source,
        )
        answer = {
            "write_id": record.write_id,
            "visibility": record.visibility,
            "project_id": record.project_id,
            "visibility_inferred": placement.inferred,
            "memory_type": memory_type,
            "expiration_date": record.expiration_date,
            "infer": infer,
            "trust": trust,
            "provenance": source,
            **{k: v for k, v in ids.items() if v},
            **({"metadata": extra} if extra else {}),
        }
        if o.supersedes is not None:
            return {**answer, **self._superseding(agent, record, o.supersedes, retry)}
        if retry and self.queue.contains(record.write_id, agent):
            return {**answer, **self._queued(record, "this write_id is already queued")}
        seq, ahead, logged = self._log(record)
        if seq is not None and ahead:  # earlier queued writes go first
            self.queue.queue.release(seq)
            self._wake_replay()
            return {**answer, **self._queued(record, "earlier writes are still queued")}
        attempted = self.thread.breaker.closed
        try:
            if not infer:  # with an LLM, mem0 embeds the facts it extracts, not the text
                self.thread.embed_ahead(record.text)
            results = self.thread.call("add", lambda: self.write(record, check_first=retry or not logged))
        except StoreDown as exc:
            if not logged:
                raise NotStoredError(
                    f"not stored: {exc}, and the write-ahead log {self.queue.queue.path} cannot be written "
                    f"({self.storage.error('queue') or 'see status'}); nothing was kept: write it again once there "
                    "is space"
                ) from None
            if seq is not None:
                self.queue.queue.release(seq)
                if attempted or retry:  # it may be in the store already: replay looks it up by write_id first
                    self.queue.note(record.write_id, agent, str(exc))
            self._wake_replay()
            return {**answer, **self._queued(record, str(exc))}
        self.storage.succeeded("store")
        if seq is not None:
            self._settle(seq, results)
        merged = any(r.get("event") == "UPDATE" for r in results)
        if not logged or merged:
            # not in the log (its disk refused it), or a dedup merge into an existing memory (an update,
            # which the log cannot replay): durable only once the store has flushed it
            self.checkpointer.durable("add")
        if merged and seq is not None:
            self.storage.attempt("queue", lambda: self.queue.queue.forget(seq), path=self.queue.queue.path)
        return {**answer, "queued": False, "results": results}

    def _log(self, record: NewMemory) -> tuple[int | None, int, bool]:
        """The write in the write-ahead log, synced, before anything else: ``(seq, pending ahead, logged)``.

        ``seq`` is the row this call claimed (None when ``(owner, write_id)`` was logged already: a
        retry of a write in flight or applied, which then goes to the store as a lookup).  ``logged``
        is False when the log's disk refused it: the write may still go to the store, and is then
        answered only once the store has flushed it.
        """
        queue = self.queue.queue
        if not queue.opened and not self.queue.open():
            return None, 0, False
        try:
            seq, ahead = queue.log(record.write_id, record.agent_id, asdict(record))
        except (apsw.Error, OSError) as exc:
            if not is_storage_error(exc):
                raise
            self.storage.failed("queue", exc, path=queue.path)
            return None, 0, False
        self.storage.succeeded("queue")
        return seq, ahead, True

    def _settle(self, seq: int, results: list[dict]) -> None:
        """After the store took the write: tell its log row what happened (from the caller's thread, so
        the store thread never waits for the log's lock while a group commit syncs under it).

        Applied: the row waits for the checkpoint that flushes the store past it (a checkpoint that
        runs before this leaves the still-claimed row alone).  A NOOP (the memory was there already)
        changed nothing to keep: the row goes at once, or a replay after a crash would write the text
        the caller was told exists.  A dedup merge (UPDATE of an existing memory) is forgotten by the
        caller once the store has flushed the update.
        """
        queue = self.queue.queue
        if results and all(r.get("event") == "NOOP" for r in results):
            self.storage.attempt("queue", lambda: queue.forget(seq), path=queue.path)
        elif not any(r.get("event") == "UPDATE" for r in results):
            queue.applied([seq], claimed=True)

    def _wake_replay(self) -> None:
        self.thread.attention.set()
        self.on_change()

    def _superseding(self, agent: str, record: NewMemory, old_id: str, retry: bool) -> dict:
        """Write ``record`` and mark ``old_id`` superseded by it, on the store thread, one after the other.

        The old memory must be the writer's own (the administrator's too: it acts as ``agent``): another
        agent's, readable or not, gets exactly the answer of an unknown id, so a supersede tells nothing
        about other agents' memories.  A retry with the same write_id finds the write already made and
        marks the old memory again: the pair completes; when the pair is complete already (the answer
        was lost to a crash or a timeout) the retry is answered as the write was (EXISTS).  A chain
        always ends in a valid memory: the old memory must still be valid, and the one replacing it must
        be valid and another memory, checked again on the store thread (the store's one writer) right
        before the marking, so no two writes can cross (A superseded by B, B by A).
        """
        if record.infer:
            raise PolicyError(
                "supersedes needs infer off: it names the one memory the new text replaces, "
                "while with infer the LLM decides what changes"
            )
        old = self._owned(agent, old_id, "supersede", readable_is_forbidden=False)
        if not (retry and old.get("superseded_by")):  # superseded by this very write: checked on the store thread
            _still_valid(old, old_id)
        done_before = False

        def write_and_supersede() -> list[dict]:
            nonlocal done_before
            store = self.thread.store  # read when it runs: a reload may have replaced the store meanwhile
            current = store.get(old_id)  # again, where nothing can change it before the marking
            if current is None or current.get("agent_id") != agent:
                raise NoSuchMemoryError(f"no memory {old_id}")  # deleted meanwhile: as missing as ever
            earlier = store.find_write(record.agent_id, record.write_id) if retry else []
            if earlier and current.get("superseded_by") in earlier:
                # the pair was made by this write_id, its answer lost (a crash, a timeout): the same answer again
                done_before = True
                return [{"id": i, "event": "EXISTS"} for i in earlier]
            _still_valid(current, old_id)
            if earlier:
                _may_replace(record.write_id, earlier, old_id, store.states(earlier))
                results = [{"id": i, "event": "EXISTS"} for i in earlier]
            else:
                results = self.write(record, check_first=False)
            by = next((r["id"] for r in results if r.get("id") and r["id"] != old_id), None)
            if by is not None:
                store.supersede([old_id], by, record.created_at)
            return results

        self.thread.embed_ahead(record.text)
        try:
            results = self.thread.call("add", write_and_supersede)
        except StoreDown as exc:
            raise ConversationUnavailableError(
                f"{exc}; a superseding write is not queued (the store must see the memory it replaces): nothing "
                "was queued, and if the new memory was written already, the same write_id again completes it"
            ) from None
        self.storage.succeeded("store")
        self.checkpointer.durable("supersede")  # the pair is not in the log: answered once the store flushed it
        by = next((r["id"] for r in results if r.get("id") and r["id"] != old_id), None)
        if by is not None and not done_before:
            self.audit.record(
                "memory_superseded", agent=agent, memory_id=old_id, owner=old.get("agent_id"), superseded_by=by
            )
        return {"queued": False, "results": results, "supersedes": old_id, "superseded": by is not None}

    def _queued(self, record: NewMemory, reason: str) -> dict:
        """The answer for a queued write: how many go before it and, while draining, how long that takes."""
        ahead = self.queue.queue.ahead_of(record.write_id, record.agent_id)
        rate = self.replay_rate()
        eta = f", replaying at {rate:,.0f}/s, about {seconds(ahead / rate)} to go" if rate and ahead else ""
        return {"queued": True, "ahead": ahead, "reason": f"{reason}: {ahead:,} ahead{eta}"}

    def write(self, record: NewMemory, check_first: bool) -> list[dict]:
        """On the store thread: write once (the owner's write_id already in the store is not written again)."""
        store = self.thread.store
        if check_first:
            existing = store.find_write(record.agent_id, record.write_id)
            if existing:
                return [{"id": i, "event": "EXISTS"} for i in existing]
        if not record.infer and self.dedup.enabled:
            merged = self._dedup(record)
            if merged is not None:
                return merged
        if not record.infer:  # at its deterministic id: a replay of its log row finds it, never writes it twice
            return store.add_plain(record, suspect=check_first)
        return store.add(record)

    def _dedup(self, record: NewMemory) -> list[dict] | None:
        """On the store thread: the answer when ``record`` restates a memory already in its scope, else None.

        Same owner, visibility, project and type only (another type has another lifetime), and only a
        memory that already holds every other thing the write would store (:func:`same_data`: its ids,
        role, metadata, trust and source), valid (not superseded, not archived).  The same text up to
        whitespace and case: nothing is written, the existing id comes back with event NOOP.  The same
        text with other metadata is another memory (mem0's ``add`` stores each write): it is written, so
        a filter on the new metadata finds it and nothing the caller sent is silently dropped.  When
        ``conversation.dedup.near_threshold`` is set (it is not by default: see DedupConfig for why), a
        passage cosine at or above it (with the same data too): the existing memory takes the new text
        (mem0's update: an UPDATE event in its history), the newest wording being the one kept.
        Replayed (queued) writes skip this: they are written once each by write_id, as queued.
        """
        store = self.thread.store
        candidates = [(m, score) for m, score in store.nearest(record, DEDUP_CANDIDATES) if same_data(m, record)]
        if not candidates:
            return None
        wanted = normalised(record.text)
        for memory, score in candidates:
            if normalised(memory["memory"]) == wanted:
                return [{"id": memory["id"], "event": "NOOP", "memory": memory["memory"], "score": round(score, 4)}]
        memory, score = candidates[0]
        if self.dedup.near_threshold is None or score < self.dedup.near_threshold:
            return None
        store.update(memory["id"], record.text)
        self.audit.record(
            "memory_updated", agent=record.agent_id, memory_id=memory["id"], owner=record.agent_id, by="dedup"
        )
        return [
            {
                "id": memory["id"],
                "event": "UPDATE",
                "memory": record.text,
                "previous_memory": memory["memory"],
                "score": round(score, 4),
            }
        ]

    def checked_text(self, agent: str, text: str) -> str:
        """A memory's text as add and update accept it: stripped, not empty, not too long, no secret."""

        text = text.strip()
        if not text:
            raise PolicyError("nothing to remember: the text is empty")
        if len(text) > MAX_TEXT_CHARS:
            raise PolicyError(f"the text is {len(text)} characters; a memory holds at most {MAX_TEXT_CHARS}")
        self.check_secrets(agent, [text], "text")
        return text

    def check_secrets(self, agent: str, values: list[str], what: str) -> None:
        """never_store on each value (the text, or every id and metadata string): refused, audited, never kept."""
        refuse_secrets(self.guard(), self.audit, agent, values, what)

    # ------------------------------------------------------------ update, delete

    def _owned(self, agent: str, memory_id: str, what: str, *, readable_is_forbidden: bool = True) -> dict:
        """The memory, when ``agent`` owns it; else the answer for an unknown id (404).

        ``readable_is_forbidden``: a memory the agent may read but not change is a 403 ("only its owner
        may"; nothing the agent could not read is told).  A supersede target is never told apart from a
        missing one (False): another agent's memory is no memory the caller has.  The administrator's token
        acting as ``agent`` gets the same answer as ``agent``'s own: ``--agent X`` means "as X" (the audit
        log names the real actor, ``admin as X``: daemon/common/audit.py).
        """

        try:
            memory = self.reads.fetch(memory_id)
        except ConversationUnavailableError as exc:
            raise ConversationUnavailableError(not_changed(exc)) from None
        if memory is None:
            raise NoSuchMemoryError(f"no memory {memory_id}")
        if memory.get("agent_id") != agent:
            audit_denied(self.audit, f"{what}_denied", agent, memory)
            if readable_is_forbidden and may_read(self.registry.current(), agent, memory):
                owner = memory.get("agent_id")
                raise ForbiddenError(f"memory {memory_id} belongs to {owner}; only its owner may {what} it")
            raise NoSuchMemoryError(f"no memory {memory_id}")
        return memory

    def _deleted(self, agent: str, memory: dict) -> None:
        """After a delete: its owner kept for its history (see layers/conversation/lifecycle/tombstones.py), audited."""
        self.tombstones.record(memory, datetime.now(timezone.utc).isoformat(timespec="seconds"))
        self.audit.record("memory_deleted", agent=agent, memory_id=memory.get("id"), owner=memory.get("agent_id"))

    def _scan(
        self, selection: Selection, limit: int, cursor: str | None, filters: dict | None
    ) -> tuple[list[dict], str | None]:
        """On the store thread: a page of the store in force when the job runs (a reload may swap it)."""
        return self.thread.store.scan(selection, limit, cursor, filters)

    def _delete(self, memory_id: str) -> None:
        """On the store thread: delete from the store in force when the job runs."""
        self.thread.store.delete(memory_id)

    def delete(self, agent: str, memory_id: str) -> dict:
        """Delete one of ``agent``'s own memories; while the store is down refused (503), never queued."""

        memory = self._owned(agent, memory_id, "delete")
        try:
            self.thread.call("delete", lambda: self.thread.store.delete(memory_id))
        except StoreDown as exc:
            raise ConversationUnavailableError(not_changed(exc)) from None
        self.checkpointer.durable("delete")
        self._deleted(agent, memory)
        return {"deleted": memory_id}

    def update(self, o: Update) -> dict:
        """Replace the text of one of ``o.agent``'s own memories by ``o.text`` (mem0's ``update``).

        The memory keeps its id, owner, placement, type and created_at; it is
        re-embedded, gets updated_at and an UPDATE event in its history, and the
        change is audited.  The same checks as ``add`` apply to the new text
        (empty, too long, secrets).  While the store is down an update is refused
        with 503 and nothing changes (it is never queued: whose the memory is,
        and what it says now, can only be read from the store).
        """

        agent, memory_id, expires = o.agent, o.memory_id, o.expires
        text = self.checked_text(agent, o.text)
        memory = self._owned(agent, memory_id, "update")
        expiration = None
        if expires is not None:
            now = datetime.now(timezone.utc)
            life = lifetime(memory.get("memory_type") or DEFAULT_TYPE, self.retention, now, expires)
            expiration = (life.expiration_date, life.expires_at)
        try:
            self.thread.call("update", lambda: self.thread.store.update(memory_id, text, expiration))
        except StoreDown as exc:
            raise ConversationUnavailableError(not_changed(exc)) from None
        self.checkpointer.durable("update")
        self.audit.record("memory_updated", agent=agent, memory_id=memory_id, owner=memory.get("agent_id"))
        updated = self.reads.fetch(memory_id) or {**memory, "memory": text}
        return {**updated, "event": "UPDATE", "previous_memory": memory.get("memory")}

    def restore(self, o: RestoreMemory) -> dict:
        """Bring one of ``o.agent``'s own memories back to valid: out of the archive (decay), or un-superseded.

        Archived: it is shown in searches again and its age counts from now (``restored_at``), so the
        next cleanup does not archive it at once.  Superseded: the link to its replacement is removed
        (both are valid then; the owner asked for it).  Refused (503) while the store is down.
        """
        agent, memory_id = o.agent, o.memory_id
        memory = self._owned(agent, memory_id, "restore")
        state = memory.get("state") or validity.VALID
        if state == validity.VALID:
            return {**memory, "restored": False, "previous_state": state}
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        if state == validity.ARCHIVED:
            fields = {validity.STATE: None, validity.ARCHIVED_AT: None, validity.RESTORED_AT: now}
        else:
            fields = {validity.STATE: None, validity.INVALID_AT: None, validity.SUPERSEDED_BY: None}
        try:
            self.thread.call("restore", lambda: self.thread.store.restore_fields(memory_id, fields))
        except StoreDown as exc:
            raise ConversationUnavailableError(not_changed(exc)) from None
        self.checkpointer.durable("restore")
        self.audit.record(
            "memory_restored", agent=agent, memory_id=memory_id, owner=memory.get("agent_id"), previous_state=state
        )
        restored = self.reads.fetch(memory_id) or memory
        return {**restored, "restored": True, "previous_state": state}

    def delete_all(self, o: DeleteAll) -> dict:
        """Delete every one of ``o.agent``'s own memories that match the filter (never another agent's).

        ``o.user_id``, ``o.run_id`` and ``o.actor_id`` narrow it further, inside the agent's own (as a mem0
        filter: ``{"user_id": "alice"}``).

        Each goes through mem0's delete, so each gets its DELETE event.  While
        the store is down this is refused (503) and nothing is deleted; stopped
        half-way by an outage, the answer says how many went first and running
        it again deletes the rest.
        """

        agent, dry_run = o.agent, bool(o.dry_run)
        selection = Selection(agent=agent, visibility=o.visibility, project=o.project, memory_type=o.memory_type)
        ids = {k: v for k in ("user_id", "run_id", "actor_id") if (v := getattr(o, k))}
        wanted = checked_filters(ids or None)
        deleted: list[str] = []
        cursor: str | None = None
        while True:
            try:
                page, cursor = self.thread.call(
                    "delete_all",
                    # the store is read when the job runs (a reload may replace it while the job waits)
                    functools.partial(self._scan, selection, 256, cursor if dry_run else None, wanted),
                )
            except StoreDown as exc:
                raise ConversationUnavailableError(not_changed(exc, len(deleted))) from None
            mine = [m for m in page if m.get("agent_id") == agent]  # the filter already did; checked again
            if dry_run:
                deleted += [m["id"] for m in mine]
                if not cursor:
                    break
                continue
            if not mine:
                break
            gone: list[dict] = []
            try:
                for memory in mine:
                    self.thread.call("delete", functools.partial(self._delete, memory["id"]))
                    gone.append(memory)
            except StoreDown as exc:
                raise ConversationUnavailableError(not_changed(exc, len(deleted) + len(gone))) from None
            finally:
                if gone:  # on disk first, then the tombstones and the audit lines that say so
                    self.checkpointer.durable("delete")
                    for memory in gone:
                        self._deleted(agent, memory)
                        deleted.append(memory["id"])
            if len(mine) < len(page) or (not page and cursor):  # never loop on what the store did not delete
                break
        if dry_run:  # a preview deletes nothing, and says so: "deleted" is what went, never what would
            return {"deleted": 0, "would_delete": len(deleted), "ids": deleted, "dry_run": True}
        return {"deleted": len(deleted), "ids": deleted, "dry_run": False}
