"""The status document the daemon publishes: assembled in the loop, read by API threads.

The loop builds it (:meth:`StatusBoard.publish`) after changes, at most every
BURST_PUBLISH_S while files still settle (see daemon/service/loop.py); API threads read
a copy (:meth:`StatusBoard.read`) with the parts that move on their own
(uptime, L4, storage) filled in fresh.  The summary line goes to systemd's
status.  The document's keys are what ``memstrata status``, the skill and the
MCP server read.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING

from daemon import __version__
from daemon.files.reconcile import iso
from daemon.files.routing import watch_roots
from daemon.shared.settings import limits_of

if TYPE_CHECKING:
    from daemon.files.starting import StartProgress
    from daemon.service.memory_daemon import MemoryDaemon


class StatusBoard:
    def __init__(self, daemon: MemoryDaemon) -> None:
        self.d = daemon
        self._snapshot: dict = {}
        self._lock = threading.Lock()
        self.line = ""  # the summary line systemd shows (STATUS=)
        #: Set while the daemon starts (daemon/files/starting.py): what status shows until the first publish.
        self.starting: StartProgress | None = None

    def read(self) -> dict:
        """The latest snapshot, for the API thread."""
        with self._lock:
            snap = dict(self._snapshot)
        if not snap:
            return self.while_starting()
        snap["daemon"] = dict(snap["daemon"], uptime_s=round(time.time() - self.d.started, 1))
        snap["conversation"] = self.conversation()
        snap["storage"] = self.d.storage.snapshot()
        return snap

    def while_starting(self) -> dict:
        """The document before the loop first built one: the daemon's own parts, and how far the
        start has got instead of the agents (their trackers are still being checked).  Read by
        API threads: only what they may read while the loop works (no tracker, no index connection)."""
        d, config = self.d, self.d.config
        progress = self.starting
        index = None
        if progress is not None and progress.agent is not None:
            entry = d.indexer.agents.get(progress.agent)
            index = dict(entry.progress) if entry is not None and entry.progress else None
        starting = progress.report(index) if progress is not None else {"text": "starting"}
        return {
            "daemon": {
                "running": True,
                "pid": os.getpid(),
                "version": __version__,
                "started": iso(d.started),
                "uptime_s": round(time.time() - d.started, 1),
                "config": str(config.source) if config.source else None,
                "socket": str(config.paths.socket),
                "state_dir": str(config.paths.state_dir),
                "summary": starting["text"],
                "starting": starting,
            },
            **self._parts(config, "starting"),
            "storage": d.storage.snapshot(),
        }

    def conversation(self) -> dict:
        d = self.d
        if d.broker is not None:
            return d.broker.status()
        return {"enabled": d.config.conversation.enabled, "backend": d.config.conversation.backend}

    def _parts(self, config, no_watcher: str) -> dict:
        """What the starting and the full snapshot both report; ``no_watcher`` names the mode before one runs."""
        d = self.d
        return {
            "watcher": {
                "mode": d.watcher.mode if d.watcher else no_watcher,
                "reason": d.watcher.reason if d.watcher else "",
                "roots": [str(r) for r in watch_roots(config)],
            },
            "reconcile": dict(d.reconciler.last, interval_s=config.watch.reconcile_interval_s),
            "limits": limits_of(config),
            "vectors": self.vectors(),
            "conversation": self.conversation(),
        }

    def vectors(self) -> dict:
        d = self.d
        if d.embedder is None:
            return {"backend": "off"}
        if d.embed_worker is None:
            return dict(d.embedder.status())
        return d.embed_worker.status()

    def publish(self, running: bool = True) -> None:
        """Build the document from every part's state now (loop thread)."""

        d = self.d
        trackers = d.agents.all()
        reports = []
        for tracker in trackers:
            report = tracker.report()
            report["index"] = d.indexer.report(tracker.id)
            reports.append(report)
        files = sum(r["files"] for r in reports)
        commits = [t.last_commit.time for t in trackers if t.last_commit]
        line = f"{len(reports)} agent{'s' if len(reports) != 1 else ''}, {files} files"
        if commits:
            line += f", last commit {max(commits)[11:19]}"
        held = sum(len(r["held_back"]) for r in reports)
        if held:
            line += f", {held} held back"
        if d.watcher and d.watcher.mode == "polling":
            line += ", polling"
        if d.storage.next_retry() is not None:
            line += ", STORAGE FAILING"
        config = d.config
        snapshot = {
            "daemon": {
                "running": running,
                "pid": os.getpid(),
                "version": __version__,
                "started": iso(d.started),
                "config": str(config.source) if config.source else None,
                "socket": str(config.paths.socket),
                "state_dir": str(config.paths.state_dir),
                "summary": line,
                "config_error": d.reloader.config_error or None,
                "restart_needed": d.reloader.restart_needed or None,
            },
            **self._parts(config, "stopped"),
            "agents": reports,
            "storage": d.storage.snapshot(),
        }
        with self._lock:
            self._snapshot = snapshot
        if line != self.line:
            self.line = line
            d.notifier.status(line)
