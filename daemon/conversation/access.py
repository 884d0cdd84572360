"""Counting the memories returned to agents, written to the store in batches off the request path.

Decay by use (layers/conversation/policy/decay.py) needs each memory's ``access_count`` and
``last_accessed``.  A search answers up to a hundred memories; writing each one's count on the
request path would turn every read into writes on the store's one thread.  So reads only count in
memory (:class:`layers.conversation.policy.decay.AccessTally`), and this flusher writes the tally as jobs
of the store thread: every ``interval_s`` seconds, or as soon as ``batch_hits`` hits wait, in jobs
of at most ``chunk`` memories so that agents' requests go on between them.  A batch the store
cannot take (down, a full disk) is merged back and tried at the next flush.  ``stop`` writes what
is left, so a clean stop loses no hit; a crash loses at most the last interval's, which only
makes those memories look a little less used.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from daemon.conversation.store_thread import StoreDown, StoreThread
from layers.conversation.policy.decay import AccessTally

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 5.0
FLUSH_HITS = 256  # hits waiting that wake the flusher before its interval
CHUNK = 256  # memories written by one store job


class AccessRecorder:
    def __init__(
        self,
        thread: StoreThread,
        interval_s: float = FLUSH_INTERVAL_S,
        batch_hits: int = FLUSH_HITS,
        chunk: int = CHUNK,
    ) -> None:
        self.thread = thread
        self.interval_s = interval_s
        self.batch_hits = batch_hits
        self.chunk = chunk
        self.tally = AccessTally()
        self.flushed = 0  # memories whose counts were written
        self.last_flush: str | None = None
        self.last_error: str | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._flushing = threading.Lock()  # the flusher's turn and stop's final flush never overlap

    def hit(self, ids: Iterable[str]) -> None:
        """From a request thread: these memories were returned to an agent (counted now, written later)."""
        waiting = self.tally.hit(ids, datetime.now(timezone.utc).isoformat(timespec="seconds"))
        if waiting >= self.batch_hits:
            self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="l4-access", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            self.flush()

    def flush(self, deadline: float | None = None) -> int:
        """Write what the tally holds, chunk by chunk; what the store does not take goes back.  Memories written."""
        with self._flushing:
            batch = self.tally.take()
            items = list(batch.items())
            written = 0
            for start in range(0, len(items), self.chunk):
                part = dict(items[start : start + self.chunk])
                rest = dict(items[start + self.chunk :])
                if deadline is not None and time.monotonic() >= deadline:
                    self.tally.put_back({**part, **rest})
                    break
                try:
                    written += self.thread.call("access", functools.partial(self._write, part), patient=True)
                except StoreDown as exc:
                    self.last_error = str(exc)
                    self.tally.put_back({**part, **rest})
                    break
            if written:
                self.flushed += written
                self.last_flush = datetime.now(timezone.utc).isoformat(timespec="seconds")
                self.last_error = None
            return written

    def _write(self, part: dict[str, tuple[int, str]]) -> int:
        """On the store thread: the store in force then (a reload may have swapped it)."""
        return self.thread.store.record_access(part)

    def stop(self, timeout: float) -> None:
        """End the flusher and write what is left (within ``timeout``)."""
        deadline = time.monotonic() + timeout
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        if len(self.tally) and self.thread.breaker.closed:
            self.flush(deadline)
        if len(self.tally):
            log.warning("conversation store: %d memories' access counts not written at stop", len(self.tally))

    def status(self) -> dict[str, Any]:
        return {
            "pending": len(self.tally),
            "written": self.flushed,
            "dropped": self.tally.dropped,
            "last_flush": self.last_flush,
            "last_error": self.last_error,
        }
