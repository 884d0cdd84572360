"""The L4 broker: every conversation-memory request passes through here.

It applies, in order, what the API layer cannot know and the store must not
decide: the secret guard, placement (visibility from the project registry),
lifetime, and the outage rules.  This module composes the parts, one job each:

- daemon/conversation/writes.py   where an L4 write goes (add, update, delete; queued when the store is down)
- daemon/conversation/reads.py    search (with the L3 fallback), list, get, history
- daemon/conversation/store_thread.py  the one thread that touches the store, and the circuit breaker
- daemon/conversation/queue.py    the durable write queue on a disk that may be full
- daemon/conversation/replay.py   the probe loop: reconnects, replays the queue exactly once
- daemon/conversation/maintenance_jobs.py  cleanup, backup, restore, consolidation from the running daemon
- daemon/conversation/status_section.py   the ``conversation`` section of status
- daemon/conversation/tailscale.py   what tailscale says about a remote store's peer
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.common.audit import AuditLog
from daemon.common.config import Config
from daemon.common.contracts import ConversationStatus, SearchAnswer
from daemon.common.guard import SecretGuard
from daemon.common.jobs import StoreWorker
from daemon.common.settings import decay_rules, store_deadline, store_settings
from daemon.common.storage import StorageHealth
from daemon.conversation.access import AccessRecorder
from daemon.conversation.checkpoint import Checkpointer
from daemon.conversation.feed import ChangeFeed, feed_path
from daemon.conversation.maintenance_jobs import Maintenance
from daemon.conversation.queue import QueueAccess
from daemon.conversation.reads import Reads
from daemon.conversation.replay import DrainRate, Replayer
from daemon.conversation.status_section import conversation_status
from daemon.conversation.store_thread import StoreThread
from daemon.conversation.tailscale import tailscale_view
from daemon.conversation.writes import Writes
from daemon.ops.consolidation import ConsolidateOptions
from layers.conversation.adapters.breaker import Breaker
from layers.conversation.adapters.store import ConversationStore
from layers.conversation.lifecycle.durable_queue import WriteQueue
from layers.conversation.lifecycle.tombstones import Tombstones
from layers.conversation.policy.registry import RegistryCache
from protocol.operations import Add, Cleanup, DeleteAll, List, MemorySearch, RestoreMemory, Search, Update

__all__ = ["Broker", "StoreWorker", "tailscale_view"]

log = logging.getLogger(__name__)

# The Qdrant client's own timeout bounds every request to a server; a caller's deadline is
# only the backstop for a call that also waits on the embedder (a model load, L3's batch).
STOP_WAIT_S = 3.0  # stop()'s default wait; the daemon passes its own share of STOP_BUDGET_S


def queue_path(config: Config) -> Path:
    """Where the durable write queue (the write-ahead log of L4 adds) lives."""
    return config.paths.state_dir / "conversation" / "queue.sqlite"


class Broker:
    """The L4 parts composed; the methods the API server and the daemon call.

    The daemon's composition root (daemon/service/memory_daemon.py) builds what others share and hands it
    in: the write queue, the project registry's cache and the daemon's one audit log.
    """

    def __init__(
        self,
        config: Config,
        store: ConversationStore,
        local_search: Callable[[Search], SearchAnswer],  # the L3 fallback: the daemon's search of the index
        guard: Callable[[], SecretGuard],
        *,
        queue: WriteQueue,
        registry: RegistryCache,
        audit: AuditLog,
        embedder_ready: Callable[[], str] = lambda: "",
        on_change: Callable[[], None] = lambda: None,
        storage: StorageHealth | None = None,
        pause: Callable[[], None] = lambda: None,
    ) -> None:
        """``pause``: called before a write embeds its text (a flood's write makes way there)."""
        c = config.conversation
        self.storage = storage or StorageHealth()  # the queue's and the store's full disks
        self.config = config
        self.registry = registry
        self.audit = audit
        self.queue = queue
        self.tombstones = Tombstones(config.paths.state_dir / "conversation" / "deleted.sqlite")
        self.queue_access = QueueAccess(self.queue, self.storage)
        self.queue_access.open()  # a full disk leaves it closed: writes then go to the store or get 507
        store.decay = decay_rules(config)  # how importance ranks searches (layers/conversation/policy/decay.py)
        # the hub (fleet.listen): every change is recorded for the spokes' replicas, the write-ahead log's
        # replay at start included, so the feed is the store's before anything can change it
        self.feed: ChangeFeed | None = None
        if config.fleet.listen:
            fleet = config.fleet
            self.feed = ChangeFeed(
                feed_path(config.paths.state_dir), fleet.feed_retention_days * 86400, fleet.feed_max_entries
            )
            store.feed = self.feed
        self.thread = StoreThread(
            store, Breaker(c.probe_interval_s), store_deadline(config), self.storage, on_change, pause
        )
        # the store flushed and the write-ahead log trimmed, off the request path (daemon/conversation/checkpoint.py)
        self.checkpointer = Checkpointer(self.thread.worker, lambda: self.thread.store, self.queue_access)
        store.changed = self.checkpointer.changed
        self.access = AccessRecorder(self.thread)  # decay by use: counted on reads, written in batches
        self.reads = Reads(self.thread, self.registry, self.audit, self.tombstones, local_search, self.access.hit)
        drain = DrainRate()  # the replayer measures it, a queued write's answer reads it
        self.writes = Writes(
            self.thread,
            self.reads,
            self.queue_access,
            self.registry,
            self.audit,
            self.tombstones,
            self.storage,
            guard,
            checkpointer=self.checkpointer,
            replay_rate=drain.rate,
            on_change=on_change,
        )
        self.writes.configure(c.retention_days, c.dedup, c.llm is not None)
        self.replayer = Replayer(
            self.thread,
            self.queue_access,
            self.storage,
            self.audit,
            self.writes.write,
            embedder_ready,
            on_change,
            c.probe_timeout_s,
            drain,
        )
        self.maintenance = Maintenance(self.thread, lambda: self.config, self.checkpointer)
        self._final_status: ConversationStatus | None = None  # what status() says once the queue is closed

    @property
    def store(self) -> ConversationStore:
        return self.thread.store

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.checkpointer.start()
        self.replayer.start()
        self.access.start()

    def request_stop(self) -> None:
        """Begin stopping, without waiting: replay and cleanup end before their next item or page."""
        self.thread.stopping = True
        self.thread.attention.set()

    def stop(self, timeout: float = STOP_WAIT_S) -> bool:
        """Stop within ``timeout``: the call in progress may finish, nothing new starts.

        Queued writes not yet replayed stay queued (replay is exactly-once by
        write_id, so the next start goes on where this one stopped).  A call that
        does not end in time (a hung link) is left to its daemon thread; the
        result says whether every thread of the broker has ended.
        """
        deadline = time.monotonic() + timeout
        self.request_stop()
        prober_ended = self.replayer.join(max(0.0, deadline - time.monotonic()))
        self.access.stop(max(0.0, deadline - time.monotonic()) / 2)  # the hits not yet written, then the store closes
        self.checkpointer.stop()
        self.thread.worker.submit(self.checkpointer.checkpoint)  # the last one: what the log holds, flushed
        worker_ended = self.thread.close(max(0.0, deadline - time.monotonic()))
        self._final_status = self.status()
        self.audit.flush()  # the counts of refusals folded since their last line
        if not prober_ended:
            return False  # it still holds the queue; the process exit closes it
        self.queue.close()
        self.tombstones.close()
        if self.feed is not None and worker_ended:
            self.feed.close()
        return worker_ended

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
            for name in ("retention_days", "probe_interval_s", "probe_timeout_s", "dedup", "decay")
            if getattr(new, name) != getattr(old, name)
        ]
        self.config = config
        llm_configured = self.writes.llm_configured
        self.thread.breaker.probe_interval_s = new.probe_interval_s
        self.replayer.probe_timeout_s = new.probe_timeout_s
        self.thread.deadline_s = store_deadline(config)
        self.thread.store.decay = decay_rules(config)  # a reconnect below carries it to the new store
        if settings != self.thread.store.settings:
            changed.append("conversation store (reconnected)")
            llm_configured = new.llm is not None
            self.replayer.reconnecting()
            self.thread.reconnect(settings)
            log.info("conversation store: reconnecting to %s", settings.url or f"embedded {settings.data_dir}")
        self.writes.configure(new.retention_days, new.dedup, llm_configured)
        return changed

    # ------------------------------------------------------------ requests (daemon/conversation/writes.py, l4_reads.py)

    def add(self, o: Add, *, admin: bool = False) -> dict[str, Any]:
        """An L4 write (``admin``: the administrator's, acting as ``o.agent``)."""
        return self.writes.add(o, admin=admin)

    # Changes and reads by id act as ``agent``, with ``agent``'s visibility and ownership, whoever's token
    # asked (the administrator's too: ``--agent X`` means "as X"; the audit log names the real actor).

    def update(self, o: Update) -> dict[str, Any]:
        return self.writes.update(o)

    def delete(self, agent: str, memory_id: str) -> dict[str, Any]:
        return self.writes.delete(agent, memory_id)

    def restore_memory(self, o: RestoreMemory) -> dict[str, Any]:
        return self.writes.restore(o)

    def delete_all(self, o: DeleteAll) -> dict[str, Any]:
        return self.writes.delete_all(o)

    def search(self, o: MemorySearch) -> dict[str, Any]:
        return self.reads.search(o)

    def get_all(self, o: List) -> dict[str, Any]:
        return self.reads.get_all(o)

    def get(self, agent: str, memory_id: str, admin: bool = False) -> dict[str, Any]:
        return self.reads.get(agent, memory_id, admin=admin)

    def history(self, agent: str, memory_id: str) -> dict[str, Any]:
        return self.reads.history(agent, memory_id)

    # ------------------------------------------------------------ maintenance (daemon/conversation/maintenance_jobs.py)

    def wait_until_open(self, what: str, wait_s: float | None = None) -> None:
        if wait_s is None:
            self.thread.wait_until_open(what)
        else:
            self.thread.wait_until_open(what, wait_s)

    def cleanup(self, o: Cleanup) -> dict[str, Any]:
        """Page by page on the store thread, so agents' requests go on between the pages."""
        return self.maintenance.cleanup(o)

    def consolidate(self, options: ConsolidateOptions) -> dict[str, Any]:
        """Pages on the store thread, the batch as one job there (daemon/ops/consolidation.py)."""
        return self.maintenance.consolidate(options)

    def backup(self, keep: int) -> dict[str, Any]:
        return self.maintenance.backup(keep)

    def restore(self, archive: Path) -> dict[str, Any]:
        result = self.maintenance.restore(archive)
        if self.feed is not None:  # the whole collection replaced: every spoke rebuilds its replica
            self.feed.new_epoch()
        return result

    # ------------------------------------------------------------ status (daemon/conversation/status_section.py)

    def status(self) -> ConversationStatus:
        if self._final_status is not None:
            return self._final_status
        status = conversation_status(
            self.thread,
            self.registry,
            self.replayer,
            self.queue_access,
            self.storage,
            self.checkpointer,
            self.writes.llm_configured,
            self.maintenance.consolidating,
        )
        status["use"] = self.access.status()
        status["feed"] = self.feed.status() if self.feed is not None else None
        return status
