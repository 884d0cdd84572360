"""SIGTERM: final commits first, then every worker within its share of the stop budget."""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING

from daemon.common.settings import SNAPSHOT_FILE
from daemon.files import recovery
from daemon.files.reconcile import iso
from layers.common.fsutil import atomic_write
from layers.local.models.vectors import LocalEmbedder

if TYPE_CHECKING:
    from daemon.common.audit import AuditLog
    from daemon.common.current import Current
    from daemon.files.agents import Agents
    from daemon.files.committer import Committer
    from daemon.files.routing import Router
    from daemon.local.indexer import Indexer
    from daemon.service.notify import Notifier
    from daemon.service.snapshot import StatusBoard
    from daemon.service.started import Started

log = logging.getLogger(__name__)

# SIGTERM to exit: the daemon's own promise.  systemd's TimeoutStopSec (systemd/memstrata.service)
# must exceed it by a margin (interpreter exit, a slow journal); tests/test_systemd.py checks both.
STOP_BUDGET_S = 8.0
# The budget's shares, in the order the steps run: each step must end by the sum of its own and the
# earlier shares, so time a step leaves unused goes to the later ones.  Final commits come first;
# whatever cannot finish is left for the next start (reconcile commits, vectors stay pending, the
# L4 queue replays exactly once).
STOP_SHARES_S: tuple[tuple[str, float], ...] = (
    ("final commits", 4.0),
    ("embedding worker", 1.0),  # the encode in progress is aborted, not waited for
    ("conversation store", 2.0),  # replay and cleanup end between items; the store closes
    ("indexes and API", 1.0),
)


class StopBudget:
    """STOP_BUDGET_S as the deadlines of the shutdown's steps (see STOP_SHARES_S)."""

    def __init__(self, shares: tuple[tuple[str, float], ...] = STOP_SHARES_S) -> None:
        self.started = time.monotonic()
        self._ends: dict[str, float] = {}
        end = self.started
        for step, share in shares:
            end += share
            self._ends[step] = end

    def deadline(self, step: str) -> float:
        return self._ends[step]

    def left(self, step: str) -> float:
        """Seconds until ``step`` must have ended (0 once it is late)."""
        return max(0.0, self._ends[step] - time.monotonic())


class Shutdown:
    def __init__(
        self,
        *,
        current: Current,
        notifier: Notifier,
        started: Started,
        router: Router,
        agents: Agents,
        committer: Committer,
        indexer: Indexer,
        audit: AuditLog,
        board: StatusBoard,
    ) -> None:
        self.current = current
        self.notifier = notifier
        self.started = started  # what runs: the broker, the watcher, the API, the embedding worker
        self.router = router
        self.agents = agents
        self.committer = committer
        self.indexer = indexer
        self.audit = audit
        self.board = board
        self.left_running: list[str] = []  # threads a stop could not wait for

    def run(self) -> None:
        """Stop within STOP_BUDGET_S: final commits first, then every worker within its share."""

        budget = StopBudget()
        self.notifier.stopping("stopping: final commits")
        log.info("stopping: finishing pending work")
        # what winds down by itself starts now, alongside the commits
        if self.started.broker is not None:
            self.started.broker.request_stop()  # first: an aborted embedding is then no store failure
        if self.started.embed_worker is not None:
            self.started.embed_worker.request_stop()  # aborts an encode in progress
        if isinstance(self.started.l4_embedder, LocalEmbedder):
            self.started.l4_embedder.abort()  # L4's own model when L3's vectors are off
        if self.started.watcher:
            self.started.watcher.stop()
        self.final_commits(budget.deadline("final commits"))
        pusher = self.started.pusher
        if pusher is not None and not pusher.stop(min(1.0, budget.left("embedding worker"))):
            self.left_running.append("a push to the remote")  # cut: what it did not deliver stays owed
        shared = self.started.shared_core
        if shared is not None and not shared.stop(min(1.0, budget.left("embedding worker"))):
            self.left_running.append("the shared core's fetch or push")  # cut: the last good copy stays
        worker = self.started.embed_worker
        if worker is not None and not worker.stop(budget.left("embedding worker")):
            self.left_running.append("the embedding worker")
        if self.started.broker is not None and not self.started.broker.stop(budget.left("conversation store")):
            self.left_running.append("a conversation store call")
        self.indexer.close()
        if self.started.mem0_api:
            self.started.mem0_api.stop(min(1.0, budget.left("indexes and API")))
        if self.started.peer_api:
            self.started.peer_api.stop(min(1.0, budget.left("indexes and API")))
        if self.started.api:
            self.started.api.stop(budget.left("indexes and API"))
        self.audit.flush()  # the counts of refusals folded since their last line (no request comes now)
        self.board.publish(running=False)
        snapshot = self.board.read()
        snapshot["daemon"]["stopped"] = iso(time.time())
        try:
            atomic_write(self.current.config.paths.state_dir / SNAPSHOT_FILE, json.dumps(snapshot, ensure_ascii=False))
        except OSError as exc:
            log.warning("could not save the last status: %s", exc)
        if not self.left_running:  # a clean stop: the next start skips the after-a-cut checks
            recovery.end_run(self.current.config.paths.state_dir)
        log.info("stopped in %.1f s", time.monotonic() - budget.started)

    def final_commits(self, deadline: float) -> None:
        """Settle debounced files and commit, retrying failures until ``deadline``; then cut what still runs.

        Files are processed for at most half the time (the next start's reconcile
        processes those left: their records did not change); the commits run on
        the committer's workers, which the loop waits for, and at the deadline the
        git they wait for is killed.  What is left uncommitted is committed by the
        next start's reconcile: nothing a stop cuts is lost.
        """
        started = time.monotonic()
        process_until = started + (deadline - started) / 2
        self.router.take(started, until=process_until)  # events not taken: the next start's reconcile
        settling = self.router.pop_all()
        for done, (agent_id, rel) in enumerate(settling):
            if time.monotonic() >= process_until:
                log.warning("stopping: %d changed file(s) left for the next start to process", len(settling) - done)
                break
            tracker = self.agents.get(agent_id)
            if tracker is not None:
                tracker.process(rel)
        self.indexer.flush()  # a busy index is left queued: the next start's reconcile indexes it
        while time.monotonic() < deadline:
            turn = time.monotonic()
            self.committer.collect()
            for tracker in self.agents.all():
                if tracker.pending and tracker.committing is None:
                    self.committer.start(tracker)  # now, whatever its back-off says
            if not self.committer.running:
                break
            self.committer.wait(min(deadline, turn + 0.2))
            time.sleep(max(0.0, min(deadline, turn + 0.2) - time.monotonic()))  # a commit failing at once: not a spin
        if self.committer.running:
            self.committer.cancel()  # the git they wait for is killed; each job ends at once
            self.committer.wait(time.monotonic() + 1.0)
        self.committer.collect()
        for tracker in self.agents.all():
            if tracker.pending:
                log.error(
                    "%s: left uncommitted at shutdown (%s); reconcile commits it at next start",
                    tracker.id,
                    tracker.last_error or "stopped while committing",
                )
        for tracker in self.agents.all():
            tracker.files.save()
