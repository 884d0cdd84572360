"""Commits run on worker threads, so git never holds the loop; what they did is applied in the loop.

A commit of 20,000 new files takes tens of seconds of git.  Run on the loop
thread, it held up every other agent's edits (208 s for one note) and the
daemon's SIGTERM.  Here each agent's commit is a job on a small pool (one job
per agent at a time: its repository is the job's until it ends); the loop
starts jobs when their commits are due (:meth:`Committer.start`) and applies
their outcomes each turn (:meth:`Committer.collect`).  A stop waits for the
running jobs until its deadline, then cuts their git (:meth:`Committer.cancel`).
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures

from daemon.files.commits import CommitJob, CommitOutcome
from daemon.files.tracker import AgentTracker
from layers.daily.git.run import Cancel

log = logging.getLogger(__name__)

WORKERS = 4  # agents committing at once; more wait their turn (each commit is mostly one git at a time)


class Committer:
    def __init__(
        self,
        wake: Callable[[], None],
        progress: Callable[[], None] = lambda: None,
        workers: int = WORKERS,
        kept: Callable[[str], None] = lambda agent_id: None,
    ) -> None:
        self._wake = wake
        self._progress = progress  # from a worker: a batch is committed (the status shows how far it got)
        self._kept = kept  # (loop thread) an agent's history copy moved: its commits may go to the remote
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="commit")
        self._done: queue.SimpleQueue[tuple[AgentTracker, CommitJob, Future]] = queue.SimpleQueue()
        self._running: dict[str, Future] = {}
        self.cancel_token = Cancel()

    @property
    def running(self) -> int:
        return len(self._running)

    def start(self, tracker: AgentTracker, now: float | None = None) -> bool:
        """Begin ``tracker``'s commit on a worker (loop thread); False while its previous one still runs."""
        if tracker.committing is not None or tracker.id in self._running:
            return False
        tracker.repo.cancel = self.cancel_token
        job = tracker.begin_commit(now)
        job.on_progress = self._progress
        future = self._pool.submit(job)
        self._running[tracker.id] = future
        future.add_done_callback(lambda f: self._finished(tracker, job, f))
        return True

    def _finished(self, tracker: AgentTracker, job: CommitJob, future: Future) -> None:
        self._done.put((tracker, job, future))
        self._wake()

    def collect(self, now: float | None = None) -> list[AgentTracker]:
        """Apply every finished job's outcome to its tracker (loop thread); the trackers it touched."""
        touched: list[AgentTracker] = []
        while True:
            try:
                tracker, job, future = self._done.get_nowait()
            except queue.Empty:
                return touched
            if self._running.get(tracker.id) is future:
                del self._running[tracker.id]
            exc = future.exception()
            if exc is not None:  # a bug, not git: said loudly, and the commit is retried with back-off
                log.error("%s: commit job failed", tracker.id, exc_info=exc)
                outcome = CommitOutcome(error=exc)
            else:
                outcome = future.result()
            tracker.finish_commit(job, outcome, now)
            if outcome.commits or outcome.rewritten is not None:
                self._kept(tracker.id)
            touched.append(tracker)

    def wait(self, deadline: float) -> bool:
        """Until every running job ended or ``deadline`` (monotonic) passed; True when none runs."""
        pending = list(self._running.values())
        if pending:
            wait_futures(pending, timeout=max(0.0, deadline - time.monotonic()))
        return all(f.done() for f in pending)

    def cancel(self) -> None:
        """The daemon stops: kill the git that running jobs are waiting for; later git never starts."""
        self.cancel_token.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
