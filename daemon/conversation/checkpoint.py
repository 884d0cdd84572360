"""The L4 checkpoint: the store flushed, then the write-ahead log trimmed past what the flush covered.

An ``add`` is durable once its row is in the write-ahead log (layers/conversation/lifecycle/durable_queue.py,
synced, group-committed), so it is answered without waiting for the store's own flush: an Edge
flush costs 9-40 ms holding the GIL (research for issue 45), far too much per request.  The log
cannot grow for ever though, and a row may leave it only once the store holds its write on disk.
So this thread runs a checkpoint on the store thread (the one that owns the store):

1. note which rows are applied (``applied_seqs``), before anything else;
2. flush the store (``ConversationStore.flush``: mem0's history synced, the Edge shards' segments);
3. remove those rows (``trim``): a row applied after step 1 waits for the next checkpoint.

When: once the store has been quiet for ``IDLE_S`` after a change, or every ``BUSY_S`` while
changes keep coming, never per request.  Changes the log does not hold (update, delete,
supersede, restore, consolidation, cleanup, archive: they need the store as it is now, so they are
never queued) are made durable by :meth:`Checkpointer.durable` before they are answered: it waits
for a checkpoint that started after the caller's change, and callers arriving while one runs share
the next one (a group-committed flush).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from daemon.common.domain_errors import ConversationUnavailableError
from daemon.common.jobs import StoreWorker
from daemon.conversation.queue import QueueAccess
from layers.conversation.adapters.store import ConversationStore, describe_error

log = logging.getLogger(__name__)

# A flush holds the store thread (and the GIL) 9-40 ms on a small shard, more on a large one: under a
# steady load every BUSY_S, not per second (8 writers' add p95 was 1.8-2.4x the unsynced code's at 1 s).
IDLE_S = 0.5  # a checkpoint once the store has had no change for this long
BUSY_S = 5.0  # ... or this long after the first change not yet flushed, while changes keep coming
BUSY_CHANGES = 2048  # ... or after this many changes (the log, and a replay after a crash, stay short)
DURABLE_WAIT_S = 60.0  # how long a change waits for the flush that makes it durable


class Checkpointer:
    """Schedules checkpoints on the store thread; ``durable()`` waits for one that covers the caller."""

    def __init__(self, worker: StoreWorker, store: Callable[[], ConversationStore], queue: QueueAccess) -> None:
        self.worker = worker
        self.store = store  # the store in force when the checkpoint runs (a reload may swap it)
        self.queue = queue
        self._cond = threading.Condition()
        self._dirty_since: float | None = None  # monotonic time of the first change not yet flushed
        self._last_change = 0.0
        self._changes = 0  # changes since the last checkpoint started
        self._started = 0  # checkpoints started (a generation number)
        self._finished = 0  # the generation of the last checkpoint that ended
        self._failed: dict[int, str] = {}  # generation -> why its flush failed (read by the waiters)
        self._queued = False  # a checkpoint job is waiting on the store thread
        self._stopping = False
        self.checkpoints = 0
        self.last_error = ""
        self._thread = threading.Thread(target=self._loop, name="l4-checkpoint", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def changed(self) -> None:
        """Something was written to the store (any thread): a checkpoint is due soon."""
        with self._cond:
            now = time.monotonic()
            first = self._dirty_since is None
            if first:
                self._dirty_since = now
            self._last_change = now
            self._changes += 1
            if first or self._changes >= BUSY_CHANGES:
                self._cond.notify_all()  # the loop waits without a deadline while nothing is dirty

    def durable(self, what: str) -> None:
        """Return once a checkpoint that started after this call has flushed the store.

        For a change made (and returned) before this call; raises ConversationUnavailableError when
        the flush failed, saying the change is made but may not survive a power cut.
        """
        with self._cond:
            wanted = self._started + 1
            self._submit_locked()
            deadline = time.monotonic() + DURABLE_WAIT_S
            while self._finished < wanted:
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping:
                    break
                self._cond.wait(left)
            failed = [why for generation, why in self._failed.items() if generation >= wanted]
            if self._finished >= wanted and not failed:
                return
        why = failed[0] if failed else f"no flush within {DURABLE_WAIT_S:g} s"
        raise ConversationUnavailableError(
            f"{what}: the change was made but the store could not confirm it on disk ({why}); "
            "it may not survive a power cut: check status, then read the memory back"
        )

    def stop(self) -> None:
        """End the scheduling thread (the broker's close runs the last checkpoint itself)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)

    def checkpoint(self) -> None:
        """On the store thread: flush the store, then trim the log rows applied before the flush."""
        with self._cond:
            self._queued = False
            self._started += 1
            generation = self._started
            self._dirty_since = None
            self._changes = 0
        error = ""
        try:
            nothing: list[int] = []
            applied = self.queue.read(self.queue.queue.applied_seqs, nothing)
            self.store().flush()
            if applied:
                self.queue.storage.attempt("queue", lambda: self.queue.queue.trim(applied), path=self.queue.queue.path)
            self.checkpoints += 1
        except Exception as exc:  # the store is closed, gone, or its disk is full: the rows stay in the log
            error = describe_error(exc)
            if error != self.last_error:
                log.warning("conversation store checkpoint failed (the write-ahead log keeps the writes): %s", error)
        self.last_error = error
        with self._cond:
            self._finished = generation
            if error:
                self._failed[generation] = error
            for old in [g for g in self._failed if g < generation - 64]:
                del self._failed[old]
            if error and self._dirty_since is None:
                self._dirty_since = time.monotonic()  # try again later
            self._cond.notify_all()

    def replaced(self) -> None:
        """On the store thread, after the store was replaced whole (a backup put back): remove the rows
        applied to the store it replaced, synced.

        They are its writes, not the backup's: left in the log, a crash before the next checkpoint
        would re-apply them over the backup (the writes made after the backup back again).  Rows
        still pending (answered ``queued``, never applied) stay: they are applied to the backup.
        """
        nothing: list[int] = []
        applied = self.queue.read(self.queue.queue.applied_seqs, nothing)
        if applied:
            self.queue.storage.attempt("queue", lambda: self.queue.queue.trim(applied), path=self.queue.queue.path)

    def _submit_locked(self) -> None:
        if not self._queued:
            self._queued = True
            self.worker.submit(self.checkpoint)

    def _loop(self) -> None:
        with self._cond:
            while not self._stopping:
                if self._dirty_since is None or self._queued:
                    self._cond.wait()
                    continue
                now = time.monotonic()
                due = min(self._last_change + IDLE_S, self._dirty_since + BUSY_S)
                if now < due and self._changes < BUSY_CHANGES:
                    self._cond.wait(due - now)
                    continue
                self._submit_locked()
