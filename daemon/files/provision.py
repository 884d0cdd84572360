"""What an agent's workspace (and the state directory) get from the daemon before it is watched.

A git repository, the agent's API token, the memory skill; the administrator's
token and the audit directory.  None of it is fatal: a full disk is noted in the
storage report and retried by the loop (daemon/service/storage_retry.py), a symlink where
a file of ours belongs is refused and shown in the agent's report.
"""

from __future__ import annotations

import logging

from daemon.common import skill
from daemon.common.audit import AuditLog
from daemon.common.current import Current
from daemon.common.storage import StorageHealth
from daemon.common.tokens import TokenOfAnotherAgentError, TokenStore
from daemon.common.workspaces import Agent, exclude_token_dir
from daemon.files.tracker import AgentTracker
from layers.common import safefs

log = logging.getLogger(__name__)


class Provisioner:
    def __init__(self, current: Current, tokens: TokenStore, audit: AuditLog, storage: StorageHealth) -> None:
        self.current = current
        self.tokens = tokens
        self.audit = audit
        self.storage = storage

    def ensure_repo(self, tracker: AgentTracker) -> None:
        if tracker.repo.ensure():
            log.info("%s: initialised missing git repository in %s", tracker.id, tracker.workspace)
        exclude_token_dir(tracker.repo, tracker.id)

    def ensure_token(self, tracker: AgentTracker) -> None:
        """The agent's token; a full disk leaves it without one until a retry writes it,
        a symlink where it belongs leaves it without one for good (refused, shown)."""
        agent = tracker.agent

        def ensure() -> None:
            try:
                if self.tokens.ensure(agent.id, agent.workspace):
                    log.info("%s: issued an API token (%s)", agent.id, agent.workspace / ".memstrata" / "token")
            except TokenOfAnotherAgentError as exc:
                tracker.refuse(exc.rel, f"{exc.why}; no API token written", event="token_refused")
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

    def ensure_skill(self, agent: Agent) -> None:
        """The memory skill in the workspace, refreshed when this checkout's copy changed (daemon/common/skill.py).

        Never fatal: a symlinked ``skills/`` is refused, a full disk leaves it for the next start.
        """
        try:
            changes = skill.sync_skill(agent.workspace, skill.Launcher.current(self.current.config.source, agent.id))
        except (OSError, ValueError) as exc:
            log.warning("%s: memory skill not installed in %s: %s", agent.id, agent.workspace, exc)
            return
        if changes:
            log.info("%s: memory skill installed (%s)", agent.id, "; ".join(changes))

    def ensure_audit_dir(self) -> None:
        """audit_dir exists from the first start: the cron lines and the cleanup write into it."""
        try:
            self.audit.ensure_directory()
        except OSError as exc:  # a symlink planted there, a full disk: said, never fatal
            log.error("audit directory %s cannot be created: %s", self.audit.directory, exc)

    def ensure_admin_token(self) -> None:
        self.storage.attempt("tokens", self.tokens.ensure_admin, path=self.tokens.admin_path)
