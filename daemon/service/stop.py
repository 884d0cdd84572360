"""SIGTERM: final commits first, then every worker within its share of the stop budget."""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING

from daemon.files.reconcile import iso
from daemon.shared.settings import SNAPSHOT_FILE
from layers.fsutil import atomic_write
from layers.local.vectors import LocalEmbedder

if TYPE_CHECKING:
    from daemon.service.memory_daemon import MemoryDaemon

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
    def __init__(self, daemon: MemoryDaemon) -> None:
        self.d = daemon
        self.left_running: list[str] = []  # threads a stop could not wait for

    def run(self) -> None:
        """Stop within STOP_BUDGET_S: final commits first, then every worker within its share."""

        d = self.d
        budget = StopBudget()
        d.notifier.stopping("stopping: final commits")
        log.info("stopping: finishing pending work")
        # what winds down by itself starts now, alongside the commits
        if d.broker is not None:
            d.broker.request_stop()  # first: an aborted embedding is then no store failure
        if d.embed_worker is not None:
            d.embed_worker.request_stop()  # aborts an encode in progress
        if isinstance(d.l4_embedder, LocalEmbedder):
            d.l4_embedder.abort()  # L4's own model when L3's vectors are off
        if d.watcher:
            d.watcher.stop()
        self.final_commits(budget.deadline("final commits"))
        if d.embed_worker is not None and not d.embed_worker.stop(budget.left("embedding worker")):
            self.left_running.append("the embedding worker")
        if d.broker is not None and not d.broker.stop(budget.left("conversation store")):
            self.left_running.append("a conversation store call")
        d.indexer.close()
        if d.api:
            d.api.stop(budget.left("indexes and API"))
        for audit in (d.audit, d.broker.audit if d.broker is not None else None):
            if audit is not None:
                audit.flush()  # the counts of refusals folded since their last line (no request comes now)
        d.board.publish(running=False)
        snapshot = d.board.read()
        snapshot["daemon"]["stopped"] = iso(time.time())
        try:
            atomic_write(d.config.paths.state_dir / SNAPSHOT_FILE, json.dumps(snapshot, ensure_ascii=False))
        except OSError as exc:
            log.warning("could not save the last status: %s", exc)
        log.info("stopped in %.1f s", time.monotonic() - budget.started)

    def final_commits(self, deadline: float) -> None:
        """Settle debounced files and commit, retrying failures until ``deadline``; then cut what still runs.

        Files are processed for at most half the time (the next start's reconcile
        processes those left: their records did not change); the commits run on
        the committer's workers, which the loop waits for, and at the deadline the
        git they wait for is killed.  What is left uncommitted is committed by the
        next start's reconcile: nothing a stop cuts is lost.
        """
        d = self.d
        started = time.monotonic()
        process_until = started + (deadline - started) / 2
        d.router.take(started, until=process_until)  # events not taken: the next start's reconcile
        settling = d.router.pop_all()
        for done, (agent_id, rel) in enumerate(settling):
            if time.monotonic() >= process_until:
                log.warning("stopping: %d changed file(s) left for the next start to process", len(settling) - done)
                break
            tracker = d.agents.get(agent_id)
            if tracker is not None:
                tracker.process(rel)
        d.indexer.flush()  # a busy index is left queued: the next start's reconcile indexes it
        while time.monotonic() < deadline:
            turn = time.monotonic()
            d.committer.collect()
            for tracker in d.agents.all():
                if tracker.pending and tracker.committing is None:
                    d.committer.start(tracker)  # now, whatever its back-off says
            if not d.committer.running:
                break
            d.committer.wait(min(deadline, turn + 0.2))
            time.sleep(max(0.0, min(deadline, turn + 0.2) - time.monotonic()))  # a commit failing at once: not a spin
        if d.committer.running:
            d.committer.cancel()  # the git they wait for is killed; each job ends at once
            d.committer.wait(time.monotonic() + 1.0)
        d.committer.collect()
        for tracker in d.agents.all():
            if tracker.pending:
                log.error(
                    "%s: left uncommitted at shutdown (%s); reconcile commits it at next start",
                    tracker.id,
                    tracker.last_error or "stopped while committing",
                )
        for tracker in d.agents.all():
            tracker.files.save()
