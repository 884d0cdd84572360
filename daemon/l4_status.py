"""The ``conversation`` section of the status document (what `memstrata status` shows of L4)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.broker import Broker


def queue_status(broker: Broker) -> dict:
    queue, replay = broker.queue_access, broker.replayer
    depth = queue.view(queue.queue.depth)
    rate = replay.rate()
    return {
        "depth": depth,
        "oldest_age_s": queue.view(queue.queue.oldest_age_s),
        "writable": not broker.storage.failing("queue"),
        "replayed": replay.replayed,
        "skipped_already_written": replay.skipped,
        "replay_rate_per_s": None if rate is None else round(rate, 1),
        "eta_s": None if not rate or not depth else round(depth / rate, 1),
        "set_aside": queue.view(queue.queue.set_aside_count),
        # write ids and reasons, never the text
        "set_aside_recent": queue.view(lambda: queue.queue.set_aside_writes(limit=5)),
    }


def conversation_status(broker: Broker) -> dict:
    broker.registry.current()  # re-read if it changed: status shows a broken edit before any request does
    thread = broker.thread
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
        "rtt_ms": broker.replayer.rtt_ms if closed else None,
        "breaker": thread.breaker.snapshot(),
        "last_error": thread.fatal or thread.breaker.last_error,
        "error": thread.fatal,
        "queue": queue_status(broker),
        "infer_default": broker.writes.llm_configured,
        "registry_error": broker.registry.error,
        "tailscale": broker.replayer.tailscale.view,
    }
