"""The agents the daemon watches: one tracker each, added when found, dropped when gone.

Also what each agent's index should hold (its own files plus the main agent's
shared core, minus what holds a secret), since that is read from the trackers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import git

from daemon.files.provision import Provisioner
from daemon.files.tracker import AgentTracker, EditListener
from daemon.local.index_files import move_legacy_index
from daemon.local.indexer import SHARED_PREFIX, Indexer, desired_documents
from daemon.shared.current import Current
from daemon.shared.storage import StorageHealth
from daemon.shared.workspaces import Agent
from daemon.shared.workspaces import discover as discover_agents
from layers import daily
from layers.ids import MAIN_AGENT

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

    def get(self, agent_id: str) -> AgentTracker | None:
        return self.trackers.get(agent_id)

    def agent_of(self, agent_id: str) -> Agent | None:
        """The agent the daemon knows by that id (what a search of its index needs), or None."""
        tracker = self.trackers.get(agent_id)
        return tracker.agent if tracker is not None else None

    def all(self) -> list[AgentTracker]:
        return list(self.trackers.values())

    def discover(self) -> list[Agent]:
        """Every agent whose workspace exists now (main and the spokes under agents_dir)."""
        return discover_agents(self.current.config)

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

    def add(self, agent: Agent) -> AgentTracker:
        """Start watching ``agent``: its tracker, repository, token and skill."""
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
        self.trackers[agent.id] = tracker
        log.info("watching agent %s at %s", agent.id, agent.workspace)
        return tracker

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
