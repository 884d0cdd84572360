"""Where a file event goes: from a path the watcher reported to (agent, file), debounced.

The watcher thread only queues paths (:meth:`Router.on_change`); the loop takes
them (:meth:`Router.take`), finds the agent each belongs to (discovering a new
spoke workspace on the way), expands a directory into its memory files, and
holds each file until it has been quiet for ``watch.debounce_ms``
(:meth:`Router.pop_due`).  The loop then hands it to that agent's tracker.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from daemon.common import openclaw
from daemon.common.config import Config
from daemon.common.current import Current
from daemon.common.workspaces import MAIN_OWN_DIRS, is_memory_path, make_agent, spoke_id
from daemon.files.agents import Agents
from daemon.files.tracker import AgentTracker
from layers.common.ids import MAIN_AGENT

log = logging.getLogger(__name__)

STALE_EVENT_RECHECK_S = 1.0  # see Router._stale_event
LOST_EVENTS_RECHECK_S = 1.0  # see Router.on_lost: the burst that overflowed inotify's queue may still run
# A change to a workspace's .git refs (or the .git itself) asks for a look at its history this long
# after the last such event: a reset, a gc or an `rm -rf .git` is a burst of them.
HISTORY_CHECK_DELAY_S = 1.0
# A file a re-check found changed while no event had named it is a miss of the watcher only if no
# event names it this long after: its event may still be on its way (the save ran during the re-check).
MISS_GRACE_S = 3.0

FileKey = tuple[str, str]  # (agent id, path relative to its workspace)


def watch_roots(config: Config, workspaces: Iterable[Path]) -> list[Path]:
    """The directories the watcher watches: the main workspace, agents_dir (unless inside it) and
    each watched ``workspaces`` outside both (an OpenClaw-layout one: daemon/common/openclaw.py),
    so only what was judged and added is ever watched."""
    paths = config.paths
    roots = [paths.workspace]
    if paths.workspace not in paths.agents_dir.parents:
        roots.append(paths.agents_dir)
    for workspace in sorted(workspaces):
        if not any(workspace == r or r in workspace.parents for r in roots):
            roots.append(workspace)
    return roots


def watch_dirs(config: Config, roots: Iterable[Path]) -> list[Path]:
    """Directories watched without their subdirectories: OpenClaw's state dir (``paths.root``), where
    ``openclaw.json`` and ``workspace-<id>`` directories appear (an agent ``openclaw agents add``
    makes is found at once, not at the next periodic reconcile); none when it does not exist or a
    root watches it already."""
    root = config.paths.root
    if not root.is_dir() or any(root == r or r in root.parents for r in roots):
        return []
    return [root]


def names_roster(config: Config, path: Path) -> bool:
    """A path whose change can change OpenClaw's roster: ``<root>/openclaw.json`` (written by a
    rename over it, so either end of a move) or a ``<root>/workspace-<id>`` directory."""
    return path.parent == config.paths.root and (
        path.name == openclaw.CONFIG_FILE or path.name.startswith(openclaw.WORKSPACE_PREFIX)
    )


def _may_be_nested(rel: str) -> bool:
    """A directory of the main workspace that may be another agent's (daemon/common/workspace_guard.py)."""
    return bool(rel) and "/" not in rel and not rel.startswith(".") and rel not in MAIN_OWN_DIRS


