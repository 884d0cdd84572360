"""The L4 store's own thread, and the breaker in front of it.

The store is touched from one worker thread only (:class:`daemon.common.jobs.StoreWorker`),
so a caller can give up on a hung link without leaving two requests inside the
client.  Every call goes through :meth:`StoreThread.call`: it is refused at once
while the breaker is open, waits at most its deadline, and opens the breaker
(and wakes the probe, daemon/conversation/replay.py) when the store fails.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from daemon.common.domain_errors import ConversationUnavailableError
from daemon.common.jobs import StoreWorker
from daemon.common.storage import StorageHealth, is_storage_error
from layers.conversation.adapters.breaker import Breaker
from layers.conversation.adapters.store import ConversationStore, StoreSettings, StoreUnavailableError, describe_error

log = logging.getLogger(__name__)

T = TypeVar("T")

STORE_OPEN_WAIT_S = 60.0  # how long a backup or cleanup waits for the store to open (see wait_until_open)


class StoreDown(Exception):
    """The store did not answer (or the breaker is open); the message says why."""


class StoreThread:
    def __init__(
        self,
        store: ConversationStore,
        breaker: Breaker,
        deadline_s: float,
        storage: StorageHealth,
        on_change: Callable[[], None],
        pause: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store  # swapped (on the thread) when a reload changes the store settings
        self.breaker = breaker
        self.deadline_s = (
            deadline_s  # an agent's request waits this long (see daemon.conversation.broker.store_deadline)
        )
        self.storage = storage
        self.on_change = on_change
        self.fatal = ""  # a configuration error: the store stays off until it is fixed
        self.stopping = False  # set once the daemon stops: replay and cleanup end between items
        self.attention = threading.Event()  # wakes the probe/replay loop before its interval
        self.worker = StoreWorker()
        self.pause = pause  # before a write's embedding: a flood's write makes way (daemon/api/fairness.py)

    def call(
        self, what: str, fn: Callable[[], T], deadline: float | None = None, patient: bool = False, force: bool = False
    ) -> T:
        """Run ``fn`` on the store's thread; raise StoreDown (and open the breaker) when it fails.

        ``patient``: time queued behind other store jobs does not count (see :meth:`daemon.common.jobs.Jobs.wait`).
        ``force``: run it with the breaker still open (the probe re-applying the write-ahead log before it
        lets requests in: daemon/conversation/replay.py).
        """
        if not self.breaker.closed and not force:
            raise StoreDown(self.down_reason())
        deadline = self.deadline_s if deadline is None else deadline
        future = self.worker.submit(fn, deadline)
        try:
            return self.worker.wait(future, deadline, patient)
        except FutureTimeout:
            future.cancel()
            self.failed(f"{what}: no answer within {deadline:g} s")
        except StoreUnavailableError as exc:
            if self.stopping:  # the embedder was stopped under it: not the store's fault
                raise StoreDown(f"{what}: the daemon is stopping") from None
            if is_storage_error(exc):
                # the store answers but its disk is full: no breaker (searches still work), writes wait
                self.storage.failed("store", str(exc), path=self.store.settings.data_dir)
                raise StoreDown(f"conversation store cannot write ({exc})") from None
            self.failed(str(exc))
        raise StoreDown(self.down_reason())

    def embed_ahead(self, text: str, query: bool = False) -> None:
        """From the caller's thread: embed what its store call will need before the call is queued.

        Writes use it: the store thread then spends a write's time on the store, so one agent's
        stream of writes holds another agent's search up by one store operation, not by a write's
        embedding.  (A search embeds its query on the store thread, where an index rebuild of the
        embedded store is held stopped meanwhile.)  Anything that goes wrong here is left to the
        store call, which embeds as it always did.
        """
        if self.breaker.closed and not self.stopping:
            self.pause()
            with contextlib.suppress(Exception):
                self.store.embed_ahead(text, query)

    def failed(self, error: str) -> None:
        if self.breaker.failure(error):
            log.warning("conversation store is down: %s (searches use L3, writes are queued)", error)
            self.on_change()
        self.attention.set()

    def down_reason(self) -> str:
        if self.fatal:
            return f"conversation store is off: {self.fatal}"
        return f"conversation store unreachable: {self.breaker.last_error}"

    def wait_until_open(self, what: str, wait_s: float = STORE_OPEN_WAIT_S) -> None:
        """Maintenance started with the daemon (a timer with Persistent=true at boot) waits for the store.

        Opening the embedded store takes seconds after the daemon is ready (and a
        remote one may be down for a moment); a backup or cleanup waits up to
        ``wait_s`` for it instead of failing at once, then says why it gave up.
        """

        deadline = time.monotonic() + wait_s
        if not self.breaker.closed and not self.fatal:
            self.attention.set()  # probe now rather than after the probe interval
        while not self.breaker.closed and not self.fatal and not self.stopping:
            if time.monotonic() >= deadline:
                raise ConversationUnavailableError(
                    f"{what}: the conversation store did not open within {wait_s:g} s ({self.down_reason()})"
                )
            time.sleep(0.1)

    def reconnect(self, settings: StoreSettings) -> None:
        """Another store from now on: the swap runs as a job, after the calls queued before it.

        Not waited for (the daemon's loop must not wait on a hung call); the breaker
        opens meanwhile, so writes go to the durable queue until the probe connects.
        """
        embedder, dim = self.store.embedder, self.store.dim

        def swap() -> None:
            old_store = self.store
            old_store.retire()  # first: its files are free before anything can open them again
            self.store = ConversationStore(settings, embedder, dim)
            self.store.decay = old_store.decay
            self.store.changed = old_store.changed
            self.store.feed = old_store.feed

        self.worker.submit(swap)
        self.fatal = ""  # a store refused for its configuration gets another chance
        if self.breaker.failure("reconnecting: the conversation settings changed"):
            self.on_change()
        self.attention.set()

    def close(self, timeout: float) -> bool:
        """Close the store after the call in progress and end the thread; True when it ended."""
        deadline = time.monotonic() + timeout
        future = self.worker.submit(self.store.close)  # after the call in progress, if any
        try:
            future.result(timeout=max(0.0, deadline - time.monotonic()))
        except Exception as exc:  # closing is best effort
            future.cancel()
            log.warning("conversation store did not close cleanly: %s", describe_error(exc))
        self.worker.stop(timeout=max(0.0, deadline - time.monotonic()))
        return not self.worker.alive
