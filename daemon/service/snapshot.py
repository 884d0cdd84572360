"""The status document the daemon publishes: assembled in the loop, read by API threads.

The loop builds it (:meth:`StatusBoard.publish`) after changes, at most every
BURST_PUBLISH_S while files still settle (see daemon/service/loop.py); API threads read
a copy (:meth:`StatusBoard.read`) with the parts that move on their own
(uptime, vectors, L4, storage) filled in fresh.  ``GET /v1/status`` asks the loop
for a new document first and waits for it a moment (:meth:`StatusBoard.read_fresh`),
so a commit the CLI made or a model the worker loaded shows at once; when the loop
is too busy to answer in time, the document says how old it is (``daemon.as_of``,
``daemon.age_s``).  The summary line goes to systemd's status.  The document's keys
are what ``memstrata status``, the skill and the MCP server read.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from daemon import __version__
from daemon.common.settings import limits_of
from daemon.files.reconcile import iso
from daemon.files.routing import watch_roots

#: How long ``GET /v1/status`` waits for the loop's fresh document before answering with the last one.
FRESH_WAIT_S = 1.0

if TYPE_CHECKING:
    from typing import Any

    from daemon.common.config import Config
    from daemon.common.contracts import AgentReport, ConversationStatus, IndexProgress, StatusDocument, SyncStatus
    from daemon.common.current import Current
    from daemon.common.storage import StorageHealth
    from daemon.files.agents import Agents
    from daemon.files.reconcile import Reconciler
    from daemon.files.starting import StartProgress
    from daemon.local.indexer import Indexer
    from daemon.service.notify import Notifier
    from daemon.service.started import Started
    from layers.local.models.vectors import Embedder


@dataclass
class ReloadOutcome:
    """What the last SIGHUP left for status to say (the status board reads it, the reloader writes it)."""

    config_error: str = ""  # why the last SIGHUP was refused, until one succeeds
    restart_needed: list[str] = field(default_factory=list)  # read by the last SIGHUP, applied only by a restart


class StatusBoard:
    def __init__(
        self,
        *,
        current: Current,
        started_at: float,
        agents: Agents,
        indexer: Indexer,
        storage: StorageHealth,
        reconciler: Reconciler,
        notifier: Notifier,
        embedder: Embedder | None,
        started: Started,
        reload_outcome: ReloadOutcome,
    ) -> None:
        self.current = current
        self.started_at = started_at  # time.time() of the daemon's start
        self.agents = agents
        self.indexer = indexer
        self.storage = storage
        self.reconciler = reconciler
        self.notifier = notifier
        self.embedder = embedder
        self.started = started  # the broker, the watcher and the embedding worker, once they run
        self.reload_outcome = reload_outcome
        self._snapshot: StatusDocument = {}
        self._lock = threading.Lock()
        self._published = threading.Condition(self._lock)  # notified at each publish
        self._generation = 0  # publishes so far
        self._published_at = 0.0  # time.time() of the latest
        self.line = ""  # the summary line systemd shows (STATUS=)
        #: Set while the daemon starts (daemon/files/starting.py): what status shows until the first publish.
        self.starting: StartProgress | None = None

    def read(self) -> StatusDocument:
        """The latest snapshot, for the API thread."""
        with self._lock:
            snap = self._snapshot.copy()
            published_at = self._published_at
        if not snap:
            return self.while_starting()
        now = time.time()
        snap["daemon"] = {
            **snap["daemon"],
            "uptime_s": round(now - self.started_at, 1),
            "as_of": iso(published_at),
            "age_s": round(max(0.0, now - published_at), 1),
        }
        snap["vectors"] = self.vectors()
        snap["conversation"] = self.conversation()
        snap["storage"] = self.storage.snapshot()
        if self.started.pusher is not None:
            snap["sync"] = self.sync()
        return snap

    def read_fresh(self, ask: Callable[[], None], wait_s: float = FRESH_WAIT_S) -> StatusDocument:
        """A snapshot built after this call: ``ask`` wakes the loop to publish, and this waits for
        it at most ``wait_s`` (a loop deep in a reconcile answers later; the older document says its age)."""
        with self._lock:
            if self._snapshot:
                seen = self._generation
                ask()
                self._published.wait_for(lambda: self._generation > seen, wait_s)
        return self.read()

    def while_starting(self) -> StatusDocument:
        """The document before the loop first built one: the daemon's own parts, and how far the
        start has got instead of the agents (their trackers are still being checked).  Read by
        API threads: only what they may read while the loop works (no tracker, no index connection)."""
        config = self.current.config
        progress = self.starting
        index: IndexProgress | None = None
        if progress is not None and progress.agent is not None:
            entry = self.indexer.agents.get(progress.agent)
            index = entry.progress.copy() if entry is not None and entry.progress else None
        starting = progress.report(index) if progress is not None else {"text": "starting"}
        return {
            "daemon": {
                "running": True,
                "pid": os.getpid(),
                "version": __version__,
                "started": iso(self.started_at),
                "uptime_s": round(time.time() - self.started_at, 1),
                "config": str(config.source) if config.source else None,
                "socket": str(config.paths.socket),
                "state_dir": str(config.paths.state_dir),
                "summary": starting["text"],
                "starting": starting,
            },
            **self._parts(config, "starting"),
            "storage": self.storage.snapshot(),
        }

    def conversation(self) -> ConversationStatus:
        if self.started.broker is not None:
            return self.started.broker.status()
        return {
            "enabled": self.current.config.conversation.enabled,
            "backend": self.current.config.conversation.backend,
        }

    def _parts(self, config: Config, no_watcher: str) -> StatusDocument:
        """What the starting and the full snapshot both report; ``no_watcher`` names the mode before one runs."""
        return {
            "watcher": {
                "mode": self.started.watcher.mode if self.started.watcher else no_watcher,
                "reason": self.started.watcher.reason if self.started.watcher else "",
                "roots": [str(r) for r in watch_roots(config, [t.workspace for t in self.agents.all()])],
            },
            "reconcile": {**self.reconciler.last, "interval_s": config.watch.reconcile_interval_s},
            "limits": limits_of(config),
            "vectors": self.vectors(),
            "conversation": self.conversation(),
            **({"sync": self.sync()} if self.started.pusher is not None else {}),
        }

    def sync(self) -> SyncStatus:
        """The pusher's section, the shared core's side of it inside (both there only with git.remote)."""
        assert self.started.pusher is not None
        sync = self.started.pusher.status()
        if self.started.shared_core is not None:
            sync["shared_core"] = self.started.shared_core.status()
        return sync

    def vectors(self) -> dict[str, Any]:
        if self.embedder is None:
            return {"backend": "off"}
        if self.started.embed_worker is None:
            return dict(self.embedder.status())
        return self.started.embed_worker.status()

    def publish(self, running: bool = True) -> None:
        """Build the document from every part's state now (loop thread)."""

        trackers = self.agents.all()
        reports: list[AgentReport] = []
        for tracker in trackers:
            report = tracker.report()
            report["index"] = self.indexer.report(tracker.id)
            reports.append(report)
        files = sum(r["files"] for r in reports)
        commits = [t.last_commit.time for t in trackers if t.last_commit]
        line = f"{len(reports)} agent{'s' if len(reports) != 1 else ''}, {files} files"
        if commits:
            line += f", last commit {max(commits)[11:19]}"
        held = sum(len(r["held_back"]) for r in reports)
        if held:
            line += f", {held} held back"
        if self.started.watcher and self.started.watcher.mode == "polling":
            line += ", polling"
        if self.storage.next_retry() is not None:
            line += ", STORAGE FAILING"
        config = self.current.config
        snapshot: StatusDocument = {
            "daemon": {
                "running": running,
                "pid": os.getpid(),
                "version": __version__,
                "started": iso(self.started_at),
                "config": str(config.source) if config.source else None,
                "socket": str(config.paths.socket),
                "state_dir": str(config.paths.state_dir),
                "summary": line,
                "config_error": self.reload_outcome.config_error or None,
                "restart_needed": self.reload_outcome.restart_needed or None,
                "workspaces_refused": self.agents.refusals() or None,
            },
            **self._parts(config, "stopped"),
            "agents": reports,
            "storage": self.storage.snapshot(),
        }
        with self._lock:
            self._snapshot = snapshot
            self._generation += 1
            self._published_at = time.time()
            self._published.notify_all()
        if line != self.line:
            self.line = line
            self.notifier.status(line)