class Router:
    def __init__(
        self,
        current: Current,
        agents: Agents,
        reconcile: Callable[[AgentTracker], int],
        wake: Callable[[], None],
    ) -> None:
        self.current = current
        self.agents = agents
        self.reconcile = reconcile  # a new workspace is reconciled as a whole when it is found
        self.wake = wake
        self._inbox: collections.deque[tuple[str, bool]] = collections.deque()
        self._debounce: dict[FileKey, float] = {}
        self._history: dict[str, float] = {}  # agent id → when to check its history (a .git change)
        #: Settled files not yet processed, per agent, in the order they settled (dicts as ordered sets).
        self._ready: dict[str, dict[str, None]] = {}
        #: When each file settling (or settled, not yet processed) had its last event: what its change is
        #: dated by, so a burst the loop takes a minute to work through is quiet when the writing stopped.
        self.edited: dict[FileKey, float] = {}
        self.recheck_at: float | None = None  # an early reconcile, after an event under a name that is gone
        self._lost = False  # set by the watcher thread when inotify dropped events
        #: When to look for new agents: OpenClaw's roster changed (``openclaw.json``, a ``workspace-<id>``).
        self.roster_at: float | None = None
        #: Files a re-check found changed before any event named them → when they count as missed.
        self._unheard: dict[FileKey, float] = {}

    # ------------------------------------------------------------ the watcher thread

    def on_change(self, path: str, is_directory: bool) -> None:
        """Called by the watcher thread: queue the path and wake the loop."""
        self._inbox.append((path, is_directory))
        self.wake()

    def on_lost(self) -> None:
        """Called by the watcher thread when inotify dropped events: the loop reconciles every agent soon."""
        self._lost = True
        self.wake()

    # ------------------------------------------------------------ the loop

    @property
    def waiting(self) -> bool:
        """Events not yet taken, files not yet settled, or settled files not yet processed."""
        return bool(self._inbox) or bool(self._debounce) or bool(self._ready)

    @property
    def settling(self) -> bool:
        """Files still inside their debounce, or settled and waiting for the loop (a burst goes on)."""
        return bool(self._debounce) or bool(self._ready)

    def deadline(self) -> float | None:
        """When the loop must look again: the first file to settle, a history to check, an early reconcile."""
        if self._ready:
            return 0.0  # settled files wait: now
        settle, history = min(self._debounce.values(), default=None), min(self._history.values(), default=None)
        unheard = min(self._unheard.values(), default=None)
        deadlines = [d for d in (self.recheck_at, self.roster_at, settle, history, unheard) if d is not None]
        return min(deadlines) if deadlines else None

    def heard(self, agent_id: str, rel: str) -> bool:
        """Whether an event taken from the watcher names this file and the file is not processed yet (it
        settles, or waits its turn): a re-check that finds it changed found no miss of the watcher."""
        return (agent_id, rel) in self.edited

    def unheard(self, agent_id: str, rels: Iterable[str], now: float | None = None) -> None:
        """A re-check found these files changed and no event had named them: missed, unless an event
        names them within :data:`MISS_GRACE_S` (:meth:`missed_due`)."""
        at = (time.monotonic() if now is None else now) + MISS_GRACE_S
        for rel in rels:
            self._unheard[(agent_id, rel)] = at
        if self._unheard:
            self.wake()

    def missed_due(self, now: float) -> list[FileKey]:
        """Files a re-check found changed and no event named within the grace: the watcher missed them."""
        due = [key for key, at in self._unheard.items() if at <= now]
        for key in due:
            del self._unheard[key]
        return due

    def recheck_due(self, now: float) -> bool:
        """True (once) when the early reconcile asked for by a stale event is due."""
        if self.recheck_at is not None and now >= self.recheck_at:
            self.recheck_at = None
            return True
        return False

    def roster_due(self, now: float) -> bool:
        """True (once) when OpenClaw's roster changed and has been quiet for ``watch.debounce_ms``."""
        if self.roster_at is not None and now >= self.roster_at:
            self.roster_at = None
            return True
        return False

    def take(self, now: float, until: float | None = None) -> bool:
        """Move queued events into the debounce; True when an agent was dropped (its workspace is gone).

        ``until`` (monotonic): events left when it passes wait in the inbox for the next call, so a
        burst of 20,000 events never holds the loop (a SIGTERM, another agent's edit) for seconds.
        """
        debounce = self.current.config.watch.debounce_ms / 1000
        changed = False
        if self._lost:
            self._lost = False
            log.warning("inotify dropped events (its queue overflowed): every workspace is looked at again")
            self.recheck_at = min(self.recheck_at or float("inf"), now + LOST_EVENTS_RECHECK_S)
        while self._inbox:
            if until is not None and time.monotonic() >= until:
                self.wake()  # the rest at the next turn, at once
                break
            path, is_dir = self._inbox.popleft()
            if names_roster(self.current.config, Path(path)):
                self.roster_at = now + debounce  # OpenClaw writes the file by a rename: settled at once
                if Path(path).name == openclaw.CONFIG_FILE:
                    continue  # a workspace-<id> may be watched already: its own tracker hears of it too
            located = self.locate(Path(path))
            if located is None:
                continue
            tracker, rel = located
            if is_dir and tracker.id == MAIN_AGENT and _may_be_nested(rel):
                self.roster_at = now + debounce  # OpenClaw's <agents.defaults.workspace>/<id>, made after the file
            if rel == ".git" or rel.startswith(".git/"):
                self._history[tracker.id] = now + HISTORY_CHECK_DELAY_S
                continue
            if not tracker.workspace.is_dir():
                log.warning("%s: workspace %s disappeared; no longer watching it", tracker.id, tracker.workspace)
                self.agents.drop(tracker.id)
                changed = True
                continue
            rels = tracker.paths_under(rel) if is_dir or rel == "" else {rel} if is_memory_path(rel) else set()
            ready = self._ready.get(tracker.id)
            for r in rels:
                self._unheard.pop((tracker.id, r), None)  # the watcher did see it (late)
                self._debounce[(tracker.id, r)] = now + debounce
                self.edited[(tracker.id, r)] = now
                if ready is not None:
                    ready.pop(r, None)  # written again before it was processed: it settles again
            if ready is not None and not ready:
                del self._ready[tracker.id]  # an empty queue left behind ended the loop (ready() met it)
        return changed

    def settle(self, now: float) -> None:
        """Files quiet for long enough leave the debounce for their agent's queue of settled files."""
        due = [key for key, deadline in self._debounce.items() if deadline <= now]
        for key in due:
            del self._debounce[key]
            self._ready.setdefault(key[0], {})[key[1]] = None

    def ready(self) -> Iterator[FileKey]:
        """Settled files, one agent's next file after the other's: one agent's 20,000 files never queue
        another agent's single edit.  Each file leaves the queue as it is handed out; what the caller does
        not take waits for its next turn."""
        while self._ready:
            for agent_id in list(self._ready):
                queue = self._ready.get(agent_id)
                if not queue:  # emptied meanwhile (taken again, or every file dropped)
                    self._ready.pop(agent_id, None)
                    continue
                rel = next(iter(queue))
                del queue[rel]
                if not queue:
                    del self._ready[agent_id]
                yield agent_id, rel

    def pop_due(self, now: float) -> list[FileKey]:
        """Every settled file, taken from the queues at once (fairly ordered)."""
        self.settle(now)
        return list(self.ready())

    def history_due(self, now: float) -> list[str]:
        """Agents whose ``.git`` changed and settled: their history is looked at now."""
        due = [agent for agent, at in self._history.items() if at <= now]
        for agent in due:
            del self._history[agent]
        return due

    def history_later(self, agent_id: str, at: float) -> None:
        """Look at an agent's history at ``at`` instead (its commit is running)."""
        self._history[agent_id] = max(at, self._history.get(agent_id, at))

    def pop_all(self) -> list[FileKey]:
        """Every file still in the debounce (the final pass before a stop)."""
        keys = [key for agent_id, queue in self._ready.items() for key in ((agent_id, rel) for rel in queue)]
        keys += list(self._debounce)
        self._ready.clear()
        self._debounce.clear()
        self.edited.clear()
        return keys

    def _stale_event(self) -> None:
        """An event named a directory under agents_dir that no longer exists.

        A workspace is assembled under a temporary name and renamed into place; inotify
        can still report a file written just after the rename under the old name (the
        watch's path is updated later), and such an event cannot be placed.  A reconcile
        shortly after looks at every workspace's files, so that edit is not left for the
        periodic one.
        """
        if self.recheck_at is None:
            self.recheck_at = time.monotonic() + STALE_EVENT_RECHECK_S

    def locate(self, path: Path) -> tuple[AgentTracker, str] | None:
        """Which agent a path belongs to (discovering new spoke workspaces on the way)."""
        config = self.current.config
        paths = config.paths
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
            tracker = self.agents.get(agent_id)
            if tracker is None:
                agent = make_agent(config, agent_id)
                if not agent.workspace.is_dir() or agent.workspace.is_symlink():
                    return None
                added = self.agents.add(agent)  # judged there: a refused workspace is never watched
                if added is not None:
                    self.reconcile(added)
                return None  # the reconcile covered every file of the new workspace
            return tracker, "/".join(parts[1:])
        for tracker in self.agents.all():  # an OpenClaw-layout workspace outside both (watch_roots)
            if tracker.id != "main" and path.is_relative_to(tracker.workspace):
                rel = path.relative_to(tracker.workspace).as_posix()
                return tracker, "" if rel == "." else rel
        try:
            rel = path.relative_to(paths.workspace).as_posix()
        except ValueError:
            return None
        tracker = self.agents.get("main")
        if tracker is None:
            return None
        return tracker, "" if rel == "." else rel
