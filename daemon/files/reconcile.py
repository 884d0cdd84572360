"""The periodic reconcile: every workspace's files against the records, repairing what the watcher missed.

Runs in the loop every ``watch.reconcile_interval_s`` (and at start, after a reload,
after a watcher restart): new workspaces are added, vanished ones dropped, each
tracker re-checks its files by checksum and each index is brought in step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone

from daemon.common.contracts import ReconcileInfo
from daemon.common.current import Current
from daemon.common.storage import StorageHealth, is_storage_error
from daemon.files.agents import Agents
from daemon.files.starting import CHECKING, INDEXING, StartProgress
from daemon.files.tracker import AgentTracker
from daemon.local.indexer import Indexer

log = logging.getLogger(__name__)


def iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds") if ts else None


class Reconciler:
    def __init__(
        self,
        current: Current,
        agents: Agents,
        indexer: Indexer,
        storage: StorageHealth,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        """``stopping``: true once the daemon is asked to stop (a long reconcile at start ends early)."""
        self.current = current
        self.agents = agents
        self.indexer = indexer
        self.storage = storage
        self.last: ReconcileInfo = {"time": None, "repaired": 0, "duration_ms": None}
        self.next_at = 0.0  # monotonic time of the next periodic reconcile
        #: Asked between files: a stop requested meanwhile ends the reconcile early.
        self.stopping = stopping
        #: ``heard(agent id, rel)``: an event named that file and it is not processed yet (the router's
        #: :meth:`~daemon.files.routing.Router.heard`, set once the router exists).  Such a file is brought
        #: up to date like the others, and is no repair: under load many are in their debounce.
        self.heard: Callable[[str, str], bool] = lambda agent_id, rel: False
        #: ``unheard(agent id, rels)``: repaired files no event had named; the router says which of them
        #: no event names within a grace either (those the watcher missed: :meth:`missed`).
        self.unheard: Callable[[str, list[str]], None] = lambda agent_id, rels: None

    def one(self, tracker: AgentTracker, progress: StartProgress | None = None, found: list[str] | None = None) -> int:
        """Reconcile one agent's files and index; how many files it repaired (changed, and no event named them).

        ``progress`` (at start only) counts each file checked, for status while the start runs;
        ``found`` gets the repaired files' paths."""
        if progress is not None:
            progress.begin(tracker.id, CHECKING)

        def repair(rel: str) -> bool:
            if self.heard(tracker.id, rel):
                return False
            if found is not None:
                found.append(rel)
            return True

        try:
            repaired = tracker.reconcile(
                on_file=progress.file_checked if progress is not None else None, stopping=self.stopping, repair=repair
            )
        except Exception as exc:
            if is_storage_error(exc):  # git init/archive on a full disk (the record reports itself)
                self.storage.failed("git", exc, subject=tracker.id, path=tracker.workspace)
            else:
                log.exception("%s: reconcile failed", tracker.id)
            return 0
        if progress is not None:
            progress.begin(tracker.id, INDEXING)
        try:
            self.storage.attempt(
                "index",
                lambda: self.indexer.open(tracker.agent, self.agents.desired(tracker)),
                subject=tracker.id,
                path=tracker.agent.index,
            )
        except Exception:
            log.exception("%s: index sync failed", tracker.id)
        return repaired

    def new_agents(self) -> int:
        """Add (and reconcile) the agents found since the last look, and only them: OpenClaw's roster
        changed. How many were added."""
        known = set(self.agents.trackers)
        added = [t for a in self.agents.discover() if a.id not in known and (t := self.agents.add(a)) is not None]
        for tracker in added:
            self.one(tracker)
        return len(added)

    def all(self, progress: StartProgress | None = None) -> None:
        """Every agent, after adding new workspaces and dropping vanished ones (``progress``: see :meth:`one`)."""
        started = time.monotonic()
        known = set(self.agents.trackers)
        for agent in self.agents.discover():
            if agent.id not in known:
                self.agents.add(agent)
        for agent_id in list(self.agents.trackers):
            why = self.agents.moved(agent_id)
            if why is not None:  # gone, or its path now reaches another directory (judged again when found)
                log.warning("%s: %s; no longer watching it", agent_id, why)
                self.agents.drop(agent_id)
                self.storage.forget(agent_id)
        found: dict[str, list[str]] = {}
        repaired = sum(
            self.one(t, progress, found.setdefault(t.id, [])) for t in self.agents.all() if not self.stopping()
        )
        if repaired and self.last["time"] is not None:  # not at start: there it finds what changed while down
            log.info("reconcile repaired %d changed file(s) no event had named yet", repaired)
            for agent_id, rels in found.items():
                if rels:
                    self.unheard(agent_id, rels)
        self.last = {
            "time": iso(time.time()),
            "repaired": repaired,
            "duration_ms": round((time.monotonic() - started) * 1000, 1),
        }
        self.next_at = time.monotonic() + self.current.config.watch.reconcile_interval_s

    def missed(self, keys: list[tuple[str, str]]) -> None:
        """Files a re-check repaired and no event named since: the watcher missed their change."""
        named = ", ".join(f"{agent_id}:{rel}" for agent_id, rel in sorted(keys)[:10])
        more = f" (+{len(keys) - 10} more)" if len(keys) > 10 else ""
        log.warning("the watcher missed %d file change(s), found by a re-check: %s%s", len(keys), named, more)
