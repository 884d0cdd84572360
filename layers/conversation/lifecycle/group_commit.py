"""Group commit: callers that arrive while a commit is on its way share the next one.

A durable SQLite commit costs one fdatasync (~0.8 ms here, more on a busy disk); eight writers each
paying their own in turn wait eight syncs.  Here the first caller to find no commit running becomes
the leader: it takes every item handed in so far, commits them in one transaction (one sync) and
wakes their callers; items handed in meanwhile wait for the leader after it.  A caller hears its
own item's result, or the commit's exception, never before the commit returned.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class _Ticket(Generic[Item, Result]):
    __slots__ = ("done", "error", "item", "result")

    def __init__(self, item: Item) -> None:
        self.item = item
        self.result: Result | None = None
        self.error: BaseException | None = None
        self.done = False


class GroupCommit(Generic[Item, Result]):
    """``submit(item)`` returns once ``commit`` has run over a batch holding ``item``.

    ``commit(items)`` gets every item of the batch in the order they were handed in and returns one
    result per item; it runs in the leading caller's thread, never two at once.
    """

    def __init__(self, commit: Callable[[Sequence[Item]], Sequence[Result]]) -> None:
        self._commit = commit
        self._cond = threading.Condition()
        self._waiting: list[_Ticket[Item, Result]] = []
        self._leading = False
        self.batches = 0  # commits made (a figure for the benchmark and the tests)

    def submit(self, item: Item) -> Result:
        ticket: _Ticket[Item, Result] = _Ticket(item)
        with self._cond:
            self._waiting.append(ticket)
            while not ticket.done:
                if self._leading:
                    self._cond.wait()
                    continue
                self._leading = True
                batch, self._waiting = self._waiting, []
                self._cond.release()
                try:
                    self._run(batch)
                finally:
                    self._cond.acquire()
                    self._leading = False
                    self._cond.notify_all()
        if ticket.error is not None:
            raise ticket.error
        return ticket.result  # type: ignore[return-value]  # set by the commit with done

    def _run(self, batch: list[_Ticket[Item, Result]]) -> None:
        try:
            results = self._commit([t.item for t in batch])
        except BaseException as exc:
            for t in batch:
                t.error, t.done = exc, True
            return
        self.batches += 1
        for t, result in zip(batch, results, strict=True):
            t.result, t.done = result, True
