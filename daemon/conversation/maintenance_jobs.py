"""The administrator's L4 maintenance from the running daemon: cleanup, backup, restore, consolidation.

Each runs on the store thread (daemon/conversation/store_thread.py), so agents' requests
go on between a cleanup's or a consolidation's pages; each first waits (bounded) for the store
to open, since a timer may start it right after the daemon.  A consolidation applies (and an
undo restores) in one job on that thread: no agent's write comes between its parts.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from daemon.common.config import Config
from daemon.common.domain_errors import ConflictError, ConversationUnavailableError
from daemon.conversation.checkpoint import Checkpointer
from daemon.conversation.store_thread import StoreDown, StoreThread
from daemon.ops import consolidation, maintenance
from layers.conversation.consolidation.plan import Stored
from layers.conversation.consolidation.store_view import StoreFace
from layers.conversation.lifecycle.cleanup import Selection
from protocol.operations import Cleanup

T = TypeVar("T")

MAINTENANCE_S = 600.0  # a backup or restore of a large store


class Maintenance:
    def __init__(self, thread: StoreThread, config: Callable[[], Config], checkpointer: Checkpointer) -> None:
        self.thread = thread
        self.config = config  # the configuration in force (a reload replaces it)
        # every change here is answered (and reported: RUN.json, cleanup's figures) only once the store has
        # flushed it: a power cut never leaves a report saying more than the store holds
        self.checkpointer = checkpointer
        self.consolidating: dict | None = None  # the run under way, for status: run, phase, done, total
        self._one_consolidation = threading.Lock()

    def admin_call(self, what: str, fn: Callable[[], T], deadline: float | None = None) -> T:

        self.thread.wait_until_open(what)
        try:
            return self.thread.call(what, fn, deadline, patient=True)
        except StoreDown as exc:
            raise ConversationUnavailableError(str(exc)) from None

    def cleanup(self, o: Cleanup) -> dict:
        """Page by page on the store thread, so agents' requests go on between the pages."""
        return maintenance.cleanup(self.config(), _BrokeredStore(self), o)

    def consolidate(self, options: consolidation.ConsolidateOptions) -> dict:
        """One run at a time (a second is refused at once); its progress shows in status."""
        if not self._one_consolidation.acquire(blocking=False):
            raise ConflictError("a consolidation is running already: wait for it to end (memstrata status shows it)")
        try:
            started = time.time()

            def progress(phase: str, done: int, total: int) -> None:
                self.consolidating = {"phase": phase, "done": done, "total": total, "since": started}

            progress("start", 0, 0)
            llm = self.thread.store.settings.llm
            return consolidation.consolidate(self.config(), _BrokeredConsolidation(self), options, llm, progress)
        finally:
            self.consolidating = None
            self._one_consolidation.release()

    def backup(self, keep: int) -> dict:
        return self.admin_call(
            "backup", lambda: maintenance.backup(self.config(), self.thread.store, keep), MAINTENANCE_S
        )

    def restore(self, archive: Path) -> dict:
        """One job on the store thread: the backup's files put back synced (layers/conversation/lifecycle/backup.py),
        the write-ahead log's rows of the replaced store removed, the store reopened; answered after.
        A restore that fails (not a backup, a full disk) reopens the store it left in place."""

        def run() -> dict:
            store = self.thread.store
            try:
                result = maintenance.restore(store, archive)
            except Exception:
                store.connect()  # a restore that failed put nothing back: the store as it was serves again
                raise
            self.checkpointer.replaced()
            store.connect()
            return result

        return self.admin_call("restore", run, MAINTENANCE_S)


class _BrokeredStore:
    """The store's cleanup face, each call made on the store thread."""

    def __init__(self, owner: Maintenance) -> None:
        self.owner = owner

    def scan(self, selection: Selection, limit: int, cursor: str | None) -> tuple[list[dict], str | None]:
        self._not_stopping()
        thread = self.owner.thread
        return self.owner.admin_call("scan", lambda: thread.store.scan(selection, limit, cursor))

    def delete_ids(self, ids: list[str]) -> None:
        self._not_stopping()
        thread = self.owner.thread
        self.owner.admin_call("delete", lambda: thread.store.delete_ids(ids))
        self.owner.checkpointer.durable("cleanup")  # this page's deletes on disk before they are counted

    def states(self, ids: list[str]) -> dict[str, str]:
        thread = self.owner.thread
        return self.owner.admin_call("scan", lambda: thread.store.states(ids))

    def archive(self, ids: list[str], at: str) -> None:
        self._not_stopping()
        thread = self.owner.thread
        self.owner.admin_call("archive", lambda: thread.store.archive(ids, at))
        self.owner.checkpointer.durable("archive")

    def _not_stopping(self) -> None:
        """A cleanup ends between pages when the daemon stops; running it again goes on from there."""

        if self.owner.thread.stopping:
            raise ConversationUnavailableError("the daemon is stopping: cleanup ended early; run it again later")


class _BrokeredConsolidation:
    """Consolidation's face of the store: pages on the store thread, the batch as one job there."""

    def __init__(self, owner: Maintenance) -> None:
        self.owner = owner

    def count(self) -> int:
        thread = self.owner.thread
        return self.owner.admin_call("count", lambda: StoreFace(thread.store).count())

    def scan_points(self, limit: int, cursor: str | None, agent: str | None) -> tuple[list[Stored], str | None]:
        if self.owner.thread.stopping:
            raise ConversationUnavailableError("the daemon is stopping: consolidation ended before changing anything")
        thread = self.owner.thread
        return self.owner.admin_call("scan", lambda: StoreFace(thread.store).scan_points(limit, cursor, agent))

    def exclusive(self, fn: Callable[[StoreFace], T]) -> T:
        """The batch as one job, then the store flushed: the report says ``applied``/``undone`` only after."""
        thread = self.owner.thread
        try:
            result = self.owner.admin_call("consolidate", lambda: fn(StoreFace(thread.store)), MAINTENANCE_S)
        except BaseException:  # a batch cut off half-way is flushed too: the report's ``applying`` describes it
            with contextlib.suppress(Exception):
                self.owner.checkpointer.durable("consolidation")
            raise
        self.owner.checkpointer.durable("consolidation")
        return result
