"""The ``conversation`` section of the status document (what `memstrata status` shows of L4)."""

from __future__ import annotations

from typing import Any

from daemon.common.contracts import ConversationStatus, QueueStatus
from daemon.common.storage import StorageHealth
from daemon.conversation.checkpoint import Checkpointer
from daemon.conversation.queue import QueueAccess
from daemon.conversation.replay import Replayer
from daemon.conversation.store_thread import StoreThread
from layers.conversation.policy.registry import RegistryCache


def queue_status(
    queue: QueueAccess, replay: Replayer, storage: StorageHealth, checkpointer: Checkpointer
) -> QueueStatus:
    depth = queue.view(queue.queue.depth)
    rate = replay.rate()
    return {
        "depth": depth,
        "oldest_age_s": queue.view(queue.queue.oldest_age_s),
        "writable": not storage.failing("queue"),
        "replayed": replay.replayed,
        "skipped_already_written": replay.skipped,
        "replay_rate_per_s": None if rate is None else round(rate, 1),
        "eta_s": None if not rate or not depth else round(depth / rate, 1),
        "set_aside": queue.view(queue.queue.set_aside_count),
        # write ids and reasons, never the text
        "set_aside_recent": queue.view(lambda: queue.queue.set_aside_writes(limit=5)),
        "unflushed": queue.view(queue.queue.unflushed),
        "checkpoints": checkpointer.checkpoints,
        "checkpoint_error": checkpointer.last_error,
    }


def conversation_status(
    thread: StoreThread,
    registry: RegistryCache,
    replayer: Replayer,
    queue: QueueAccess,
    storage: StorageHealth,
    checkpointer: Checkpointer,
    llm_configured: bool,
    consolidating: dict[str, Any] | None = None,
) -> ConversationStatus:
    """The section from the parts the broker composes (each handed in: this module knows no broker)."""
    registry.current()  # re-read if it changed: status shows a broken edit before any request does
    store = thread.store
    s = store.settings
    closed = thread.breaker.closed
    return {
        "enabled": True,
        "backend": s.backend,
        "engine": s.engine if s.backend == "embedded" else None,
        "import": store.import_progress,  # an old local-mode store being brought into Edge
        "index": store.index_status(),  # Edge: indexed vs unindexed points, the optimize under way/last
        "collection": s.collection,
        "url": s.url,
        "reachable": closed,
        "rtt_ms": replayer.rtt_ms if closed else None,
        "breaker": thread.breaker.snapshot(),
        "last_error": thread.fatal or thread.breaker.last_error,
        "error": thread.fatal,
        "queue": queue_status(queue, replayer, storage, checkpointer),
        "infer_default": llm_configured,
        "registry_error": registry.error,
        "tailscale": replayer.tailscale.view,
        "consolidation": consolidating,  # a run under way: phase, done, total (no text, no ids)
    }
