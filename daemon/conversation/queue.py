"""The durable L4 write queue on a disk that may be full or read-only.

Writes the store cannot take go to the queue (layers/conversation/lifecycle/durable_queue.py); a
full disk must cost neither the daemon nor an answer: the queue is opened when
it can be, a read that fails says "unknown" (None), and the failure is noted in
the storage report, retried with its back-off.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import apsw

from daemon.common.storage import StorageHealth, is_storage_error
from layers.conversation.lifecycle.durable_queue import WriteQueue

T = TypeVar("T")


class QueueAccess:
    def __init__(self, queue: WriteQueue, storage: StorageHealth) -> None:
        self.queue = queue
        self.storage = storage

    def open(self) -> bool:
        return self.storage.attempt("queue", self.queue.open, path=self.queue.path)

    def read(self, read: Callable[[], T], failed: T) -> T:
        """``read()`` of the queue; ``failed`` when a full or read-only disk keeps it from opening or answering."""
        if not self.queue.opened and not self.open():
            return failed
        try:
            return read()
        except (apsw.Error, OSError) as exc:
            if not is_storage_error(exc):
                raise
            self.storage.failed("queue", exc, path=self.queue.path)
            return failed

    def depth(self) -> int | None:
        """Queued writes; None when the queue cannot be opened or read."""
        return self.read(self.queue.depth, None)

    def nothing_queued(self) -> bool:
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

    def contains(self, write_id: str, agent_id: str) -> bool:
        """Whether ``agent_id``'s ``write_id`` is queued (its owner's: layers/conversation/lifecycle/write_ids.py)."""
        return self.read(lambda: self.queue.contains(write_id, agent_id), False)

    def note(self, write_id: str, agent_id: str, why: str) -> None:
        """A failed attempt, counted on the queued write (a courtesy: a full disk must not stop anything)."""
        self.storage.attempt("queue", lambda: self.queue.failed(write_id, agent_id, why), path=self.queue.path)

    def view(self, fn: Callable[[], T]) -> T | None:
        """A figure for status, never an exception (status runs in the daemon's loop)."""
        if not self.queue.opened:
            return None
        try:
            return fn()
        except (apsw.Error, OSError):
            return None
