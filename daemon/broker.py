"""The L4 broker: every conversation-memory request passes through here.

It applies, in order, what the API layer cannot know and the store must not
decide: the secret guard, placement (visibility from the project registry),
lifetime, and the outage rules.  The store is touched from one worker thread
only, so callers can give up on a hung link without leaving two requests
inside the client; a circuit breaker stops callers from waiting at all once
the store has failed, and a probe thread brings it back.

While the store is down, searches are answered from the caller's own L3
index with ``degraded: true`` and the reason, and writes go to the durable
queue, which the probe thread replays in order once the store answers again:
plain writes in batches (one lookup, one embedding call, one upsert each),
inferred ones one by one in their place; a write the store refuses is set aside
(kept, audited, shown in status) instead of blocking every write behind it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import queue as queue_module
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict
from datetime import datetime, timezone
from itertools import groupby
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

import apsw
import httpx

from daemon import maintenance
from daemon.audit import audit_log
from daemon.config import Config
from daemon.guard import SecretGuard
from daemon.storage import StorageHealth, has_room, is_storage_error
from daemon.storage import describe as describe_storage
from layers.conversation.breaker import Breaker
from layers.conversation.cleanup import Selection
from layers.conversation.policy import (
    DEFAULT_TYPE,
    ForbiddenError,
    PolicyError,
    lifetime,
    may_read,
    place,
    read_phases,
)
from layers.conversation.queue import QueuedWrite, WriteQueue
from layers.conversation.registry import RegistryCache
from layers.conversation.store import (
    BatchResult,
    ConversationStore,
    NewMemory,
    StoreConfigError,
    StoreRequestError,
    StoreSettings,
    StoreUnavailableError,
    describe_error,
)
from layers.conversation.tombstones import Tombstones

log = logging.getLogger(__name__)
T = TypeVar("T")

# The Qdrant client's own timeout bounds every request to a server; a caller's deadline is
# only the backstop for a call that also waits on the embedder (a model load, L3's batch).
REMOTE_BACKSTOP_S = 10.0
EMBEDDED_DEADLINE_S = 60.0
CONNECT_DEADLINE_S = 120.0  # opening the store (mem0 import, a large embedded collection) may take a while
PING_INTERVAL_S = 30.0  # while up, how often the round-trip time is measured
TAILSCALE_REFRESH_S = 60.0
# A replay batch is sized from the last one's rate to take about REPLAY_BATCH_S, so a search
# queued behind it on the store thread, or a stop, waits about that long at most.  It starts
# small and at most doubles from one batch to the next: the embedder may be slow (the local
# model on a loaded machine embeds a few texts a second).
REPLAY_BATCH_S = 1.0
REPLAY_BATCH_MIN = 16
REPLAY_BATCH_MAX = 500
REPLAY_PER_WRITE_S = 0.5  # a batch's deadline grows by this per write (the embedder's share)
MAINTENANCE_S = 600.0  # a backup or restore of a large store
STORE_OPEN_WAIT_S = 60.0  # how long a backup or cleanup waits for the store to open (see wait_until_open)
STOP_WAIT_S = 3.0  # stop()'s default wait; the daemon passes its own share of STOP_BUDGET_S
MAX_TEXT_CHARS = 20_000


class ConversationUnavailableError(RuntimeError):
    """The store cannot answer and the request has no fallback; the message says why."""


class NotStoredError(RuntimeError):
    """A write neither the store nor the queue could keep (a full disk): nothing was kept."""


class SecretRefusedError(ValueError):
    """Content matched a never_store pattern; the message names the kinds, never the text."""


class _StoreDown(Exception):
    pass


class StoreWorker:
    """One daemon thread that owns the store: jobs run in order, callers wait with a deadline."""

    def __init__(self) -> None:
        self._jobs: queue_module.SimpleQueue = queue_module.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="l4-store", daemon=True)
        self._busy_until: float | None = None  # when the job running now is past its own deadline
        self._thread.start()

    def submit(self, fn: Callable[[], object], deadline: float | None = None) -> Future:
        future: Future = Future()
        self._jobs.put((fn, future, deadline))
        return future

    def wait(self, future: Future, deadline: float, patient: bool = True) -> object:
        """``future``'s result; raises FutureTimeout.

        ``patient`` (maintenance, replay, connecting: nobody waits at a prompt):
        ``deadline`` counts from when the job starts.  Time spent queued behind
        another job (a replay batch, a backup, a cleanup page) is not the store
        being slow: the job keeps waiting while the one ahead is within its own
        deadline, and times out when its own deadline, or that of a job ahead
        that hangs, has passed.  Otherwise (an agent's request, whose client
        waits ``client_timeout``) the deadline counts from now, whatever is ahead.
        """
        if not patient:
            return future.result(timeout=deadline)
        submitted = time.monotonic()
        while not (future.running() or future.done()):
            ahead = self._busy_until
            limit = max(submitted + deadline, ahead if ahead is not None else 0.0)
            left = limit - time.monotonic()
            if left <= 0:
                raise FutureTimeout()
            with contextlib.suppress(FutureTimeout):
                return future.result(timeout=min(0.2, left))
        started = getattr(future, "started_at", submitted)
        return future.result(timeout=max(0.0, started + deadline - time.monotonic()))

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, future, deadline = job
            future.started_at = time.monotonic()  # type: ignore[attr-defined]  # read by wait()
            if not future.set_running_or_notify_cancel():
                continue  # the caller gave up before it started
            self._busy_until = None if deadline is None else future.started_at + deadline  # type: ignore[attr-defined]
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the waiting caller
                future.set_exception(exc)
            finally:
                self._busy_until = None

    def stop(self, timeout: float = 5.0) -> None:
        self._jobs.put(None)
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


def store_deadline(config: Config) -> float:
    """How long a request waits for the store before it is answered without it."""
    c = config.conversation
    return c.qdrant.timeout_s + REMOTE_BACKSTOP_S if c.backend == "remote" else EMBEDDED_DEADLINE_S


def client_timeout(config: Config) -> float:
    """How long a client waits for the daemon: past the store deadline, so it hears "queued"/"degraded"."""
    return store_deadline(config) + 30.0


def store_settings(config: Config) -> StoreSettings:
    c = config.conversation
    api_key = None
    if c.qdrant.api_key_env:
        api_key = os.environ.get(c.qdrant.api_key_env) or None
    elif c.qdrant.api_key_file:
        api_key = Path(c.qdrant.api_key_file).expanduser().read_text(encoding="utf-8").strip() or None
    llm = None
    if c.llm is not None:
        llm = {"base_url": c.llm.base_url, "model": c.llm.model, "api_key": os.environ.get(c.llm.api_key_env, "")}
    return StoreSettings(
        backend=c.backend,
        data_dir=config.paths.state_dir / "conversation",
        collection=c.qdrant.collection,
        url=c.qdrant.url if c.backend == "remote" else None,
        api_key=api_key,
        timeout_s=c.qdrant.timeout_s,
        llm=llm,
    )


def _local_view(result: dict) -> dict:
    """An L3 hit in the shape of a conversation result, so clients handle one list."""
    return {
        "memory": result["text"],
        "snippet": result.get("snippet"),
        "score": result.get("score"),
        "source": "local",
        "path": result.get("path"),
        "lines": result.get("lines"),
        "heading": result.get("heading"),
    }


class _BrokeredStore:
    """The store's cleanup face, each call made on the broker's store thread."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def scan(self, selection: Selection, limit: int, cursor: str | None) -> tuple[list[dict], str | None]:
        self._not_stopping()
        return self.broker._admin_call("scan", lambda: self.broker.store.scan(selection, limit, cursor))

    def delete_ids(self, ids: list[str]) -> None:
        self._not_stopping()
        self.broker._admin_call("delete", lambda: self.broker.store.delete_ids(ids))

    def _not_stopping(self) -> None:
        """A cleanup ends between pages when the daemon stops; running it again goes on from there."""
        if self.broker._stopping:
            raise ConversationUnavailableError("the daemon is stopping: cleanup ended early; run it again later")


