"""The administrator's L4 maintenance from the running daemon: cleanup, backup, restore.

Each runs on the store thread (daemon/conversation/store_thread.py), so agents' requests
go on between a cleanup's pages; each first waits (bounded) for the store to
open, since a timer may start it right after the daemon.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from daemon.conversation.store_thread import StoreDown, StoreThread
from daemon.ops import maintenance
from daemon.shared.config import Config
from daemon.shared.errors import ConversationUnavailableError
from layers.conversation.cleanup import Selection

T = TypeVar("T")

MAINTENANCE_S = 600.0  # a backup or restore of a large store


class Maintenance:
    def __init__(self, thread: StoreThread, config: Callable[[], Config]) -> None:
        self.thread = thread
        self.config = config  # the configuration in force (a reload replaces it)

    def admin_call(self, what: str, fn: Callable[[], T], deadline: float | None = None) -> T:

        self.thread.wait_until_open(what)
        try:
            return self.thread.call(what, fn, deadline, patient=True)
        except StoreDown as exc:
            raise ConversationUnavailableError(str(exc)) from None

    def cleanup(self, options: maintenance.CleanupOptions) -> dict:
        """Page by page on the store thread, so agents' requests go on between the pages."""
        return maintenance.cleanup(self.config(), _BrokeredStore(self), options)

    def backup(self, keep: int) -> dict:
        return self.admin_call(
            "backup", lambda: maintenance.backup(self.config(), self.thread.store, keep), MAINTENANCE_S
        )

    def restore(self, archive: Path) -> dict:
        def run() -> dict:
            store = self.thread.store
            result = maintenance.restore(store, archive)
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

    def states(self, ids: list[str]) -> dict[str, str]:
        thread = self.owner.thread
        return self.owner.admin_call("scan", lambda: thread.store.states(ids))

    def archive(self, ids: list[str], at: str) -> None:
        self._not_stopping()
        thread = self.owner.thread
        self.owner.admin_call("archive", lambda: thread.store.archive(ids, at))

    def _not_stopping(self) -> None:
        """A cleanup ends between pages when the daemon stops; running it again goes on from there."""

        if self.owner.thread.stopping:
            raise ConversationUnavailableError("the daemon is stopping: cleanup ended early; run it again later")
