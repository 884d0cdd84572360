"""The daemon: one loop that owns every workspace's record and repository.

Other threads never write: the watcher puts changed paths into an inbox; the
API reads a status snapshot, searches on read-only index connections of its own,
and hands anything that writes (reindex, repairs) to the loop; the embedding
worker writes only vectors, on its own connections.  Everything that touches git,
the records or the indexes' chunks happens in the main loop: one writer, no lock
juggling.  Signals
wake the loop through ``signal.set_wakeup_fd`` on the same socket the watcher
uses, so SIGTERM is handled within one loop turn even when the daemon is idle.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import selectors
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import apsw
import git

from daemon import __version__, skill
from daemon.api import ApiServer
from daemon.audit import audit_log
from daemon.broker import Broker, store_settings
from daemon.config import Config, load_config
from daemon.contracts import StatusDocument
from daemon.embedding import EmbedWorker, conversation_embedder, make_embedder
from daemon.errors import DaemonError
from daemon.index_files import IndexClaims, move_legacy_index
from daemon.indexer import SHARED_PREFIX, Indexer, desired_documents
from daemon.notify import Notifier
from daemon.storage import StorageHealth, is_storage_error, is_storage_message
from daemon.tokens import TokenStore
from daemon.tracker import AgentTracker, EditListener
from daemon.watcher import Watcher
from daemon.wiring import (  # noqa: F401 - the names stay importable from here
    DAEMON_HOLDER,
    OFFLINE_LOCK_WAIT_S,
    SNAPSHOT_FILE,
    acquire_state_lock,
    guard_from,
    limits_of,
    lock_holder,
    make_tracker,
    secure_state,
    settings_from,
)
from daemon.workspaces import Agent, is_memory_path, make_agent, spoke_id
from daemon.workspaces import discover as discover_agents
from layers import daily, safefs
from layers.conversation.store import ConversationStore
from layers.fsutil import atomic_write
from layers.ids import MAIN_AGENT
from layers.local.index import Filters, ForeignFile, Identity, IndexStale, LocalIndex
from layers.local.search import search as search_index
from layers.local.units import index_model_id
from layers.local.vectors import LocalEmbedder
from layers.yamlfile import YamlFileError

log = logging.getLogger(__name__)

STALE_EVENT_RECHECK_S = 1.0  # see MemoryDaemon._stale_event
BURST_PUBLISH_S = 0.5  # while files still settle, records and status are written at most this often
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


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds") if ts else None


# Writes the loop retries itself (the broker retries the queue and the store, the embedding worker its vectors).
LOOP_PLACES = ("records", "tokens", "index", "git")


class MemoryDaemon:
    def __init__(self, config: Config, notifier: Notifier | None = None) -> None:
        self.config = config
        self.notifier = notifier or Notifier()
        self.guard = guard_from(config)
        self.embedder = make_embedder(config)
        self.identity = Identity(embed_model=index_model_id(self.embedder.model_id) if self.embedder else "")
        self.storage = StorageHealth(on_change=self._request_publish)
        self.indexer = Indexer(
            self.identity,
            config.paths.workspace,
            desired=lambda agent: self._desired(self.trackers[agent.id]),
            on_pending=self._wake_embedder,
            storage=self.storage,
            guard=lambda: self.guard,
            withheld=lambda agent: self._withheld(agent.id),
            claims=IndexClaims(config.paths.state_dir),
        )
        self.embed_worker: EmbedWorker | None = None
        self.tokens = TokenStore(config.paths.state_dir)
        self.audit = audit_log(config)
        self.broker: Broker | None = None
        self.listeners: list[EditListener] = [self.indexer]
        self._calls: collections.deque[tuple[Callable[[], object], Future]] = collections.deque()
        self.trackers: dict[str, AgentTracker] = {}
        self.watcher: Watcher | None = None
        self.api: ApiServer | None = None
        self.started = time.time()
        self.last_reconcile: dict = {"time": None, "repaired": 0, "duration_ms": None}
        self._inbox: collections.deque[tuple[str, bool]] = collections.deque()
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        self._debounce: dict[tuple[str, str], float] = {}
        self._stop = False
        self._reload = False
        self._next_reconcile = 0.0
        self._next_ping = 0.0
        self._snapshot: dict = {}
        self._snapshot_lock = threading.Lock()
        self._lock_file = None
        self._status_line = ""
        self._publish_requested = False
        self._working = False  # the loop is processing settled files (the embedding worker gives way)
        self._unpublished = False  # records/status not yet written since the last change
        self._last_publish = 0.0
        self.config_error = ""  # why the last SIGHUP was refused, until one succeeds
        self.restart_needed: list[str] = []  # settings the last SIGHUP read but cannot apply while running
        self._l4_embedder = None  # L4's embedder when it is not L3's (vectors off)
        self._left_running: list[str] = []  # threads a stop could not wait for
        self._recheck_at: float | None = None  # an early reconcile, after an event under a name that is gone

    # ------------------------------------------------------------ intake (other threads)

    def on_change(self, path: str, is_directory: bool) -> None:
        """Called by the watcher thread: queue the path and wake the loop."""
        self._inbox.append((path, is_directory))
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"\0")

    def status(self) -> StatusDocument:
        """The latest snapshot, for the API thread."""
        with self._snapshot_lock:
            snap = dict(self._snapshot)
        if snap:
            snap["daemon"] = dict(snap["daemon"], uptime_s=round(time.time() - self.started, 1))
            snap["conversation"] = self._conversation_status()
            snap["storage"] = self.storage.snapshot()
        return snap

    def _conversation_status(self) -> dict:
        if self.broker is not None:
            return self.broker.status()
        return {"enabled": self.config.conversation.enabled, "backend": self.config.conversation.backend}

    def identify(self, token: str | None) -> str | None:
        """The agent (or "admin") a caller's token belongs to; None when it belongs to nobody."""
        return self.tokens.identify(token)

    # ------------------------------------------------------------ start-up

    def _acquire_state_lock(self, holder: str = DAEMON_HOLDER) -> None:
        wait = OFFLINE_LOCK_WAIT_S if holder == DAEMON_HOLDER else 0.0
        self._lock_file = acquire_state_lock(self.config.paths.state_dir, holder, wait_offline_s=wait)

    def _record_path(self, agent_id: str) -> Path:
        return self.config.paths.state_dir / "agents" / f"{agent_id}.json"

    def _move_legacy_index(self, agent: Agent) -> None:
        """An index of ours at the old default path (QMD's own file's place) moves to the new one, once."""
        old = self.config.paths.legacy_index_for(agent.id)
        if old is None:
            return
        try:
            move_legacy_index(old, agent.index, self.indexer.claims)
        except OSError as exc:
            log.warning("%s: could not move the index from the old default %s: %s", agent.id, old, exc)

    def _add_agent(self, agent: Agent) -> AgentTracker:
        self._move_legacy_index(agent)
        tracker = make_tracker(
            self.config, agent, self.guard, self._record_path(agent.id), self.listeners, self.audit.record, self.storage
        )
        try:
            self.storage.attempt("git", lambda: self._ensure_repo(tracker), subject=agent.id, path=agent.workspace)
        except (git.GitCommandError, daily.RepoRefusedError, OSError) as exc:
            log.error("%s: git repository unusable (commits retried, shown in status): %s", agent.id, exc)
        self._ensure_token(tracker)
        self._ensure_skill(agent)
        self.trackers[agent.id] = tracker
        log.info("watching agent %s at %s", agent.id, agent.workspace)
        return tracker

    def _ensure_repo(self, tracker: AgentTracker) -> None:
        if tracker.repo.ensure():
            log.info("%s: initialised missing git repository in %s", tracker.id, tracker.workspace)

    def _ensure_token(self, tracker: AgentTracker) -> None:
        """The agent's token; a full disk leaves it without one until a retry writes it,
        a symlink where it belongs leaves it without one for good (refused, shown)."""
        agent = tracker.agent

        def ensure() -> None:
            try:
                if self.tokens.ensure(agent.id, agent.workspace):
                    log.info("%s: issued an API token (%s)", agent.id, agent.workspace / ".memstrata" / "token")
            except safefs.UnsafePathError as exc:
                tracker.refuse(exc.rel, f"{exc.why}; no API token written")

        path = agent.workspace / ".memstrata" / "token"
        try:
            self.storage.attempt("tokens", ensure, subject=agent.id, path=path)
        except PermissionError as exc:
            # A workspace the daemon may not write (a unit without CAP_DAC_OVERRIDE, a read-only
            # bind): that agent goes without a token, shown in status and retried with the
            # storage back-off; every other agent carries on.
            if not self.storage.failing("tokens", agent.id):
                log.error("%s: cannot write its API token (%s); retrying", agent.id, exc)
            self.storage.failed("tokens", exc, subject=agent.id, path=path, quiet=True)

    def _ensure_skill(self, agent: Agent) -> None:
        """The memory skill in the workspace, refreshed when this checkout's copy changed (daemon/skill.py).

        Never fatal: a symlinked ``skills/`` is refused, a full disk leaves it for the next start.
        """
        try:
            changes = skill.sync_skill(agent.workspace, skill.Launcher.current(self.config.source, agent.id))
        except (OSError, ValueError) as exc:
            log.warning("%s: memory skill not installed in %s: %s", agent.id, agent.workspace, exc)
            return
        if changes:
            log.info("%s: memory skill installed (%s)", agent.id, "; ".join(changes))

    def _ensure_audit_dir(self) -> None:
        """audit_dir exists from the first start: the cron lines and the cleanup write into it."""
        try:
            self.audit.ensure_directory()
        except OSError as exc:  # a symlink planted there, a full disk: said, never fatal
            log.error("audit directory %s cannot be created: %s", self.audit.directory, exc)

    def _ensure_admin_token(self) -> None:
        self.storage.attempt("tokens", self.tokens.ensure_admin, path=self.tokens.admin_path)

    def _watch_roots(self) -> list[Path]:
        paths = self.config.paths
        roots = [paths.workspace]
        if paths.workspace not in paths.agents_dir.parents:
            roots.append(paths.agents_dir)
        return roots

    def start(self) -> None:
        paths = self.config.paths
        if not paths.workspace.is_dir():
            raise DaemonError(
                f"the main workspace {paths.workspace} does not exist: run `memstrata init --root DIR` "
                "or set paths.workspace in the configuration"
            )
        self._acquire_state_lock()
        paths.agents_dir.mkdir(parents=True, exist_ok=True)
        self._ensure_audit_dir()
        self._ensure_admin_token()
        for agent in discover_agents(self.config):
            self._add_agent(agent)
        if self.config.conversation.enabled:
            self.broker = self._make_broker()
            self.broker.start()
        self.api = ApiServer(paths.socket, self)
        self.api.start()
        self.watcher = Watcher(
            self._watch_roots(), self.on_change, self.config.watch.mode, self.config.watch.poll_interval_s
        )
        self.watcher.start()
        log.info("watcher: %s%s", self.watcher.mode, f" ({self.watcher.reason})" if self.watcher.reason else "")
        if self.embedder is not None:
            self.embed_worker = EmbedWorker(
                self.embedder,
                self.identity,
                self._index_paths,
                self.config.vectors.batch_size,
                on_change=self._request_publish,
                yield_to=self._has_fresh_edits,
                storage=self.storage,
            )
            self.embed_worker.start()
        self._reconcile_all()
        self._publish()
        self.notifier.ready(self._status_line)
        log.info("ready: %s", self._status_line)

    def _make_broker(self) -> Broker:
        embedder = conversation_embedder(self.config, self.embedder)
        self._l4_embedder = embedder
        try:
            dim = embedder.dimension()
            store = ConversationStore(store_settings(self.config), embedder, dim)
            return Broker(
                self.config,
                store,
                local_search=lambda agent, query, limit: self.search(agent, query, limit=limit),
                guard=lambda: self.guard,
                embedder_ready=embedder.not_ready,
                on_change=self._request_publish,
                storage=self.storage,
            )
        except (OSError, ValueError, YamlFileError) as exc:
            raise DaemonError(f"conversation memory (L4) cannot start: {exc}") from exc

    # ------------------------------------------------------------ the loop

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        old_fd = signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        try:
            self.start()
            selector = selectors.DefaultSelector()
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._stop:
                selector.select(self._timeout())
                self._drain_wake()
                if self._reload:
                    self._reload = False
                    self.reload()
                if self._stop:
                    break
                self._turn()
            self.shutdown()
            if self._left_running:  # `memstrata run` exits without the interpreter's teardown
                log.warning("exiting with %s still running", ", ".join(self._left_running))
            return 0
        finally:
            signal.set_wakeup_fd(old_fd)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.release()

    def _on_signal(self, signum: int, _frame) -> None:
        if signum == signal.SIGHUP:
            self._reload = True
        else:
            self._stop = True

    def _drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while self._wake_r.recv(4096):
                pass

    def _timeout(self) -> float:
        now = time.monotonic()
        deadlines = [self._next_reconcile]
        if self._recheck_at is not None:
            deadlines.append(self._recheck_at)
        if self._debounce:
            deadlines.append(min(self._debounce.values()))
        deadlines += [d for t in self.trackers.values() if (d := t.commit_deadline()) is not None]
        if (retry := self.indexer.retry_deadline()) is not None:
            deadlines.append(retry)
        if self._unpublished:
            deadlines.append(self._last_publish + BURST_PUBLISH_S)
        if self.notifier.watchdog_interval:
            deadlines.append(self._next_ping)
        if (retry := self.storage.next_retry(LOOP_PLACES)) is not None:
            deadlines.append(retry)
        return max(0.0, min(min(deadlines) - now, 30.0))

    def _turn(self) -> None:
        """One pass of the loop: intake, settled files, due commits, reconcile, watchdog."""
        now = time.monotonic()
        changed = self._run_calls()
        changed |= self._take_inbox(now)
        due = [key for key, deadline in self._debounce.items() if deadline <= now]
        self._working = bool(due)
        try:
            for key in due:
                del self._debounce[key]
                tracker = self.trackers.get(key[0])
                if tracker is not None:
                    changed |= tracker.process(key[1])
            changed |= self.indexer.flush(now) > 0  # every settled file of an agent in one transaction
        finally:
            self._working = False
        for tracker in list(self.trackers.values()):
            deadline = tracker.commit_deadline()
            if deadline is not None and deadline <= now:
                tracker.commit(now)
                self._note_commit(tracker)
                changed = True
                if self._inbox or self._debounce:
                    break  # fresh edits first: the other due commits follow in the next turns
        if now >= self._next_reconcile or (self._recheck_at is not None and now >= self._recheck_at):
            self._recheck_at = None
            self._reconcile_all()
            changed = True
        changed |= self.indexer.flush(now) > 0  # what calls, commits or reconcile queued
        if self.watcher and self.watcher.mode == "inotify" and not self.watcher.healthy():
            self._restart_watcher("an inotify watch failed")
            changed = True
        self._retry_storage(now)
        self._unpublished |= bool(due or changed or self._publish_requested)
        # In a burst every settle is a turn: writing every record and the status each
        # time cost more than indexing.  They wait (briefly) until the burst has settled.
        if self._unpublished and (not self._debounce or now >= self._last_publish + BURST_PUBLISH_S):
            self._unpublished = self._publish_requested = False
            self._last_publish = now
            for tracker in self.trackers.values():
                tracker.files.save()  # a full disk is noted in self.storage and retried below
            self._publish()
        if self.notifier.watchdog_interval and now >= self._next_ping:
            self.notifier.watchdog()
            self._next_ping = now + self.notifier.watchdog_interval

    def _note_commit(self, tracker: AgentTracker) -> None:
        """Mirror a commit failure that is a full or read-only disk into the storage report."""
        if tracker.last_error and is_storage_message(tracker.last_error):
            # the tracker logged it and retries with its own back-off
            self.storage.failed("git", tracker.last_error, subject=tracker.id, path=tracker.workspace, quiet=True)
        else:  # committed, or failing for another reason (the agent's own error says which)
            self.storage.succeeded("git", tracker.id)

    def _retry_storage(self, now: float) -> None:
        """Writes that a full disk refused, tried again when their back-off has passed."""
        for place, subject in self.storage.due(LOOP_PLACES, now):
            tracker = self.trackers.get(subject)
            if subject and tracker is None:
                self.storage.forget(subject)  # the agent went away
                continue
            if place == "records" and tracker is not None:
                tracker.files.save()
            elif place == "tokens" and tracker is not None:
                self._ensure_token(tracker)
            elif place == "tokens":
                self._ensure_admin_token()
            elif place == "index" and tracker is not None:
                self.storage.attempt(
                    "index",
                    lambda t=tracker: self.indexer.open(t.agent, self._desired(t)),
                    subject=subject,
                    path=tracker.agent.index,
                )
            elif place == "git" and tracker is not None and not tracker.pending:
                # a failed `git init` (a pending commit is retried by the tracker's own back-off)
                self._reconcile(tracker)
                if tracker.last_error is None and not tracker.pending:
                    self.storage.succeeded("git", subject)
            self.storage.postpone(place, subject, now)  # whatever did not clear waits for its back-off

    def call_in_loop(self, fn: Callable[[], object], timeout: float = 3600) -> object:
        """Run ``fn`` in the loop thread (the single writer) and return its result (API threads)."""
        future: Future = Future()
        self._calls.append((fn, future))
        self._wake()
        return future.result(timeout)

    def _run_calls(self) -> bool:
        ran = False
        while self._calls:
            fn, future = self._calls.popleft()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # handed to the caller
                    future.set_exception(exc)
            ran = True
        return ran

    def _take_inbox(self, now: float) -> bool:
        debounce = self.config.watch.debounce_ms / 1000
        changed = False
        while self._inbox:
            path, is_dir = self._inbox.popleft()
            located = self._locate(Path(path))
            if located is None:
                continue
            tracker, rel = located
            if not tracker.workspace.is_dir():
                log.warning("%s: workspace %s disappeared; no longer watching it", tracker.id, tracker.workspace)
                del self.trackers[tracker.id]
                self.indexer.forget(tracker.id)
                changed = True
                continue
            rels = tracker.paths_under(rel) if is_dir or rel == "" else {rel} if is_memory_path(rel) else set()
            for r in rels:
                self._debounce[(tracker.id, r)] = now + debounce
        return changed

    def _stale_event(self) -> None:
        """An event named a directory under agents_dir that no longer exists.

        A workspace is assembled under a temporary name and renamed into place; inotify
        can still report a file written just after the rename under the old name (the
        watch's path is updated later), and such an event cannot be placed.  A reconcile
        shortly after looks at every workspace's files, so that edit is not left for the
        periodic one.
        """
        if self._recheck_at is None:
            self._recheck_at = time.monotonic() + STALE_EVENT_RECHECK_S

    def _locate(self, path: Path) -> tuple[AgentTracker, str] | None:
        """Which agent a path belongs to (discovering new spoke workspaces on the way)."""
        paths = self.config.paths
        try:
            parts = path.relative_to(paths.agents_dir).parts
        except ValueError:
            parts = None
        if parts is not None:
            if not parts:
                return None
            agent_id = spoke_id(parts[0])
            if agent_id is None:
                if not os.path.lexists(paths.agents_dir / parts[0]):
                    log.debug("an event under a name that is gone, %s: reconciling shortly", path)
                    self._stale_event()
                return None
            tracker = self.trackers.get(agent_id)
            if tracker is None:
                agent = make_agent(self.config, agent_id)
                if not agent.workspace.is_dir() or agent.workspace.is_symlink():
                    return None
                tracker = self._add_agent(agent)
                self._reconcile(tracker)
                return None  # the reconcile covered every file of the new workspace
            return tracker, "/".join(parts[1:])
        try:
            rel = path.relative_to(paths.workspace).as_posix()
        except ValueError:
            return None
        tracker = self.trackers.get("main")
        if tracker is None:
            return None
        return tracker, "" if rel == "." else rel

    # ------------------------------------------------------------ reconcile, reload, stop

    def _reconcile(self, tracker: AgentTracker) -> int:
        try:
            repaired = tracker.reconcile()
        except Exception as exc:
            if is_storage_error(exc):  # git init/archive on a full disk (the record reports itself)
                self.storage.failed("git", exc, subject=tracker.id, path=tracker.workspace)
            else:
                log.exception("%s: reconcile failed", tracker.id)
            return 0
        try:
            self.storage.attempt(
                "index",
                lambda: self.indexer.open(tracker.agent, self._desired(tracker)),
                subject=tracker.id,
                path=tracker.agent.index,
            )
        except Exception:
            log.exception("%s: index sync failed", tracker.id)
        return repaired

    def _desired(self, tracker: AgentTracker) -> dict[str, str]:
        main = self.trackers.get(MAIN_AGENT)
        shared = {r: s for r, s in main.files.items().items() if r not in main.not_indexed} if main else {}
        return desired_documents(tracker.files.items(), shared, set(tracker.not_indexed))

    def _withheld(self, agent_id: str) -> set[str]:
        """Files an agent's index must not hold because they contain a secret (the shared core's too)."""
        tracker, main = self.trackers.get(agent_id), self.trackers.get(MAIN_AGENT)
        own = set(tracker.withheld) if tracker else set()
        return own | ({r for r in main.withheld if r.startswith(SHARED_PREFIX)} if main else set())

    def _index_paths(self) -> list[tuple[str, Path]]:
        return [(agent_id, t.agent.index) for agent_id, t in list(self.trackers.items())]

    def _request_publish(self) -> None:
        self._publish_requested = True
        self._wake()

    def _has_fresh_edits(self) -> bool:
        """True while edits wait for the loop or it is working on them (read by the embedding worker)."""
        return self._working or bool(self._inbox) or bool(self._debounce)

    def _wake_embedder(self) -> None:
        if self.embed_worker is not None:
            self.embed_worker.wake()

    def _reconcile_all(self) -> None:
        started = time.monotonic()
        known = set(self.trackers)
        for agent in discover_agents(self.config):
            if agent.id not in known:
                self._add_agent(agent)
        for agent_id in list(self.trackers):
            if not self.trackers[agent_id].workspace.is_dir():
                log.warning("%s: workspace disappeared; no longer watching it", agent_id)
                del self.trackers[agent_id]
                self.indexer.forget(agent_id)
                self.storage.forget(agent_id)
        repaired = sum(self._reconcile(t) for t in self.trackers.values())
        if repaired and self.last_reconcile["time"] is not None:
            log.info("reconcile repaired %d file(s) the watcher had missed", repaired)
        self.last_reconcile = {
            "time": _iso(time.time()),
            "repaired": repaired,
            "duration_ms": round((time.monotonic() - started) * 1000, 1),
        }
        self._next_reconcile = time.monotonic() + self.config.watch.reconcile_interval_s

    def _restart_watcher(self, why: str) -> None:
        log.warning("restarting the watcher: %s", why)
        assert self.watcher is not None
        self.watcher.stop()
        self.watcher = Watcher(
            self._watch_roots(), self.on_change, self.config.watch.mode, self.config.watch.poll_interval_s
        )
        self.watcher.start()
        self._reconcile_all()

    def reload(self) -> None:
        """SIGHUP: re-read the configuration; a bad file keeps the running one."""
        self.notifier.reloading()
        try:
            new = load_config(self.config.source)
        except Exception as exc:  # a bad file (or anything it makes the parser do) keeps the running one
            why = str(exc) if isinstance(exc, YamlFileError) else f"{self.config.source}: {exc!r}"
            log.error("reload failed, keeping the running configuration:\n%s", why)
            self.config_error = f"{why} (reload refused; the running configuration stays in force)"
            self._publish()
            self.notifier.ready(self._status_line)
            return
        restart: list[str] = []
        if new.paths != self.config.paths:
            restart.append("paths")
            new = replace(new, paths=self.config.paths)
        try:
            applied = self._reload_conversation(new, restart)
        except (OSError, ValueError) as exc:  # the new store settings cannot be read (an API key file)
            why = f"conversation: {exc}"
            log.error("reload failed, keeping the running configuration: %s", why)
            self.config_error = f"{why} (reload refused; the running configuration stays in force)"
            self._publish()
            self.notifier.ready(self._status_line)
            return
        self.config_error = ""
        watch_changed = (new.watch.mode, new.watch.poll_interval_s) != (
            self.config.watch.mode,
            self.config.watch.poll_interval_s,
        )
        self.config = new
        self.guard = guard_from(new)
        for tracker in self.trackers.values():
            tracker.guard = self.guard
            tracker.settings = settings_from(new)
            tracker.repo.stale_lock_s = new.git.stale_lock_s
        logging.getLogger().setLevel(new.log.level.upper())
        self._reload_vectors(new, restart)
        if watch_changed:
            self._restart_watcher("watch settings changed")
        self._reconcile_all()
        self.restart_needed = restart
        self._publish()
        done = f" (applied: {', '.join(applied)})" if applied else ""
        if restart:
            log.warning(
                "configuration read from %s%s; NOT applied until a restart: %s (running with the old values)",
                new.source,
                done,
                ", ".join(restart),
            )
        else:
            log.info("configuration reloaded from %s%s", new.source, done)
        self.notifier.ready(self._status_line)

    def _reload_conversation(self, new: Config, restart: list[str]) -> list[str]:
        """``conversation.*`` on SIGHUP: applied by the broker (reconnecting the store when it
        changed, queued writes kept), except ``enabled``, which needs a restart."""
        if new.conversation.enabled != self.config.conversation.enabled:
            restart.append("conversation.enabled")
            return []
        if self.broker is None:
            return []
        return self.broker.reconfigure(new)

    def _reload_vectors(self, new: Config, restart: list[str]) -> None:
        """Gate and idle settings apply at once; another model or backend needs a restart
        (every index records the model it was built with)."""
        fresh = make_embedder(new)
        if (index_model_id(fresh.model_id) if fresh else "") != self.identity.embed_model:
            restart.append("vectors.backend/model (indexes are then rebuilt)")
        if isinstance(self.embedder, LocalEmbedder):
            self.embedder.configure(min_free_mb=new.vectors.min_free_mb, idle_unload_s=new.vectors.idle_unload_s)
        if self.embed_worker is not None:
            self.embed_worker.batch_size = new.vectors.batch_size
            self.embed_worker.wake()

    def shutdown(self) -> None:
        """Stop within STOP_BUDGET_S: final commits first, then every worker within its share."""
        budget = StopBudget()
        self.notifier.stopping("stopping: final commits")
        log.info("stopping: finishing pending work")
        # what winds down by itself starts now, alongside the commits
        if self.broker is not None:
            self.broker.request_stop()  # first: an aborted embedding is then no store failure
        if self.embed_worker is not None:
            self.embed_worker.request_stop()  # aborts an encode in progress
        if isinstance(self._l4_embedder, LocalEmbedder):
            self._l4_embedder.abort()  # L4's own model when L3's vectors are off
        if self.watcher:
            self.watcher.stop()
        self._final_commits(budget.deadline("final commits"))
        if self.embed_worker is not None and not self.embed_worker.stop(budget.left("embedding worker")):
            self._left_running.append("the embedding worker")
        if self.broker is not None and not self.broker.stop(budget.left("conversation store")):
            self._left_running.append("a conversation store call")
        self.indexer.close()
        if self.api:
            self.api.stop(budget.left("indexes and API"))
        self._publish(running=False)
        snapshot = self.status()
        snapshot["daemon"]["stopped"] = _iso(time.time())
        try:
            atomic_write(self.config.paths.state_dir / SNAPSHOT_FILE, json.dumps(snapshot, ensure_ascii=False))
        except OSError as exc:
            log.warning("could not save the last status: %s", exc)
        log.info("stopped in %.1f s", time.monotonic() - budget.started)

    def _final_commits(self, deadline: float) -> None:
        """Settle debounced files and commit, retrying failures until ``deadline``."""
        self._take_inbox(time.monotonic())
        for agent_id, rel in list(self._debounce):
            tracker = self.trackers.get(agent_id)
            if tracker is not None:
                tracker.process(rel)
        self._debounce.clear()
        self.indexer.flush()  # a busy index is left queued: the next start's reconcile indexes it
        pending = [t for t in self.trackers.values() if t.pending]
        while pending and time.monotonic() < deadline:
            for tracker in pending:
                tracker.retry_at = None
                tracker.commit()
            pending = [t for t in pending if t.pending]
            if pending:
                time.sleep(max(0.0, min(0.2, deadline - time.monotonic())))
        for tracker in pending:
            log.error(
                "%s: left uncommitted at shutdown (%s); reconcile commits it at next start",
                tracker.id,
                tracker.last_error,
            )
        for tracker in self.trackers.values():
            tracker.files.save()

    def release(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    # ------------------------------------------------------------ status

    def _vectors_status(self) -> dict:
        if self.embedder is None:
            return {"backend": "off"}
        if self.embed_worker is None:
            return dict(self.embedder.status())
        return self.embed_worker.status()

    # ------------------------------------------------------------ requests from the API

    def search(
        self,
        agent_id: str,
        text: str,
        *,
        mode: str = "auto",
        limit: int = 10,
        filters: Filters | None = None,
        explain: bool = False,
    ) -> dict:
        """Search an agent's index from an API thread (its own read connection)."""
        tracker = self.trackers.get(agent_id)
        if tracker is None:
            raise LookupError(f"unknown agent {agent_id!r}")
        refused = self.indexer.refused(agent_id)
        if refused:
            raise RuntimeError(f"the index of {agent_id} is refused: {refused}")
        try:
            index = LocalIndex(tracker.agent.index, self.identity, readonly=True, verify=False)
        except ForeignFile as exc:
            raise RuntimeError(f"the index of {agent_id} is refused: {exc}") from None
        except (IndexStale, FileNotFoundError) as exc:
            self._request_repair(tracker, str(exc))
            raise RuntimeError(
                f"the index of {agent_id} is being rebuilt from markdown ({exc}); retry shortly"
            ) from None
        except (apsw.Error, OSError) as exc:
            if not is_storage_error(exc):
                raise
            raise RuntimeError(f"the index of {agent_id} cannot be opened: the disk is full ({exc})") from None
        embed = self.embedder.embed_query if self.embedder is not None else None
        try:
            with index:
                answer = search_index(
                    index,
                    text,
                    limit=limit,
                    mode=mode,
                    filters=filters,
                    embed_query=embed,
                    no_embedder_reason="vectors are off (vectors.backend: off)",
                    blocked_reason=self.embed_worker.waiting_reason if self.embed_worker else "",
                    explain=explain,
                )
        except (apsw.CorruptError, apsw.NotADBError) as exc:
            self._request_repair(tracker, f"the index file is damaged ({exc})")
            raise RuntimeError(f"the index of {agent_id} is damaged and being rebuilt ({exc}); retry shortly") from None
        return answer.to_dict()

    def _request_repair(self, tracker: AgentTracker, why: str) -> None:
        """From an API thread: have the loop (the index's single writer) rebuild it."""
        entry = self.indexer.agents.get(tracker.id)
        if entry is not None and entry.progress:
            return  # already rebuilding
        self._calls.append((lambda: self.indexer.repair(tracker.agent, why), Future()))
        self._wake()

    def offline_prepare(self) -> None:
        """Trackers without watching or serving, for `memstrata reindex` while the daemon is down.

        The state lock keeps a daemon from starting meanwhile; records stay in
        memory, so the next daemon start still sees (and commits) every change.
        """
        self._acquire_state_lock("memstrata reindex")
        for agent in discover_agents(self.config):
            self._move_legacy_index(agent)
            self.trackers[agent.id] = make_tracker(self.config, agent, self.guard, None, self.listeners)

    def reindex(self, agent_id: str | None, rebuild: bool = False) -> dict:
        """Full reindex (loop thread): the incremental code over every file, or a fresh rebuild."""
        chosen = [self.trackers[agent_id]] if agent_id else list(self.trackers.values())
        if MAIN_AGENT in self.trackers:
            self.trackers[MAIN_AGENT].refresh()  # the shared core every index holds
        out = {}
        for tracker in chosen:
            if tracker.id != MAIN_AGENT:  # main was refreshed just above
                tracker.refresh()
            desired = self._desired(tracker)
            if rebuild:
                with contextlib.suppress(ForeignFile):  # refused: reported below, the other agents go on
                    stats = self.indexer.rebuild(
                        tracker.agent, desired, reason="requested by memstrata reindex --rebuild"
                    )
                    out[tracker.id] = {"files": stats["files"], "chunks": stats["chunks"], "rebuilt": True}
            else:
                changed = self.indexer.open(tracker.agent, desired)
                out[tracker.id] = {"files": len(desired), "changed": changed, "rebuilt": False}
            refused = self.indexer.refused(tracker.id)
            if refused:
                out[tracker.id] = {"files": len(desired), "error": refused}
        self._publish()
        return out

    def _publish(self, running: bool = True) -> None:
        reports = []
        for tracker in self.trackers.values():
            report = tracker.report()
            report["index"] = self.indexer.report(tracker.id)
            reports.append(report)
        files = sum(r["files"] for r in reports)
        commits = [t.last_commit.time for t in self.trackers.values() if t.last_commit]
        line = f"{len(reports)} agent{'s' if len(reports) != 1 else ''}, {files} files"
        if commits:
            line += f", last commit {max(commits)[11:19]}"
        held = sum(len(r["held_back"]) for r in reports)
        if held:
            line += f", {held} held back"
        if self.watcher and self.watcher.mode == "polling":
            line += ", polling"
        if self.storage.next_retry() is not None:
            line += ", STORAGE FAILING"
        snapshot = {
            "daemon": {
                "running": running,
                "pid": os.getpid(),
                "version": __version__,
                "started": _iso(self.started),
                "config": str(self.config.source) if self.config.source else None,
                "socket": str(self.config.paths.socket),
                "state_dir": str(self.config.paths.state_dir),
                "summary": line,
                "config_error": self.config_error or None,
                "restart_needed": self.restart_needed or None,
            },
            "watcher": {
                "mode": self.watcher.mode if self.watcher else "stopped",
                "reason": self.watcher.reason if self.watcher else "",
                "roots": [str(r) for r in self._watch_roots()],
            },
            "reconcile": dict(self.last_reconcile, interval_s=self.config.watch.reconcile_interval_s),
            "limits": limits_of(self.config),
            "vectors": self._vectors_status(),
            "conversation": self._conversation_status(),
            "agents": reports,
            "storage": self.storage.snapshot(),
        }
        with self._snapshot_lock:
            self._snapshot = snapshot
        if line != self._status_line:
            self._status_line = line
            self.notifier.status(line)