class Broker:
    def __init__(
        self,
        config: Config,
        store: ConversationStore,
        local_search: Callable[[str, str, int], dict],
        guard: Callable[[], SecretGuard],
        embedder_ready: Callable[[], str] = lambda: "",
        on_change: Callable[[], None] = lambda: None,
        storage: StorageHealth | None = None,
    ) -> None:
        c = config.conversation
        self.storage = storage or StorageHealth()  # the queue's and the store's full disks
        self.config = config
        self.store = store
        self.local_search = local_search
        self.guard = guard
        self.embedder_ready = embedder_ready  # "" when the embedder can work, else why not
        self.on_change = on_change
        self.retention = dict(c.retention_days)
        self.dedup = c.dedup
        self.llm_configured = c.llm is not None
        self.registry = RegistryCache(config.paths.registry)
        self.audit = audit_log(config)
        self.queue = WriteQueue(config.paths.state_dir / "conversation" / "queue.sqlite")
        self.tombstones = Tombstones(config.paths.state_dir / "conversation" / "deleted.sqlite")
        self._open_queue()  # a full disk leaves it closed: writes then go to the store or get 507
        self.breaker = Breaker(c.probe_interval_s)
        self.deadline_s = store_deadline(config)
        self.probe_timeout_s = c.probe_timeout_s
        self.fatal = ""  # a configuration error: the store stays off until it is fixed
        self.rtt_ms: float | None = None
        self.replayed = 0
        self.skipped = 0
        self.set_aside = 0
        self._batch_size = REPLAY_BATCH_MIN
        self._drain: dict | None = None  # this drain's handled writes and busy seconds, for rate and time to go
        self._head_checked = False  # the queue's head at start may be in any earlier version's crash window
        self.tailscale: dict | None = None
        self._tailscale_at = 0.0
        self._last_ping = 0.0
        self._wake = threading.Event()
        self._stopping = False
        self._final_status: dict | None = None  # what status() says once the queue is closed
        self._worker = StoreWorker()
        self._prober = threading.Thread(target=self._probe_loop, name="l4-probe", daemon=True)

    def start(self) -> None:
        self._prober.start()

    def request_stop(self) -> None:
        """Begin stopping, without waiting: replay and cleanup end before their next item or page."""
        self._stopping = True
        self._wake.set()

    def stop(self, timeout: float = STOP_WAIT_S) -> bool:
        """Stop within ``timeout``: the call in progress may finish, nothing new starts.

        Queued writes not yet replayed stay queued (replay is exactly-once by
        write_id, so the next start goes on where this one stopped).  A call that
        does not end in time (a hung link) is left to its daemon thread; the
        result says whether every thread of the broker has ended.
        """
        deadline = time.monotonic() + timeout
        self.request_stop()
        self._prober.join(timeout=max(0.0, deadline - time.monotonic()))
        future = self._worker.submit(self.store.close)  # after the call in progress, if any
        try:
            future.result(timeout=max(0.0, deadline - time.monotonic()))
        except Exception as exc:  # closing is best effort
            future.cancel()
            log.warning("conversation store did not close cleanly: %s", describe_error(exc))
        self._worker.stop(timeout=max(0.0, deadline - time.monotonic()))
        self._final_status = self.status()
        if self._prober.is_alive():
            return False  # it still holds the queue; the process exit closes it
        self.queue.close()
        self.tombstones.close()
        return not self._worker.alive

    def reconfigure(self, config: Config) -> list[str]:
        """SIGHUP: apply ``conversation.*`` changes; returns what changed, for the log.

        Retention, probe settings and deadlines apply at once.  Another store
        (backend, url, collection, timeout, API key, LLM) is reconnected: the swap
        runs as a job on the store thread, so calls queued before it finish on the
        old store and everything after goes to the new one; the breaker opens
        meanwhile, so writes go to the durable queue (which the swap does not
        touch) and are replayed, exactly once by write_id, when the probe has
        connected the new store.  Nothing acknowledged is lost.  ``enabled`` is
        the daemon's to apply (a restart).  Raises OSError/ValueError when the new
        store settings cannot be read (an API key file): nothing is changed then.
        """
        new, old = config.conversation, self.config.conversation
        settings = store_settings(config)  # may raise: the running store is then kept
        changed = [
            f"conversation.{name}"
            for name in ("retention_days", "probe_interval_s", "probe_timeout_s", "dedup")
            if getattr(new, name) != getattr(old, name)
        ]
        self.config = config
        self.retention = dict(new.retention_days)
        self.dedup = new.dedup
        self.breaker.probe_interval_s = new.probe_interval_s
        self.probe_timeout_s = new.probe_timeout_s
        self.deadline_s = store_deadline(config)
        if settings != self.store.settings:
            changed.append("conversation store (reconnected)")
            embedder, dim = self.store.embedder, self.store.dim

            def swap() -> None:
                old_store = self.store
                self.store = ConversationStore(settings, embedder, dim)
                old_store.close()

            self._worker.submit(swap)  # not waited for: the daemon's loop must not wait on a hung call
            self.llm_configured = new.llm is not None
            self.fatal = ""  # a store refused for its configuration gets another chance
            self.rtt_ms = None
            self._head_checked = False
            if self.breaker.failure("reconnecting: the conversation settings changed"):
                self.on_change()
            self._wake.set()
            log.info("conversation store: reconnecting to %s", settings.url or f"embedded {settings.data_dir}")
        return changed

    # ------------------------------------------------------------ store calls

    def _call(
        self, what: str, fn: Callable[[], object], deadline: float | None = None, patient: bool = False
    ) -> object:
        """Run ``fn`` on the store's thread; raise _StoreDown (and open the breaker) when it fails.

        ``patient``: time queued behind other store jobs does not count (see :meth:`StoreWorker.wait`).
        """
        if not self.breaker.closed:
            raise _StoreDown(self._down_reason())
        deadline = self.deadline_s if deadline is None else deadline
        future = self._worker.submit(fn, deadline)
        try:
            return self._worker.wait(future, deadline, patient)
        except FutureTimeout:
            future.cancel()
            self._failed(f"{what}: no answer within {deadline:g} s")
        except StoreUnavailableError as exc:
            if self._stopping:  # the embedder was stopped under it: not the store's fault
                raise _StoreDown(f"{what}: the daemon is stopping") from None
            if is_storage_error(exc):
                # the store answers but its disk is full: no breaker (searches still work), writes wait
                self.storage.failed("store", str(exc), path=self.store.settings.data_dir)
                raise _StoreDown(f"conversation store cannot write ({exc})") from None
            self._failed(str(exc))
        raise _StoreDown(self._down_reason())

    def _failed(self, error: str) -> None:
        if self.breaker.failure(error):
            log.warning("conversation store is down: %s (searches use L3, writes are queued)", error)
            self.on_change()
        self._wake.set()

    def _down_reason(self) -> str:
        if self.fatal:
            return f"conversation store is off: {self.fatal}"
        return f"conversation store unreachable: {self.breaker.last_error}"

    # ------------------------------------------------------------ requests

    def add(
        self,
        agent: str,
        text: str,
        *,
        memory_type: str | None = None,
        visibility: str | None = None,
        project: str | None = None,
        expires: str | None = None,
        infer: bool | None = None,
        write_id: str | None = None,
        role: str | None = None,
    ) -> dict:
        text = self._checked_text(agent, text)
        if role not in (None, "user", "assistant"):
            raise PolicyError(f"role must be user or assistant, not {role!r}")
        try:
            placement = place(self.registry.current(), agent, text, visibility, project)
        except ForbiddenError as exc:
            self.audit.record("write_denied", agent=agent, visibility=visibility, project=project, reason=str(exc))
            raise
        memory_type = memory_type or DEFAULT_TYPE
        created = datetime.now(timezone.utc)
        life = lifetime(memory_type, self.retention, created, expires)
        if infer is None:
            infer = self.llm_configured
        elif infer and not self.llm_configured:
            raise PolicyError("infer needs an LLM: configure conversation.llm")
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
            role=role or "user",
        )
        answer = {
            "write_id": record.write_id,
            "visibility": record.visibility,
            "project_id": record.project_id,
            "visibility_inferred": placement.inferred,
            "memory_type": memory_type,
            "expiration_date": record.expiration_date,
            "infer": infer,
        }
        if retry and self._is_queued(record.write_id):
            return {**answer, **self._queued(record.write_id, "this write_id is already queued")}
        attempted = False
        depth = self._queue_depth()  # None: the queue cannot be read (a full disk kept it from opening)
        if depth == 0 or (depth is None and self._nothing_queued()):  # earlier queued writes go first
            attempted = self.breaker.closed
            try:
                results = self._call("add", lambda: self._write(record, check_first=retry))
                self.storage.succeeded("store")
                return {**answer, "queued": False, "results": results}
            except _StoreDown as exc:
                reason = str(exc)
        elif depth is None:
            reason = "the write queue cannot be read, so earlier writes may be waiting in it"
        else:
            reason = "earlier writes are still queued"
        try:
            self.queue.put(record.write_id, agent, asdict(record))
        except (apsw.Error, OSError) as exc:
            if not is_storage_error(exc):
                raise
            self.storage.failed("queue", exc, path=self.queue.path)
            raise NotStoredError(
                f"not stored: {reason}, and the write queue {self.queue.path} cannot be written "
                f"({describe_storage(exc)}); nothing was kept: write it again once there is space"
            ) from None
        self.storage.succeeded("queue")
        if attempted or retry:  # it may be in the store under mem0's random id: replay looks it up by write_id
            self.storage.attempt("queue", lambda: self.queue.failed(record.write_id, reason), path=self.queue.path)
        self._wake.set()
        self.on_change()
        return {**answer, **self._queued(record.write_id, reason)}

    def _queued(self, write_id: str, reason: str) -> dict:
        """The answer for a queued write: how many go before it and, while draining, how long that takes."""
        ahead = self.queue.ahead_of(write_id)
        rate = self._replay_rate()
        eta = f", replaying at {rate:,.0f}/s, about {_seconds(ahead / rate)} to go" if rate and ahead else ""
        return {"queued": True, "ahead": ahead, "reason": f"{reason}: {ahead:,} ahead{eta}"}

    # ------------------------------------------------------------ the queue on a disk that may be full

    def _open_queue(self) -> bool:
        return self.storage.attempt("queue", self.queue.open, path=self.queue.path)

    def _read_queue(self, read: Callable[[], T], failed: T) -> T:
        """``read()`` of the queue; ``failed`` when a full or read-only disk keeps it from opening or answering."""
        if not self.queue.opened and not self._open_queue():
            return failed
        try:
            return read()
        except (apsw.Error, OSError) as exc:
            if not is_storage_error(exc):
                raise
            self.storage.failed("queue", exc, path=self.queue.path)
            return failed

    def _queue_depth(self) -> int | None:
        """Queued writes; None when the queue cannot be opened or read."""
        return self._read_queue(self.queue.depth, None)

    def _nothing_queued(self) -> bool:
        """True when the queue file holds no byte (so no earlier write can be waiting in it)."""
        for path in (self.queue.path, Path(f"{self.queue.path}-wal")):
            try:
                if path.stat().st_size:
                    return False
            except FileNotFoundError:
                pass
            except OSError:
                return False
        return True

    def _is_queued(self, write_id: str) -> bool:
        return self._read_queue(lambda: self.queue.contains(write_id), False)

    def _check_storage(self) -> None:
        """Once a back-off has passed: does the queue (or the store's disk) take writes again?"""
        if self.storage.failing("queue") and not self.storage.waiting("queue"):
            if self.queue.opened:
                self.storage.attempt("queue", self.queue.check_writable, path=self.queue.path)
            else:
                self._open_queue()
        if self.storage.failing("store") and not self.storage.waiting("store") and not self._queue_depth():
            # no queued write to try it with: free space is the sign (a write that still fails says so again)
            if self.store.settings.backend == "remote" or has_room(self.store.settings.data_dir):
                self.storage.succeeded("store")
            else:
                self.storage.postpone("store", "")

    def _replay_waits(self) -> bool:
        """While the store's or the queue's disk is full, replay waits for the back-off."""
        return self.storage.waiting("store") or self.storage.waiting("queue")

    def _write(self, record: NewMemory, check_first: bool) -> list[dict]:
        """On the store thread: write once (a write_id already in the store is not written again)."""
        if check_first:
            existing = self.store.find_write(record.write_id)
            if existing:
                return [{"id": i, "event": "EXISTS"} for i in existing]
        if not record.infer and self.dedup.enabled:
            merged = self._dedup(record)
            if merged is not None:
                return merged
        return self.store.add(record)

    def _dedup(self, record: NewMemory) -> list[dict] | None:
        """On the store thread: the answer when ``record`` restates a memory already in its scope, else None.

        Same owner, visibility, project and type only (another type has another lifetime).  The
        same text up to whitespace and case: nothing is written, the existing id comes back with
        event NOOP.  When ``conversation.dedup.near_threshold`` is set (it is not by default: see
        DedupConfig for why), a passage cosine at or above it: the existing memory takes the new
        text (mem0's update: an UPDATE event in its history), the newest wording being the one kept.
        Replayed (queued) writes skip this: they are written once each by write_id, as queued.
        """
        candidates = [
            (m, score) for m, score in self.store.nearest(record) if m.get("memory_type") == record.memory_type
        ]
        if not candidates:
            return None
        wanted = _normalised(record.text)
        for memory, score in candidates:
            if _normalised(memory["memory"]) == wanted:
                return [{"id": memory["id"], "event": "NOOP", "memory": memory["memory"], "score": round(score, 4)}]
        memory, score = candidates[0]
        if self.dedup.near_threshold is None or score < self.dedup.near_threshold:
            return None
        self.store.update(memory["id"], record.text)
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

    def search(self, agent: str, query: str, limit: int = 10, fallback: bool = True) -> dict:
        registry = self.registry.current()
        phases = read_phases(registry, agent)
        try:
            found = self._call("search", lambda: self.store.search(query, phases, limit))
        except _StoreDown as exc:
            reason = str(exc)
        else:
            results = [r for r in found if may_read(registry, agent, r)]  # the filters already did; checked again
            return {"layer": "conversation", "degraded": False, "query": query, "results": results}
        if not fallback:
            raise ConversationUnavailableError(reason)
        local = self.local_search(agent, query, limit)
        return {
            "layer": "local",
            "degraded": True,
            "reason": reason,
            "query": query,
            "results": [_local_view(r) for r in local["results"]],
            "vectors": local.get("vectors"),
        }

    def get_all(self, agent: str, limit: int = 100, cursor: str | None = None) -> dict:
        registry = self.registry.current()
        phases = read_phases(registry, agent)
        try:
            page, next_cursor = self._call("list", lambda: self.store.list(phases, limit, cursor))
        except _StoreDown as exc:
            raise ConversationUnavailableError(str(exc)) from None
        except ValueError as exc:
            raise PolicyError(str(exc)) from None
        results = [r for r in page if may_read(registry, agent, r)]
        return {"results": results, "next_cursor": next_cursor, "truncated": next_cursor is not None}

    def _fetch(self, memory_id: str) -> dict | None:
        try:
            uuid.UUID(memory_id)
        except ValueError:
            return None  # memory ids are UUIDs; anything else is simply not found
        try:
            return self._call("get", lambda: self.store.get(memory_id))
        except _StoreDown as exc:
            raise ConversationUnavailableError(str(exc)) from None

    def get(self, agent: str, memory_id: str, admin: bool = False) -> dict:
        memory = self._fetch(memory_id)
        if memory is None:
            raise LookupError(f"no memory {memory_id}")
        if not admin and not may_read(self.registry.current(), agent, memory):
            self._denied("read_denied", agent, memory)
            raise LookupError(f"no memory {memory_id}")  # another's memory is not even admitted to exist
        return memory

    def delete(self, agent: str, memory_id: str, admin: bool = False) -> dict:
        """Delete one of ``agent``'s own memories; while the store is down refused (503), never queued."""
        memory = self._owned(agent, memory_id, admin, "delete")
        try:
            self._call("delete", lambda: self.store.delete(memory_id))
        except _StoreDown as exc:
            raise ConversationUnavailableError(_not_changed(exc)) from None
        self._deleted(agent, memory)
        return {"deleted": memory_id}

    def _deleted(self, agent: str, memory: dict) -> None:
        """After a delete: its owner kept for its history (see layers/conversation/tombstones.py), audited."""
        self.tombstones.record(memory, datetime.now(timezone.utc).isoformat(timespec="seconds"))
        self.audit.record("memory_deleted", agent=agent, memory_id=memory.get("id"), owner=memory.get("agent_id"))

    def _owned(self, agent: str, memory_id: str, admin: bool, what: str) -> dict:
        """The memory, when ``agent`` owns it; 403 when the agent may read it but not change it, else 404."""
        try:
            memory = self._fetch(memory_id)
        except ConversationUnavailableError as exc:
            raise ConversationUnavailableError(_not_changed(exc)) from None
        if memory is None:
            raise LookupError(f"no memory {memory_id}")
        if not admin and memory.get("agent_id") != agent:
            self._denied(f"{what}_denied", agent, memory)
            if may_read(self.registry.current(), agent, memory):
                owner = memory.get("agent_id")
                raise ForbiddenError(f"memory {memory_id} belongs to {owner}; only its owner may {what} it")
            raise LookupError(f"no memory {memory_id}")
        return memory

    def update(self, agent: str, memory_id: str, text: str, *, expires: str | None = None, admin: bool = False) -> dict:
        """Replace the text of one of ``agent``'s own memories (mem0's ``update``).

        The memory keeps its id, owner, placement, type and created_at; it is
        re-embedded, gets updated_at and an UPDATE event in its history, and the
        change is audited.  The same checks as ``add`` apply to the new text
        (empty, too long, secrets).  While the store is down an update is refused
        with 503 and nothing changes (it is never queued: whose the memory is,
        and what it says now, can only be read from the store).
        """
        text = self._checked_text(agent, text)
        memory = self._owned(agent, memory_id, admin, "update")
        expiration = None
        if expires is not None:
            now = datetime.now(timezone.utc)
            life = lifetime(memory.get("memory_type") or DEFAULT_TYPE, self.retention, now, expires)
            expiration = (life.expiration_date, life.expires_at)
        try:
            self._call("update", lambda: self.store.update(memory_id, text, expiration))
        except _StoreDown as exc:
            raise ConversationUnavailableError(_not_changed(exc)) from None
        self.audit.record("memory_updated", agent=agent, memory_id=memory_id, owner=memory.get("agent_id"))
        updated = self._fetch(memory_id) or {**memory, "memory": text}
        return {**updated, "event": "UPDATE", "previous_memory": memory.get("memory")}

    def history(self, agent: str, memory_id: str, admin: bool = False) -> dict:
        """mem0's ADD/UPDATE/DELETE events of a memory the caller may read (or could, before it was deleted)."""
        memory = self._fetch(memory_id)
        if memory is None:
            memory = self.tombstones.lookup(memory_id) if _is_uuid(memory_id) else None
        if memory is None:
            raise LookupError(f"no memory {memory_id}")
        if not admin and not may_read(self.registry.current(), agent, memory):
            self._denied("history_denied", agent, memory)
            raise LookupError(f"no memory {memory_id}")
        try:
            events = self._call("history", lambda: self.store.history(memory_id))
        except _StoreDown as exc:
            raise ConversationUnavailableError(str(exc)) from None
        return {"memory_id": memory_id, "results": events}

    def delete_all(
        self,
        agent: str,
        *,
        memory_type: str | None = None,
        visibility: str | None = None,
        project: str | None = None,
        dry_run: bool = False,
    ) -> dict:
        """Delete every one of ``agent``'s own memories that match the filter (never another agent's).

        Each goes through mem0's delete, so each gets its DELETE event.  While
        the store is down this is refused (503) and nothing is deleted; stopped
        half-way by an outage, the answer says how many went first and running
        it again deletes the rest.
        """
        selection = Selection(agent=agent, visibility=visibility, project=project, memory_type=memory_type)
        deleted: list[str] = []
        cursor: str | None = None
        while True:
            try:
                page, cursor = self._call(
                    "delete_all", lambda c=None if not dry_run else cursor: self.store.scan(selection, 256, c)
                )
            except _StoreDown as exc:
                raise ConversationUnavailableError(_not_changed(exc, len(deleted))) from None
            mine = [m for m in page if m.get("agent_id") == agent]  # the filter already did; checked again
            if dry_run:
                deleted += [m["id"] for m in mine]
                if not cursor:
                    break
                continue
            if not mine:
                break
            for memory in mine:
                try:
                    self._call("delete", lambda i=memory["id"]: self.store.delete(i))
                except _StoreDown as exc:
                    raise ConversationUnavailableError(_not_changed(exc, len(deleted))) from None
                self._deleted(agent, memory)
                deleted.append(memory["id"])
            if len(mine) < len(page):  # a filter the store did not apply: never loop on what is left
                break
        return {"deleted": len(deleted), "ids": deleted, "dry_run": dry_run}

    def _checked_text(self, agent: str, text: str) -> str:
        """A memory's text as add and update accept it: stripped, not empty, not too long, no secret."""
        text = text.strip()
        if not text:
            raise PolicyError("nothing to remember: the text is empty")
        if len(text) > MAX_TEXT_CHARS:
            raise PolicyError(f"the text is {len(text)} characters; a memory holds at most {MAX_TEXT_CHARS}")
        findings = self.guard().scan_text(text)
        if findings:
            kinds = sorted({f.kind for f in findings})
            self.audit.record("secret_refused", agent=agent, kinds=kinds)
            raise SecretRefusedError(
                f"refused: the text matches never_store pattern(s) {', '.join(kinds)}; "
                "remove the secret (store where it is kept, not the secret itself)"
            )
        return text

    def _denied(self, event: str, agent: str, memory: dict) -> None:
        self.audit.record(
            event,
            agent=agent,
            memory_id=memory.get("id"),
            owner=memory.get("agent_id"),
            visibility=memory.get("visibility"),
            project=memory.get("project_id"),
        )

    # ------------------------------------------------------------ maintenance (administrator)

    def _admin_call(self, what: str, fn: Callable[[], object], deadline: float | None = None) -> object:
        self.wait_until_open(what)
        try:
            return self._call(what, fn, deadline, patient=True)
        except _StoreDown as exc:
            raise ConversationUnavailableError(str(exc)) from None

    def wait_until_open(self, what: str, wait_s: float = STORE_OPEN_WAIT_S) -> None:
        """Maintenance started with the daemon (a timer with Persistent=true at boot) waits for the store.

        Opening the embedded store takes seconds after the daemon is ready (and a
        remote one may be down for a moment); a backup or cleanup waits up to
        ``wait_s`` for it instead of failing at once, then says why it gave up.
        """
        deadline = time.monotonic() + wait_s
        if not self.breaker.closed and not self.fatal:
            self._wake.set()  # probe now rather than after the probe interval
        while not self.breaker.closed and not self.fatal and not self._stopping:
            if time.monotonic() >= deadline:
                raise ConversationUnavailableError(
                    f"{what}: the conversation store did not open within {wait_s:g} s ({self._down_reason()})"
                )
            time.sleep(0.1)

    def cleanup(self, options: maintenance.CleanupOptions) -> dict:
        """Page by page on the store thread, so agents' requests go on between the pages."""
        return maintenance.cleanup(self.config, _BrokeredStore(self), options)

    def backup(self, keep: int) -> dict:
        return self._admin_call("backup", lambda: maintenance.backup(self.config, self.store, keep), MAINTENANCE_S)

    def restore(self, archive: Path) -> dict:
        def run() -> dict:
            result = maintenance.restore(self.store, archive)
            self.store.connect()
            return result

        return self._admin_call("restore", run, MAINTENANCE_S)

    # ------------------------------------------------------------ probe, replay

    def _reachable(self) -> str:
        """A quick look (probe timeout) before anything waits on the store; "" when it answers."""
        not_ready = self.embedder_ready()
        if not_ready:
            return f"embedder unavailable: {not_ready}"
        s = self.store.settings
        if s.backend != "remote":
            return ""
        headers = {"api-key": s.api_key} if s.api_key else {}
        try:
            response = httpx.get(s.url.rstrip("/") + "/readyz", headers=headers, timeout=self.probe_timeout_s)
        except httpx.HTTPError as exc:
            return f"probe: {describe_error(exc)}"
        return "" if response.status_code < 500 else f"probe: HTTP {response.status_code}"

    def _probe(self) -> None:
        problem = self._reachable()
        if problem:
            self.breaker.failure(problem)
            return
        future = self._worker.submit(lambda: (self.store.connect(), self.store.ping())[1], CONNECT_DEADLINE_S)
        try:
            self.rtt_ms = self._worker.wait(future, CONNECT_DEADLINE_S)
        except StoreConfigError as exc:
            self.fatal = str(exc)
            self.breaker.failure(self.fatal)
            log.error("conversation store is off: %s", exc)
            self.on_change()
            return
        except (StoreUnavailableError, FutureTimeout) as exc:
            future.cancel()
            if is_storage_error(exc):  # the embedded store cannot even open on a full disk
                self.storage.failed("store", str(exc), path=self.store.settings.data_dir)
            self.breaker.failure(describe_error(exc) if isinstance(exc, FutureTimeout) else str(exc))
            return
        if (self.storage.error("store") or "").startswith("connect"):
            self.storage.succeeded("store")  # it opened; a write that still fails says so again
        self._last_ping = time.monotonic()
        if self.breaker.success():
            log.info("conversation store is reachable (%.1f ms)", self.rtt_ms)
            self.on_change()

    def _replay(self) -> None:
        """The next batch of queued writes, oldest first, each exactly once; stops at the first failure."""
        items = self.queue.peek(self._batch_size)
        started = time.monotonic()
        handled = 0
        for plain, group in groupby(items, key=lambda item: not item.request.get("infer")):
            if self._stopping:
                break  # the rest stays queued for the next start
            run = list(group)
            count = self._replay_plain(run) if plain else self._replay_inferred(run)
            handled += count
            if count < len(run):
                break  # the store failed: the breaker is open, the rest waits for it
        busy = time.monotonic() - started
        drain = self._drain or {"handled": 0, "busy_s": 0.0}
        drain["handled"] += handled
        drain["busy_s"] += busy
        self._drain = drain
        if handled == len(items) and busy > 0:
            size = min(2 * len(items), int(handled / busy * REPLAY_BATCH_S))
        else:  # the store failed (or was slow past its deadline): try smaller next time
            size = self._batch_size // 2
        self._batch_size = max(REPLAY_BATCH_MIN, min(REPLAY_BATCH_MAX, size))
        if handled:
            self.on_change()
        if self.queue.depth() == 0:
            log.info(
                "queue drained: %d written, %d already present, %d set aside (%.1f writes/s)",
                self.replayed,
                self.skipped,
                self.set_aside,
                drain["handled"] / max(drain["busy_s"], 1e-6),
            )
            self._drain = None

    def _replay_plain(self, items: list[QueuedWrite]) -> int:
        """``infer=False`` writes as one batch; how many left the queue (all of them unless the store failed)."""
        readable: list[tuple[QueuedWrite, NewMemory]] = []
        handled = 0
        for item in items:
            try:
                readable.append((item, NewMemory(**item.request)))
            except TypeError as exc:  # written by another version: it can never be replayed as it is
                self._set_aside(item, f"unreadable queued request: {describe_error(exc)}")
                handled += 1
        if not readable:
            return handled
        records = [record for _, record in readable]
        # tried before (a direct add that failed, an earlier batch that timed out): maybe stored already
        suspects = {item.write_id for item, _ in readable if item.attempts}
        if not self._head_checked:
            suspects.add(readable[0][0].write_id)
        deadline = self.deadline_s + REPLAY_PER_WRITE_S * len(records)
        try:
            results = self._call("replay", lambda: self.store.add_batch(records, suspects), deadline, patient=True)
        except _StoreDown as exc:
            if not self._stopping:
                w, why = readable[0][0].write_id, str(exc)
                self.storage.attempt("queue", lambda: self.queue.failed(w, why), path=self.queue.path)
            return handled
        except StoreRequestError as exc:
            if len(readable) > 1:  # find the one(s) refused: each alone
                for item, _ in readable:
                    count = self._replay_plain([item])
                    handled += count
                    if not count:
                        break
                return handled
            results = [BatchResult(records[0].write_id, "REFUSED", reason=str(exc))]
        self._head_checked = True
        done = []
        for (item, _), result in zip(readable, results, strict=True):
            if result.event == "REFUSED":
                self._set_aside(item, result.reason)
                continue
            done.append(item.write_id)
            if result.event == "EXISTS":
                self.skipped += 1
            else:
                self.replayed += 1
        self.storage.succeeded("store")
        if not self.storage.attempt("queue", lambda: self.queue.done_many(done), path=self.queue.path):
            return handled  # written, still queued: replaying them again replaces the same points
        return handled + len(readable)

    def _replay_inferred(self, items: list[QueuedWrite]) -> int:
        """``infer=True`` writes one by one through mem0's LLM path, in their place in the queue."""
        for handled, item in enumerate(items):
            try:
                record = NewMemory(**item.request)
                results = self._call("replay", lambda r=record: self._write(r, check_first=True), patient=True)
            except TypeError as exc:
                self._set_aside(item, f"unreadable queued request: {describe_error(exc)}")
                continue
            except StoreRequestError as exc:
                self._set_aside(item, str(exc))
                continue
            except _StoreDown as exc:
                if not self._stopping:
                    # the attempt count is a courtesy: a full queue disk must not stop the replay loop
                    self.storage.attempt("queue", lambda w=item.write_id, e=str(exc): self.queue.failed(w, e))
                return handled
            self.storage.succeeded("store")
            if not self.storage.attempt("queue", lambda w=item.write_id: self.queue.done(w), path=self.queue.path):
                return handled  # written, still queued: the next replay finds its write_id in the store
            if results and all(r.get("event") == "EXISTS" for r in results):
                self.skipped += 1
            else:
                self.replayed += 1
        return len(items)

    def _set_aside(self, item: QueuedWrite, reason: str) -> None:
        """A write the store refuses: kept aside with the reason, so the writes behind it go on."""
        if self.queue.set_aside(item.write_id, reason):
            self.set_aside += 1
        log.warning("queued write %s of %s set aside: the store refuses it: %s", item.write_id, item.agent_id, reason)
        self.audit.record("queued_write_set_aside", agent=item.agent_id, write_id=item.write_id, reason=reason)

    def _replay_rate(self) -> float | None:
        """Writes per second over this drain's batches; None when no drain is under way."""
        drain = self._drain
        if not drain or not drain["handled"] or drain["busy_s"] <= 0:
            return None
        return drain["handled"] / drain["busy_s"]

    def _ping(self) -> None:
        try:
            self.rtt_ms = self._call("ping", self.store.ping)
        except _StoreDown:
            return
        self._last_ping = time.monotonic()

    def _probe_loop(self) -> None:
        while not self._stopping:
            try:
                self._check_storage()
                if self.fatal:
                    pass
                elif not self.breaker.closed:
                    self._probe()
                elif not self._replay_waits() and self.queue.opened and self._queue_depth():
                    self._replay()
                    continue  # drain the next batch at once
                elif time.monotonic() - self._last_ping >= PING_INTERVAL_S:
                    self._ping()
                self._refresh_tailscale()
            except Exception:  # the prober must survive anything
                log.exception("conversation probe failed")
            self._wake.wait(self.breaker.probe_interval_s)
            self._wake.clear()

    def _queue_view(self, fn: Callable[[], object]) -> object:
        """A figure for status, never an exception (status runs in the daemon's loop)."""
        if not self.queue.opened:
            return None
        try:
            return fn()
        except (apsw.Error, OSError):
            return None

    def _refresh_tailscale(self) -> None:
        s = self.store.settings
        if s.backend != "remote" or time.monotonic() - self._tailscale_at < TAILSCALE_REFRESH_S:
            return
        self._tailscale_at = time.monotonic()
        self.tailscale = tailscale_view(s.url or "")

    # ------------------------------------------------------------ status

    def _queue_status(self) -> dict:
        depth = self._queue_view(self.queue.depth)
        rate = self._replay_rate()
        return {
            "depth": depth,
            "oldest_age_s": self._queue_view(self.queue.oldest_age_s),
            "writable": not self.storage.failing("queue"),
            "replayed": self.replayed,
            "skipped_already_written": self.skipped,
            "replay_rate_per_s": None if rate is None else round(rate, 1),
            "eta_s": None if not rate or not depth else round(depth / rate, 1),
            "set_aside": self._queue_view(self.queue.set_aside_count),
            # write ids and reasons, never the text
            "set_aside_recent": self._queue_view(lambda: self.queue.set_aside_writes(limit=5)),
        }

    def status(self) -> dict:
        if self._final_status is not None:
            return self._final_status
        self.registry.current()  # re-read if it changed: status shows a broken edit before any request does
        s = self.store.settings
        return {
            "enabled": True,
            "backend": s.backend,
            "engine": s.engine if s.backend == "embedded" else None,
            "import": self.store.import_progress,  # an old local-mode store being brought into Edge
            "index": self.store.index_status(),  # Edge: indexed vs unindexed points, the optimize under way/last
            "collection": s.collection,
            "url": s.url,
            "reachable": self.breaker.closed,
            "rtt_ms": self.rtt_ms if self.breaker.closed else None,
            "breaker": self.breaker.snapshot(),
            "last_error": self.fatal or self.breaker.last_error,
            "error": self.fatal,
            "queue": self._queue_status(),
            "infer_default": self.llm_configured,
            "registry_error": self.registry.error,
            "tailscale": self.tailscale,
        }


