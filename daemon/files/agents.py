"""The agents the daemon watches: one tracker each, added when found, dropped when gone.

Nothing is written into a workspace (git, token, skill) before it is judged on where it
resolves, against the workspaces already watched (daemon/common/workspace_guard.py): that is
checked again here, the one door every agent passes, whoever found it (a reconcile, an event in
the agents directory). A refusal is logged once, audited once (``workspace_refused``) and listed
in the status (``daemon.workspaces_refused``); a watched workspace whose path later resolves to
another directory is no longer watched.

Also what each agent's index should hold (its own files plus the main agent's
shared core, minus what holds a secret), since that is read from the trackers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import git

from daemon.common.contracts import WorkspaceRefusal
from daemon.common.current import Current
from daemon.common.storage import StorageHealth
from daemon.common.workspace_guard import Resolved, WorkspaceRefusedError, resolve
from daemon.common.workspaces import Agent, exclude_nested_workspace, places_of, say_refused, survey
from daemon.files.provision import Provisioner
from daemon.files.tracker import AgentTracker, EditListener
from daemon.local.index_files import move_legacy_index
from daemon.local.indexer import SHARED_PREFIX, Indexer, desired_documents
from layers.common.ids import MAIN_AGENT
from layers.daily import workspace_repo as daily

log = logging.getLogger(__name__)


class Agents:
    def __init__(
        self,
        current: Current,
        make_tracker: Callable[..., AgentTracker],
        indexer: Indexer,
        listeners: list[EditListener],
        audit: Callable[..., None] | None,
        storage: StorageHealth,
        provision: Provisioner,
    ) -> None:
        self.current = current
        self._make_tracker = make_tracker  # daemon.service.memory_daemon.make_tracker (passed in: no import circle)
        self.indexer = indexer
        self.listeners = listeners
        self.audit = audit
        self.storage = storage
        self.provision = provision
        self.trackers: dict[str, AgentTracker] = {}
        #: What each watched workspace resolved to when it was added (device and inode).
        self.resolved: dict[str, Resolved] = {}
        #: The workspaces refused at the last look, by agent id (shown in status).
        self.refused: dict[str, WorkspaceRefusedError] = {}

    def get(self, agent_id: str) -> AgentTracker | None:
        return self.trackers.get(agent_id)

    def agent_of(self, agent_id: str) -> Agent | None:
        """The agent the daemon knows by that id (what a search of its index needs), or None."""
        tracker = self.trackers.get(agent_id)
        return tracker.agent if tracker is not None else None

    def all(self) -> list[AgentTracker]:
        return list(self.trackers.values())

    def discover(self) -> list[Agent]:
        """Every agent whose workspace exists now and may be used (daemon/common/workspaces.py ``survey``,
        the workspaces watched already keeping theirs); a refusal is audited once and shown in status."""
        found = survey(self.current.config, watched=self.resolved)
        refused = {r.agent_id: r for r in found.refused}
        for agent_id, refusal in refused.items():
            self._note_refused(refusal, self.refused.get(agent_id))
        self.refused = refused
        return found.agents

    def _note_refused(self, refusal: WorkspaceRefusedError, before: WorkspaceRefusedError | None) -> None:
        self.refused[refusal.agent_id] = refusal
        if (before is None or str(before) != str(refusal)) and self.audit is not None:
            self.audit("workspace_refused", agent=refusal.agent_id, path=str(refusal.path), reason=refusal.reason)

    def refusals(self) -> list[WorkspaceRefusal]:
        """The refused workspaces, for the status document (the administrator's view only)."""
        return [{"agent": r.agent_id, "path": str(r.path), "reason": r.reason} for _, r in sorted(self.refused.items())]

    def _judge(self, agent: Agent) -> Resolved | None:
        """Where ``agent``'s workspace resolves, when no watched workspace and no guarded place is in
        the way; None (refused: noted; or gone) otherwise."""
        places = places_of(self.current.config.paths)
        for other, where in self.resolved.items():
            if other != agent.id:
                places.take(other, where)
        try:
            return places.judge(agent.id, agent.workspace, follow_link=agent.id == MAIN_AGENT)
        except WorkspaceRefusedError as exc:
            say_refused(exc)
            self._note_refused(exc, self.refused.get(agent.id))
            return None

    def moved(self, agent_id: str) -> str | None:
        """Why a watched workspace can no longer be used (gone, or its path now reaches another
        directory: a parent swapped for a symlink), or None while it is where it was."""
        tracker = self.trackers[agent_id]
        path = tracker.workspace
        try:
            now = resolve(Path(os.path.realpath(path)) if agent_id == MAIN_AGENT else path)
        except ValueError as exc:
            return f"its path {path} {exc}"
        if now is None:
            return "workspace disappeared"
        before = self.resolved.get(agent_id)
        if before is not None and before.identity != now.identity:
            return f"its path {path} now reaches another directory ({now.real})"
        return None

    def record_path(self, agent_id: str) -> Path:
        return self.current.config.paths.state_dir / "agents" / f"{agent_id}.json"

    def move_legacy_index(self, agent: Agent) -> None:
        """An index of ours at the old default path (QMD's own file's place) moves to the new one, once."""
        old = self.current.config.paths.legacy_index_for(agent.id)
        if old is None:
            return
        try:
            move_legacy_index(old, agent.index, self.indexer.claims)
        except OSError as exc:
            log.warning("%s: could not move the index from the old default %s: %s", agent.id, old, exc)

    def add(self, agent: Agent) -> AgentTracker | None:
        """Start watching ``agent``: its tracker, repository, token and skill; None when its
        workspace is refused (or gone), and then nothing at all is written for it."""
        where = self._judge(agent)
        if where is None:
            return None
        self.refused.pop(agent.id, None)
        self.resolved[agent.id] = where
        self.move_legacy_index(agent)
        c = self.current
        tracker = self._make_tracker(
            c.config, agent, c.guard, self.record_path(agent.id), self.listeners, self.audit, self.storage
        )
        try:
            self.storage.attempt(
                "git", lambda: self.provision.ensure_repo(tracker), subject=agent.id, path=agent.workspace
            )
        except (git.GitCommandError, daily.RepoRefusedError, OSError) as exc:
            log.error("%s: git repository unusable (commits retried, shown in status): %s", agent.id, exc)
        self.provision.ensure_token(tracker)
        self.provision.ensure_skill(agent)
        self._exclude_from_main(agent, where)
        self.trackers[agent.id] = tracker
        log.info("watching agent %s at %s", agent.id, agent.workspace)
        return tracker

    def _exclude_from_main(self, agent: Agent, where: Resolved) -> None:
        """A workspace directly in main's (OpenClaw's ``<agents.defaults.workspace>/<id>``, allowed
        there by the guard) is left out of main's repository by name (``.git/info/exclude``)."""
        main, main_where = self.trackers.get(MAIN_AGENT), self.resolved.get(MAIN_AGENT)
        if agent.id == MAIN_AGENT or main is None or main_where is None or not (main.workspace / ".git").is_dir():
            return
        if where.ancestors[:1] == (main_where.identity,):
            exclude_nested_workspace(main.repo, where.real.name, agent.id)

    def add_offline(self, agent: Agent) -> AgentTracker:
        """A tracker whose processed-files record stays in memory (`memstrata reindex`, daemon down)."""
        self.move_legacy_index(agent)
        c = self.current
        tracker = self._make_tracker(c.config, agent, c.guard, None, self.listeners)
        self.trackers[agent.id] = tracker
        return tracker

    def drop(self, agent_id: str) -> None:
        """Stop watching an agent whose workspace went away (its index connection closes)."""
        del self.trackers[agent_id]
        self.resolved.pop(agent_id, None)
        self.indexer.forget(agent_id)

    def desired(self, tracker: AgentTracker) -> dict[str, str]:
        """What ``tracker``'s index should hold: rel path → checksum."""
        main = self.trackers.get(MAIN_AGENT)
        shared = {r: s for r, s in main.files.items().items() if r not in main.not_indexed} if main else {}
        return desired_documents(tracker.files.items(), shared, set(tracker.not_indexed))

    def desired_of(self, agent: Agent) -> dict[str, str]:
        """What ``agent``'s index should hold (the indexer asks, to rebuild an index after damage)."""
        return self.desired(self.trackers[agent.id])

    def withheld_of(self, agent: Agent) -> set[str]:
        """What ``agent``'s index must not hold (the indexer asks before it stores a file)."""
        return self.withheld(agent.id)

    def withheld(self, agent_id: str) -> set[str]:
        """Files an agent's index must not hold because they contain a secret (the shared core's too)."""
        tracker, main = self.trackers.get(agent_id), self.trackers.get(MAIN_AGENT)
        own = set(tracker.withheld) if tracker else set()
        return own | ({r for r in main.withheld if r.startswith(SHARED_PREFIX)} if main else set())

    def index_paths(self) -> list[tuple[str, Path]]:
        return [(agent_id, t.agent.index) for agent_id, t in list(self.trackers.items())]
