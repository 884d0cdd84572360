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
from dataclasses import replace
from typing import TYPE_CHECKING

from daemon.files.tracker import settings_from
from daemon.local.embedding import make_embedder
from daemon.shared.config import Config, load_config
from daemon.shared.settings import guard_from
from layers.local.units import index_model_id
from layers.local.vectors import LocalEmbedder
from layers.yamlfile import YamlFileError

if TYPE_CHECKING:
    from daemon.service.memory_daemon import MemoryDaemon

log = logging.getLogger(__name__)


class Reloader:
    def __init__(self, daemon: MemoryDaemon) -> None:
        self.d = daemon
        self.config_error = ""  # why the last SIGHUP was refused, until one succeeds
        self.restart_needed: list[str] = []  # settings the last SIGHUP read but cannot apply while running

    def reload(self) -> None:
        """SIGHUP: re-read the configuration; a bad file keeps the running one."""

        d = self.d
        d.notifier.reloading()
        old = d.config
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
        try:
            applied = self._conversation(new, restart)
        except (OSError, ValueError) as exc:  # the new store settings cannot be read (an API key file)
            why = f"conversation: {exc}"
            log.error("reload failed, keeping the running configuration: %s", why)
            self._refused(why)
            return
        self.config_error = ""
        watch_changed = (new.watch.mode, new.watch.poll_interval_s) != (old.watch.mode, old.watch.poll_interval_s)
        d.current.config = new
        d.current.guard = guard_from(new)
        for tracker in d.agents.all():
            tracker.reconfigure(d.current.guard, settings_from(new), new.git.stale_lock_s)
        logging.getLogger().setLevel(new.log.level.upper())
        self._vectors(new, restart)
        if watch_changed:
            d.restart_watcher("watch settings changed")
        d.reconciler.all()
        self.restart_needed = restart
        d.board.publish()
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
        d.notifier.ready(d.board.line)

    def _refused(self, why: str) -> None:
        self.config_error = f"{why} (reload refused; the running configuration stays in force)"
        self.d.board.publish()
        self.d.notifier.ready(self.d.board.line)

    def _conversation(self, new: Config, restart: list[str]) -> list[str]:
        """``conversation.*`` on SIGHUP: applied by the broker (reconnecting the store when it
        changed, queued writes kept), except ``enabled``, which needs a restart."""
        if new.conversation.enabled != self.d.config.conversation.enabled:
            restart.append("conversation.enabled")
            return []
        if self.d.broker is None:
            return []
        return self.d.broker.reconfigure(new)

    def _vectors(self, new: Config, restart: list[str]) -> None:
        """Gate and idle settings apply at once; another model or backend needs a restart
        (every index records the model it was built with)."""
        d = self.d
        fresh = make_embedder(new)
        if (index_model_id(fresh.model_id) if fresh else "") != d.identity.embed_model:
            restart.append("vectors.backend/model (indexes are then rebuilt)")
        if isinstance(d.embedder, LocalEmbedder):
            d.embedder.configure(min_free_mb=new.vectors.min_free_mb, idle_unload_s=new.vectors.idle_unload_s)
        if d.embed_worker is not None:
            d.embed_worker.configure(new.vectors.batch_size)
