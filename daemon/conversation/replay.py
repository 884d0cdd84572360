"""The L4 probe loop: brings the store back after an outage and replays the durable queue.

One thread (``l4-probe``).  While the breaker is open it probes (a quick HTTP
look at a remote server, then connect and ping on the store thread); once the
store answers it replays the queue in order, exactly once by (owner, write_id).  The queue is
also the write-ahead log (layers/conversation/lifecycle/durable_queue.py): what a crash left in it (applied or not,
answered or not) is pending again at the start and replayed the same way, each write at its
deterministic point id; a replayed row stays in the log, applied, until the checkpoint
(daemon/conversation/checkpoint.py) has flushed the store past it.  Plain
writes in batches (one lookup, one embedding call, one upsert each), inferred
ones one by one in their place; a write the store refuses is set aside (kept,
audited, shown in status) instead of blocking every write behind it.  While up,
it measures the round-trip now and then and refreshes the Tailscale view.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from itertools import groupby

from daemon.common.audit import AuditLog
from daemon.common.storage import StorageHealth, has_room, is_storage_error
from daemon.conversation.queue import QueueAccess
from daemon.conversation.store_thread import StoreDown, StoreThread
from daemon.conversation.tailscale import TailscaleWatch
from layers.conversation.adapters.store import (
    BatchResult,
    NewMemory,
    StoreConfigError,
    StoreRequestError,
    StoreUnavailableError,
    describe_error,
)
from layers.conversation.lifecycle.durable_queue import QueuedWrite

log = logging.getLogger(__name__)

CONNECT_DEADLINE_S = 120.0  # opening the store (mem0 import, a large embedded collection) may take a while
PING_INTERVAL_S = 30.0  # while up, how often the round-trip time is measured
# A replay batch is sized from the last one's rate to take about REPLAY_BATCH_S, so a search
# queued behind it on the store thread, or a stop, waits about that long at most.  It starts
# small and at most doubles from one batch to the next: the embedder may be slow (the local
# model on a loaded machine embeds a few texts a second).
REPLAY_BATCH_S = 1.0
REPLAY_BATCH_MIN = 16
REPLAY_BATCH_MAX = 500
REPLAY_PER_WRITE_S = 0.5  # a batch's deadline grows by this per write (the embedder's share)


class DrainRate:
    """Writes per second of the drain under way: the replayer counts it, a queued write's answer reads it.

    Its own object, handed to both, so neither the replayer nor the writes need the other.
    """

    def __init__(self) -> None:
        self.handled = 0
        self.busy_s = 0.0
        self.draining = False

    def add(self, handled: int, busy_s: float) -> None:
        self.handled += handled
        self.busy_s += busy_s
        self.draining = True

    def end(self) -> None:
        self.handled, self.busy_s, self.draining = 0, 0.0, False

    def rate(self) -> float | None:
        """Writes per second over this drain's batches; None when no drain is under way."""
        if not self.draining or not self.handled or self.busy_s <= 0:
            return None
        return self.handled / self.busy_s


