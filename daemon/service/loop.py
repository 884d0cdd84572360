"""The daemon's main loop: one thread that owns the records and the indexes' chunks, and starts commits.

Commits themselves run on the committer's workers (daemon/files/committer.py); the
loop starts them when due and applies what they did.

Signals wake it through ``signal.set_wakeup_fd`` on the same socket the watcher
and API threads use (:meth:`Loop.wake`), so SIGTERM is handled within one turn
even when the daemon is idle.  Each turn (:meth:`Loop.turn`): the jobs other
threads handed in, finished commits, the watcher's events and settled files
(within TURN_BUDGET_S, one agent's file after the other's), histories to check,
due commits, reconcile, the watcher's health, storage retries, the status, the
systemd watchdog.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import signal
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from daemon.common.jobs import Jobs
from daemon.service.early_signals import early_signals

if TYPE_CHECKING:
    from daemon.files.agents import Agents
    from daemon.files.committer import Committer
    from daemon.files.reconcile import Reconciler
    from daemon.files.routing import Router
    from daemon.files.tracker import AgentTracker
    from daemon.local.indexer import Indexer
    from daemon.service.notify import Notifier
    from daemon.service.snapshot import StatusBoard
    from daemon.service.started import Started
    from daemon.service.storage_retry import StorageRetry

log = logging.getLogger(__name__)


BURST_PUBLISH_S = 0.5  # while files still settle, records and status are written at most this often
# How long one turn takes events and processes settled files, at most: past it the rest wait for the
# next turn, so a burst of 20,000 files never holds SIGTERM, a reload or another agent's edit longer.
TURN_BUDGET_S = 0.5


class Wakeup:
    """A socket pair the loop sleeps on; any thread (or a signal) writes a byte to wake it.

    It also carries what other threads ask of the loop (a status to publish) and
    whether a stop was asked for, so the parts composed before the loop (the
    committer, the storage health, the reconciler) are handed this, not the loop.
    """

    def __init__(self) -> None:
        self.r, self.w = socket.socketpair()
        for s in (self.r, self.w):
            s.setblocking(False)
        self.publish_requested = False
        self.stop_requested = False  # SIGTERM or SIGINT arrived

    def request_publish(self) -> None:
        """From any thread: write the status at the next turn."""
        self.publish_requested = True
        self.wake()

    def stopping(self) -> bool:
        """SIGTERM or SIGINT arrived: long work in progress (a reconcile at start) ends early."""
        return self.stop_requested

    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            self.w.send(b"\0")

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while self.r.recv(4096):
                pass


class Loop:
    def __init__(
        self,
        wakeup: Wakeup,
        jobs: Jobs,
        *,
        router: Router,
        agents: Agents,
        indexer: Indexer,
        committer: Committer,
        reconciler: Reconciler,
        storage_retry: StorageRetry,
        notifier: Notifier,
        board: StatusBoard,
        started: Started,
        restart_watcher: Callable[[str], None],
    ) -> None:
        self.wakeup = wakeup
        self.jobs = jobs  # call_in_loop: work other threads hand to the single writer
        self.router = router
        self.agents = agents
        self.indexer = indexer
        self.committer = committer
        self.reconciler = reconciler
        self.storage_retry = storage_retry
        self.notifier = notifier
        self.board = board
        self.started = started  # the watcher, once it runs
        self.restart_watcher = restart_watcher
        self.working = False  # the loop is processing settled files (the embedding worker gives way)
        self._reload = False
        self._next_ping = 0.0
        self._unpublished = False  # records/status not yet written since the last change
        self._last_publish = 0.0

    def request_publish(self) -> None:
        """From any thread: write the status at the next turn."""
        self.wakeup.request_publish()

    @property
    def stopping(self) -> bool:
        """SIGTERM or SIGINT arrived: long work in progress (a reconcile at start) ends early."""
        return self.wakeup.stop_requested

    def has_fresh_edits(self) -> bool:
        """True while edits wait for the loop or it is working on them (read by the embedding worker)."""
        return self.working or self.router.waiting

    def run(self, start: Callable[[], None], reload: Callable[[], None], stop: Callable[[], None]) -> None:
        """``start()``, turns until SIGTERM/SIGINT (SIGHUP: ``reload()``), ``stop()``."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        old_fd = signal.set_wakeup_fd(self.wakeup.w.fileno(), warn_on_full_buffer=False)
        for signum in early_signals.take():  # arrived while the daemon was being built: applied now
            self._on_signal(signum, None)
        try:
            start()
            selector = selectors.DefaultSelector()
            selector.register(self.wakeup.r, selectors.EVENT_READ)
            while not self.wakeup.stop_requested:
                selector.select(self.timeout())
                self.wakeup.drain()
                if self._reload:
                    self._reload = False
                    reload()
                if self.wakeup.stop_requested:
                    break
                self.turn()
            stop()
        finally:
            signal.set_wakeup_fd(old_fd)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @staticmethod
    def _check_history(tracker: AgentTracker) -> bool:
        try:
            tracker.check_history()
        except Exception as exc:  # git refusing a broken repository: the next commit says why
            log.warning("%s: could not look at the history: %s", tracker.id, exc)
        return True

    def _rewatch(self) -> None:
        """Restart the watcher when what it should watch changed (an OpenClaw-layout workspace
        appeared outside the roots, or went; OpenClaw's state dir appeared)."""
        from daemon.files.routing import watch_dirs, watch_roots  # a module the loop otherwise only names in types

        watcher = self.started.watcher
        if watcher is None:
            return
        config = self.reconciler.current.config
        roots = watch_roots(config, [t.workspace for t in self.reconciler.agents.all()])
        if set(roots) != set(watcher.roots) or set(watch_dirs(config, roots)) != set(watcher.dirs):
            self.restart_watcher("the workspaces to watch changed")

    def _on_signal(self, signum: int, _frame) -> None:
        if signum == signal.SIGHUP:
            self._reload = True
        else:
            self.wakeup.stop_requested = True

    def timeout(self) -> float:
        now = time.monotonic()
        deadlines = [self.reconciler.next_at]
        if (routed := self.router.deadline()) is not None:
            deadlines.append(routed)
        deadlines += [t for tr in self.agents.all() if (t := tr.commit_deadline()) is not None]
        if (retry := self.indexer.retry_deadline()) is not None:
            deadlines.append(retry)
        if self._unpublished:
            deadlines.append(self._last_publish + BURST_PUBLISH_S)
        if self.notifier.watchdog_interval:
            deadlines.append(self._next_ping)
        if (retry := self.storage_retry.next_retry()) is not None:
            deadlines.append(retry)
        return max(0.0, min(min(deadlines) - now, 30.0))

    def turn(self) -> None:
        """One pass of the loop: intake, settled files, due commits, reconcile, watchdog."""
        now = time.monotonic()
        changed = self.jobs.run_pending()
        for committed in self.committer.collect(now):  # commits that ended on their workers
            self.storage_retry.note_commit(committed)
            changed = True
        changed |= self.router.take(now, until=now + TURN_BUDGET_S / 2)
        self.router.settle(now)
        due = False
        self.working = True
        try:
            for agent_id, rel in self.router.ready():  # one agent's file after the other's
                due = True
                tracker = self.agents.get(agent_id)
                edited = self.router.edited.pop((agent_id, rel), None)
                if tracker is not None:
                    with tracker.edited_at(edited):
                        changed |= tracker.process(rel)
                if time.monotonic() - now > TURN_BUDGET_S:
                    break  # the rest wait in their queues: due at the next turn
            changed |= self.indexer.flush(now) > 0  # every settled file of an agent in one transaction
        finally:
            self.working = False
        for agent_id in self.router.history_due(now):  # a .git changed: is the daemon's last commit still there?
            tracker = self.agents.get(agent_id)
            if tracker is not None and tracker.committing is not None:
                self.router.history_later(agent_id, now + 1.0)  # the commit looks for itself; then again
            elif tracker is not None:
                changed |= self._check_history(tracker)
        for tracker in self.agents.all():
            deadline = tracker.commit_deadline()
            if deadline is not None and deadline <= now and self.committer.start(tracker, now):
                changed = True  # git runs on a worker: the loop goes on
        if now >= self.reconciler.next_at or self.router.recheck_due(now):
            self.router.recheck_at = self.router.roster_at = None  # this reconcile covers the early ones
            changed |= self.router.take(now)  # every event reported so far: what it names is not a miss
            self.reconciler.all()
            changed = True
            self._rewatch()
        elif self.router.roster_due(now):  # openclaw.json changed: new agents now, not at the next reconcile
            changed |= self.reconciler.new_agents() > 0
            self._rewatch()
        if missed := self.router.missed_due(now):  # what a re-check found and no event named since
            self.reconciler.missed(missed)
        changed |= self.indexer.flush(now) > 0  # what calls, commits or reconcile queued
        if self.started.watcher and self.started.watcher.mode == "inotify" and not self.started.watcher.healthy():
            self.restart_watcher("an inotify watch failed")
            changed = True
        self.storage_retry.retry_due(now)
        self._unpublished |= bool(due or changed or self.wakeup.publish_requested)
        # In a burst every settle is a turn: writing every record and the status each
        # time cost more than indexing.  They wait (briefly) until the burst has settled.
        if self._unpublished and (not self.router.settling or now >= self._last_publish + BURST_PUBLISH_S):
            self._unpublished = self.wakeup.publish_requested = False
            self._last_publish = now
            for tracker in self.agents.all():
                tracker.files.save()  # a full disk is noted in the storage health and retried
            self.board.publish()
        if self.notifier.watchdog_interval and now >= self._next_ping:
            self.notifier.watchdog()
            self._next_ping = now + self.notifier.watchdog_interval