def _not_changed(exc: Exception, done: int = 0) -> str:
    """Why a change was refused while the store is down, and that it was not queued."""
    first = f"{done} deleted before the store stopped answering; " if done else ""
    return f"{exc}; {first}nothing (more) was changed and nothing was queued: try again once the store is back"


def _normalised(text: str) -> str:
    """A memory's text as exact-duplicate detection compares it: whitespace collapsed, case folded."""
    return " ".join(text.split()).casefold()


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _seconds(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


_TAILSCALE_NETS = (ipaddress.ip_network("100.64.0.0/10"), ipaddress.ip_network("fd7a:115c:a1e0::/48"))


def tailscale_view(url: str) -> dict | None:
    """What ``tailscale status`` says about the peer at ``url`` (None when it is no Tailscale address)."""
    host = urlparse(url).hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if not any(address in net for net in _TAILSCALE_NETS):
        return None
    exe = shutil.which("tailscale")
    if exe is None:
        return {"peer": host, "available": False, "reason": "the tailscale CLI is not installed here"}
    try:
        out = subprocess.run([exe, "status", "--json"], capture_output=True, text=True, timeout=3, check=True).stdout
        peers = json.loads(out).get("Peer") or {}
    except (subprocess.SubprocessError, OSError, ValueError) as exc:
        return {"peer": host, "available": False, "reason": f"tailscale status failed: {describe_error(exc)}"}
    for peer in peers.values():
        if host in (peer.get("TailscaleIPs") or []):
            return {
                "peer": host,
                "available": True,
                "host_name": peer.get("HostName"),
                "online": peer.get("Online"),
                "last_seen": peer.get("LastSeen"),
                "cur_addr": peer.get("CurAddr") or None,
                "relay": peer.get("Relay") or None,
            }
    return {"peer": host, "available": True, "reason": "no peer with this address in tailscale status"}