class Replayer:
    def __init__(
        self,
        thread: StoreThread,
        queue: QueueAccess,
        storage: StorageHealth,
        audit: AuditLog,
        write: Callable[[NewMemory, bool], list[dict]],
        embedder_ready: Callable[[], str],
        on_change: Callable[[], None],
        probe_timeout_s: float,
        drain: DrainRate | None = None,
    ) -> None:
        self.thread = thread
        self.queue = queue
        self.storage = storage
        self.audit = audit
        self.write = write  # Writes.write: the same write-once path a direct add takes
        self.embedder_ready = embedder_ready  # "" when the embedder can work, else why not
        self.on_change = on_change
        self.probe_timeout_s = probe_timeout_s
        self.rtt_ms: float | None = None
        self.replayed = 0
        self.skipped = 0
        self.set_aside = 0
        self.tailscale = TailscaleWatch()
        self._batch_size = REPLAY_BATCH_MIN
        self.drain = drain or DrainRate()  # this drain's writes and busy seconds, for rate and time to go
        self.head_checked = False  # the queue's head at start may be in any earlier version's crash window
        self._forcing = False  # re-applying what a crash left, with the breaker still open
        self._last_ping = 0.0
        self._prober = threading.Thread(target=self._probe_loop, name="l4-probe", daemon=True)

    def start(self) -> None:
        self._prober.start()

    def join(self, timeout: float) -> bool:
        """Wait for the probe loop to end (after ``thread.stopping``); True when it did (or never started)."""
        if self._prober.ident is None:
            return True
        self._prober.join(timeout=timeout)
        return not self._prober.is_alive()

    def reconnecting(self) -> None:
        """Another store: its round-trip is unknown and the queue's head is checked again."""
        self.rtt_ms = None
        self.head_checked = False

    # ------------------------------------------------------------ the loop

    def _probe_loop(self) -> None:
        t = self.thread
        while not t.stopping:
            try:
                self._check_storage()
                if t.fatal:
                    pass
                elif not t.breaker.closed:
                    self._probe()
                elif not self._replay_waits() and self.queue.queue.opened and self.queue.depth():
                    self._replay()
                    continue  # drain the next batch at once
                elif time.monotonic() - self._last_ping >= PING_INTERVAL_S:
                    self._ping()
                settings = t.store.settings
                self.tailscale.refresh(settings.backend, settings.url)
            except Exception:  # the prober must survive anything
                log.exception("conversation probe failed")
            t.attention.wait(t.breaker.probe_interval_s)
            t.attention.clear()

    def _check_storage(self) -> None:
        """Once a back-off has passed: does the queue (or the store's disk) take writes again?"""
        queue = self.queue.queue
        if self.storage.failing("queue") and not self.storage.waiting("queue"):
            if queue.opened:
                self.storage.attempt("queue", queue.check_writable, path=queue.path)
            else:
                self.queue.open()
        if self.storage.failing("store") and not self.storage.waiting("store") and not self.queue.depth():
            # no queued write to try it with: free space is the sign (a write that still fails says so again)
            settings = self.thread.store.settings
            if settings.backend == "remote" or has_room(settings.data_dir):
                self.storage.succeeded("store")
            else:
                self.storage.postpone("store", "")

    def _replay_waits(self) -> bool:
        """While the store's or the queue's disk is full, replay waits for the back-off."""
        return self.storage.waiting("store") or self.storage.waiting("queue")

    # ------------------------------------------------------------ probe, ping

    def _reachable(self) -> str:
        """A quick look (probe timeout) before anything waits on the store; "" when it answers."""
        not_ready = self.embedder_ready()
        if not_ready:
            return f"embedder unavailable: {not_ready}"
        s = self.thread.store.settings
        if s.backend != "remote":
            return ""
        import httpx  # only for a remote server: ~5 MB resident the embedded backend does not need

        headers = {"api-key": s.api_key} if s.api_key else {}
        try:
            response = httpx.get((s.url or "").rstrip("/") + "/readyz", headers=headers, timeout=self.probe_timeout_s)
        except httpx.HTTPError as exc:
            return f"probe: {describe_error(exc)}"
        return "" if response.status_code < 500 else f"probe: HTTP {response.status_code}"

    def _probe(self) -> None:
        t = self.thread
        problem = self._reachable()
        if problem:
            t.breaker.failure(problem)
            return

        def connect_and_ping() -> float:
            t.store.connect()
            return t.store.ping()

        future = t.worker.submit(connect_and_ping, CONNECT_DEADLINE_S)
        try:
            self.rtt_ms = t.worker.wait(future, CONNECT_DEADLINE_S)
        except StoreConfigError as exc:
            t.fatal = str(exc)
            t.breaker.failure(t.fatal)
            log.error("conversation store is off: %s", exc)
            self.on_change()
            return
        except (StoreUnavailableError, FutureTimeout) as exc:
            future.cancel()
            if is_storage_error(exc):  # the embedded store cannot even open on a full disk
                self.storage.failed("store", str(exc), path=t.store.settings.data_dir)
            t.breaker.failure(describe_error(exc) if isinstance(exc, FutureTimeout) else str(exc))
            return
        if (self.storage.error("store") or "").startswith("connect"):
            self.storage.succeeded("store")  # it opened; a write that still fails says so again
        self._last_ping = time.monotonic()
        if not self._reapply_recovered():
            return  # the store failed meanwhile: the breaker stays open, the next probe tries again
        if t.breaker.success():
            log.info("conversation store is reachable (%.1f ms)", self.rtt_ms)
            self.on_change()

    def _reapply_recovered(self) -> bool:
        """Before the store is let in: the log up to the last row a crash left applied or claimed, applied.

        Those rows were answered as written (a direct add) or already visible (a replayed one), so nothing
        may read the store without them: the breaker stays open (searches answer from L3, adds are
        logged) until they are back, each at its deterministic id (found, not written twice, when the
        store kept it).  Pending rows after the last of them were answered ``queued`` and never applied:
        they replay as usual, after.  False when the store failed.
        """
        queue = self.queue.queue
        upto = queue.recovered_upto
        if not upto:
            return True
        self._forcing = True
        try:
            while not self.thread.stopping:
                head = queue.peek(1)
                if not head or head[0].seq > upto:
                    break
                if not self._replay():
                    return False
        finally:
            self._forcing = False
        log.info("write-ahead log: %d writes a crash left unflushed applied again before serving", queue.recovered)
        queue.recovered = queue.recovered_upto = 0
        return True

    def _ping(self) -> None:
        try:
            self.rtt_ms = self.thread.call("ping", lambda: self.thread.store.ping())  # the store when it runs
        except StoreDown:
            return
        self._last_ping = time.monotonic()

    # ------------------------------------------------------------ replay

    def _replay(self) -> int:
        """The next batch of queued writes, oldest first, each exactly once; stops at the first failure.

        Returns how many writes left the pending state (applied, found, or set aside)."""
        items = self.queue.queue.peek(self._batch_size)
        started = time.monotonic()
        handled = 0
        for plain, group in groupby(items, key=lambda item: not item.request.get("infer")):
            if self.thread.stopping:
                break  # the rest stays queued for the next start
            run = list(group)
            count = self._replay_plain(run) if plain else self._replay_inferred(run)
            handled += count
            if count < len(run):
                break  # the store failed: the breaker is open, the rest waits for it
        busy = time.monotonic() - started
        self.drain.add(handled, busy)
        if handled == len(items) and busy > 0:
            size = min(2 * len(items), int(handled / busy * REPLAY_BATCH_S))
        else:  # the store failed (or was slow past its deadline): try smaller next time
            size = self._batch_size // 2
        self._batch_size = max(REPLAY_BATCH_MIN, min(REPLAY_BATCH_MAX, size))
        if handled:
            self.on_change()
        if self.queue.queue.depth() == 0:
            log.info(
                "queue drained: %d written, %d already present, %d set aside (%.1f writes/s)",
                self.replayed,
                self.skipped,
                self.set_aside,
                self.drain.handled / max(self.drain.busy_s, 1e-6),
            )
            self.drain.end()
        return handled

    def _replay_plain(self, items: list[QueuedWrite]) -> int:
        """``infer=False`` writes as one batch; how many left the queue (all of them unless the store failed)."""
        t, queue = self.thread, self.queue.queue
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
        suspects = {record.write_key for item, record in readable if item.attempts}
        if not self.head_checked:
            suspects.add(readable[0][1].write_key)
        deadline = t.deadline_s + REPLAY_PER_WRITE_S * len(records)
        try:
            results = t.call(
                "replay", lambda: t.store.add_batch(records, suspects), deadline, patient=True, force=self._forcing
            )
        except StoreDown as exc:
            if not t.stopping:
                self.queue.note(readable[0][0].write_id, readable[0][0].agent_id, str(exc))
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
        self.head_checked = True
        done = []
        for (item, _), result in zip(readable, results, strict=True):
            if result.event == "REFUSED":
                self._set_aside(item, result.reason)
                continue
            done.append(item.seq)
            if result.event == "EXISTS":
                self.skipped += 1
            else:
                self.replayed += 1
        self.storage.succeeded("store")
        # applied, not yet flushed: the rows stay in the log until a checkpoint has flushed the store past them
        if not self.storage.attempt("queue", lambda: queue.applied(done), path=queue.path):
            return handled  # written, still queued: replaying them again finds the same points
        return handled + len(readable)

    def _replay_inferred(self, items: list[QueuedWrite]) -> int:
        """``infer=True`` writes one by one through mem0's LLM path, in their place in the queue."""
        t, queue = self.thread, self.queue.queue
        for handled, item in enumerate(items):
            try:
                record = NewMemory(**item.request)
                results = t.call(
                    "replay", functools.partial(self.write, record, True), patient=True, force=self._forcing
                )
            except TypeError as exc:
                self._set_aside(item, f"unreadable queued request: {describe_error(exc)}")
                continue
            except StoreRequestError as exc:
                self._set_aside(item, str(exc))
                continue
            except StoreDown as exc:
                if not t.stopping:
                    # the attempt count is a courtesy: a full queue disk must not stop the replay loop
                    self.storage.attempt(
                        "queue", functools.partial(queue.failed, item.write_id, item.agent_id, str(exc))
                    )
                return handled
            self.storage.succeeded("store")
            done = functools.partial(queue.applied, [item.seq])  # the log forgets it after the next checkpoint
            if not self.storage.attempt("queue", done, path=queue.path):
                return handled  # written, still queued: the next replay finds its write_id in the store
            if results and all(r.get("event") == "EXISTS" for r in results):
                self.skipped += 1
            else:
                self.replayed += 1
        return len(items)

    def _set_aside(self, item: QueuedWrite, reason: str) -> None:
        """A write the store refuses: kept aside with the reason, so the writes behind it go on."""
        if self.queue.queue.set_aside(item.write_id, item.agent_id, reason):
            self.set_aside += 1
        log.warning("queued write %s of %s set aside: the store refuses it: %s", item.write_id, item.agent_id, reason)
        self.audit.record("queued_write_set_aside", agent=item.agent_id, write_id=item.write_id, reason=reason)

    def rate(self) -> float | None:
        """Writes per second over this drain's batches; None when no drain is under way."""
        return self.drain.rate()
