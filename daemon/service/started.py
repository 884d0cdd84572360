"""The parts the daemon makes when it starts rather than when it is composed.

The broker opens the store, the API binds the socket, the watcher and the
embedding worker start threads: none of that may happen in ``MemoryDaemon()``
(``memstrata reindex`` composes the daemon offline and starts none of them).
The parts that use them are composed earlier, so they are handed this holder
and find each part here once it runs (None before, or when it is off).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.api.app import ApiServer
    from daemon.conversation.broker import Broker
    from daemon.conversation.hub import HubBroker
    from daemon.files.shared_sync import SharedCoreSync
    from daemon.files.sync import Pusher
    from daemon.files.watcher import Watcher
    from daemon.local.embedding import EmbedWorker
    from layers.local.models.vectors import Embedder


@dataclass
class Started:
    broker: Broker | HubBroker | None = None  # HubBroker: conversation.backend hub (a spoke's L4 is the hub's)
    watcher: Watcher | None = None
    embed_worker: EmbedWorker | None = None
    api: ApiServer | None = None
    mem0_api: ApiServer | None = None  # mem0's REST API on a loopback port (conversation.mem0_api)
    peer_api: ApiServer | None = None  # on the hub: its peer API for the spokes' L4 (fleet.listen)
    l4_embedder: Embedder | None = None  # L4's embedder when it is not L3's (vectors off)
    pusher: Pusher | None = None  # the history copies to git.remote (daemon/files/sync.py), when set
    shared_core: SharedCoreSync | None = None  # the shared core pushed or fetched (daemon/files/shared_sync.py)

    def vectors_blocked(self) -> str:
        """Why the embedding worker cannot embed right now ("" when it can, or when there is none)."""
        return self.embed_worker.waiting_reason if self.embed_worker is not None else ""
