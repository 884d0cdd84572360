"""Calls handed to the one thread that owns a resource, run there in order.

Two threads of the daemon own something no other thread may touch: the loop
owns the records and the indexes' chunks (and hands commits to the committer's
workers, daemon/files/committer.py); the store thread owns the L4 store.  Both take
work from other threads the same way: a job (a callable, a future, an optional
deadline) goes into a :class:`Jobs` queue, the owning thread runs it, the caller
waits on the future.  The loop drains its queue once per turn
(:meth:`Jobs.run_pending`); the store thread blocks on it (:class:`StoreWorker`).
"""

from __future__ import annotations

import contextlib
import queue as queue_module
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

T = TypeVar("T")
#: A queued call, its future and its deadline; None tells :meth:`Jobs.serve` to return.
Job = tuple[Callable[[], Any], Future[Any], float | None]


class Jobs:
    """A queue of calls for one owning thread; ``on_submit`` wakes that thread."""

    def __init__(self, on_submit: Callable[[], None] = lambda: None) -> None:
        self._jobs: queue_module.SimpleQueue[Job | None] = queue_module.SimpleQueue()
        self._on_submit = on_submit
        self._busy_until: float | None = None  # when the job running now is past its own deadline

    def submit(self, fn: Callable[[], T], deadline: float | None = None) -> Future[T]:
        """Queue ``fn`` for the owning thread; ``deadline`` is how long it may run once started."""
        future: Future[T] = Future()
        self._jobs.put((fn, future, deadline))
        self._on_submit()
        return future

    def call(self, fn: Callable[[], T], timeout: float) -> T:
        """Run ``fn`` in the owning thread and return its result (raises what it raised)."""
        return self.submit(fn).result(timeout)

    def wait(self, future: Future[T], deadline: float, patient: bool = True) -> T:
        """``future``'s result; raises FutureTimeout.

        ``patient`` (maintenance, replay, connecting: nobody waits at a prompt):
        ``deadline`` counts from when the job starts.  Time spent queued behind
        another job (a replay batch, a backup, a cleanup page) is not the store
        being slow: the job keeps waiting while the one ahead is within its own
        deadline, and times out when its own deadline, or that of a job ahead
        that hangs, has passed.  Otherwise (an agent's request, whose client
        waits ``client_timeout``) the deadline counts from now, whatever is ahead.
        """
        if not patient:
            return future.result(timeout=deadline)
        submitted = time.monotonic()
        while not (future.running() or future.done()):
            ahead = self._busy_until
            limit = max(submitted + deadline, ahead if ahead is not None else 0.0)
            left = limit - time.monotonic()
            if left <= 0:
                raise FutureTimeout()
            with contextlib.suppress(FutureTimeout):
                return future.result(timeout=min(0.2, left))
        started = getattr(future, "started_at", submitted)
        return future.result(timeout=max(0.0, started + deadline - time.monotonic()))

    def run_pending(self) -> bool:
        """Run every queued job now, in the calling (owning) thread; True when there was one."""
        ran = False
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue_module.Empty:
                return ran
            ran = True
            if job is not None:
                self._run(*job)

    def serve(self) -> None:
        """Run jobs as they come until :meth:`close` (the owning thread's whole life)."""
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self._run(*job)

    def close(self) -> None:
        """:meth:`serve` returns after the jobs queued before this one."""
        self._jobs.put(None)

    def _run(self, fn: Callable[[], Any], future: Future[Any], deadline: float | None) -> None:
        future.started_at = time.monotonic()  # type: ignore[attr-defined]  # read by wait()
        if not future.set_running_or_notify_cancel():
            return  # the caller gave up before it started
        self._busy_until = None if deadline is None else future.started_at + deadline  # type: ignore[attr-defined]
        try:
            future.set_result(fn())
        except BaseException as exc:  # handed to the waiting caller
            future.set_exception(exc)
        finally:
            self._busy_until = None


class StoreWorker(Jobs):
    """One daemon thread that owns the store: jobs run in order, callers wait with a deadline."""

    def __init__(self) -> None:
        super().__init__()
        self._thread = threading.Thread(target=self.serve, name="l4-store", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.close()
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
