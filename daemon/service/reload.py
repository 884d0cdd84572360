"""SIGHUP: re-read the configuration and apply what can change while running.

A file that does not parse (or whose store settings cannot be read) keeps the
running configuration, said in the log and in status (``config_error``).
Otherwise each part gets its new settings through a method of its own (the
trackers, the embedder and its worker, the broker); what cannot change while
running (paths, conversation.enabled, the vectors model) is listed in status
(``restart_needed``) and runs on with the old values.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from daemon.common.config import Config, load_config
from daemon.common.settings import guard_from
from daemon.files.tracker import settings_from
from daemon.local.embedding import make_embedder
from layers.common.yamlfile import YamlFileError
from layers.local.models.vectors import LocalEmbedder
from layers.local.text.units import index_model_id

if TYPE_CHECKING:
    from daemon.common.current import Current
    from daemon.files.agents import Agents
    from daemon.files.reconcile import Reconciler
    from daemon.service.notify import Notifier
    from daemon.service.snapshot import ReloadOutcome, StatusBoard
    from daemon.service.started import Started
    from layers.local.models.vectors import Embedder
    from layers.local.storage.index import Identity

log = logging.getLogger(__name__)


class Reloader:
    def __init__(
        self,
        *,
        current: Current,
        notifier: Notifier,
        agents: Agents,
        reconciler: Reconciler,
        board: StatusBoard,
        outcome: ReloadOutcome,
        embedder: Embedder | None,
        identity: Identity,
        started: Started,
        restart_watcher: Callable[[str], None],
    ) -> None:
        self.current = current
        self.notifier = notifier
        self.agents = agents
        self.reconciler = reconciler
        self.board = board
        self.outcome = outcome
        self.embedder = embedder
        self.identity = identity
        self.started = started  # the broker and the embedding worker, once they run
        self.restart_watcher = restart_watcher

    @property
    def config_error(self) -> str:
        return self.outcome.config_error

    @property
    def restart_needed(self) -> list[str]:
        return self.outcome.restart_needed

    def reload(self) -> None:
        """SIGHUP: re-read the configuration; a bad file keeps the running one."""

        self.notifier.reloading()
        old = self.current.config
        try:
            new = load_config(old.source)
        except Exception as exc:  # a bad file (or anything it makes the parser do) keeps the running one
            why = str(exc) if isinstance(exc, YamlFileError) else f"{old.source}: {exc!r}"
            log.error("reload failed, keeping the running configuration:\n%s", why)
            self._refused(why)
            return
        restart: list[str] = []
        if new.paths != old.paths:
            restart.append("paths")
            new = replace(new, paths=old.paths)
        if new.metrics != old.metrics:
            restart.append("metrics")  # the port is bound once, at start
        if new.log.format != old.log.format:
            restart.append("log.format")
        sync_keys = ["remote", "remote_key_file", "remote_known_hosts_file", "remote_host_keys", "remote_timeout_s"]
        sync_keys += ["push_retry_max_s", "status_interval_s"]
        if new.fleet != old.fleet or any(getattr(new.git, k) != getattr(old.git, k) for k in sync_keys):
            restart.append("git.remote / fleet")  # the pusher is made once, at start
        try:
            applied = self._conversation(new, restart)
        except (OSError, ValueError) as exc:  # the new store settings cannot be read (an API key file)
            why = f"conversation: {exc}"
            log.error("reload failed, keeping the running configuration: %s", why)
            self._refused(why)
            return
        self.outcome.config_error = ""
        watch_changed = (new.watch.mode, new.watch.poll_interval_s) != (old.watch.mode, old.watch.poll_interval_s)
        self.current.config = new
        self.current.guard = guard_from(new)
        for tracker in self.agents.all():
            tracker.reconfigure(self.current.guard, settings_from(new), new.git.stale_lock_s)
        logging.getLogger().setLevel(new.log.level.upper())
        self._vectors(new, restart)
        if watch_changed:
            self.restart_watcher("watch settings changed")
        self.reconciler.all()
        self.outcome.restart_needed = restart
        self.board.publish()
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
        self.notifier.ready(self.board.line)

    def _refused(self, why: str) -> None:
        self.outcome.config_error = f"{why} (reload refused; the running configuration stays in force)"
        self.board.publish()
        self.notifier.ready(self.board.line)

    def _conversation(self, new: Config, restart: list[str]) -> list[str]:
        """``conversation.*`` on SIGHUP: applied by the broker (reconnecting the store when it
        changed, queued writes kept), except ``enabled`` and a backend to or from ``hub``, which need a restart."""
        if new.conversation.enabled != self.current.config.conversation.enabled:
            restart.append("conversation.enabled")
            return []
        if (new.conversation.backend == "hub") != (self.current.config.conversation.backend == "hub"):
            restart.append("conversation.backend (to or from the hub's)")  # another kind of broker: made at start
            return []
        if self.started.broker is None:
            return []
        return self.started.broker.reconfigure(new)

    def _vectors(self, new: Config, restart: list[str]) -> None:
        """Gate and idle settings apply at once; another model or backend needs a restart
        (every index records the model it was built with)."""
        fresh = make_embedder(new)
        if (index_model_id(fresh.model_id) if fresh else "") != self.identity.embed_model:
            restart.append("vectors.backend/model (indexes are then rebuilt)")
        if isinstance(self.embedder, LocalEmbedder):
            v = new.vectors
            self.embedder.configure(min_free_mb=v.min_free_mb, idle_unload_s=v.idle_unload_s, unload=v.unload)
            # the companion model follows through make_embedder(new) above (daemon/local/embedding.py)
        if self.started.embed_worker is not None:
            self.started.embed_worker.configure(new.vectors.batch_size)
