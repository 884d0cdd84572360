"""Cleanup, backup and restore of the L4 store, wherever the store is opened.

The same functions run inside the daemon (the embedded store is single-process,
so while the daemon runs only it may open the store) and in the CLI (a remote
server, or the embedded store while the daemon is down).  The daemon passes a
store whose calls go through its store thread; the CLI passes the store itself.
"""

from __future__ import annotations

from pathlib import Path

from daemon.common.audit import audit_log
from daemon.common.config import Config
from daemon.common.domain_errors import InvalidRequestError
from daemon.common.settings import DEFAULT_KEEP, decay_rules
from layers.conversation.adapters.store import ConversationStore
from layers.conversation.lifecycle import backup as backups
from layers.conversation.lifecycle.cleanup import CleanupStore, Rules, Selection, run_cleanup
from protocol.operations import Cleanup

KEEP_REPLACED = 2  # stores a restore replaced, kept beside the store for an undo by hand (newest first)


def cleanup(config: Config, store: CleanupStore, o: Cleanup) -> dict:
    """Run the cleanup ``o`` (the API's operation, from the route or the CLI) and write its audit file
    (``memory-cleanup-YYYY-MM-DD.log``); the agent, visibility, project and type narrow what it scans."""
    if o.include_permanent and o.max_age_days is None:
        raise InvalidRequestError("--include-permanent needs --max-age-days (permanent memories have no age limit)")
    audit = audit_log(config, prefix="memory-cleanup")
    decay = decay_rules(config)
    rules = Rules(config.conversation.retention_days, o.max_age_days, bool(o.include_permanent), decay)
    selection = Selection(agent=o.agent, visibility=o.visibility, project=o.project, memory_type=o.memory_type)
    report = run_cleanup(store, rules, execute=o.execute, selection=selection, audit=audit.write)
    result = report.to_dict()
    result["audit_dir"] = str(config.paths.audit_dir)
    return result


def backup_dir(config: Config) -> Path:
    return config.paths.state_dir / "backups"


def backup(config: Config, store: ConversationStore, keep: int = DEFAULT_KEEP) -> dict:
    """Snapshot the store into the state directory and keep the newest ``keep``."""
    s = store.settings
    if s.backend == "embedded" and s.on_edge:
        # Edge makes no snapshots: the shard is flushed and copied, here on the store's thread (the
        # daemon runs backups as an admin call there) or in the only process that has it open
        shard = store._client_only()
        if shard is not None:
            shard.flush()
        path = backups.snapshot_embedded(s.data_dir, backup_dir(config), s.collection)
    elif s.backend == "embedded":
        if not (s.data_dir / "qdrant" / "meta.json").is_file():
            # a fresh root (a timer's backup at first boot may come before the daemon's start):
            # the store is created, as the daemon would, and its empty state backed up
            store._client_only()
        path = backups.snapshot_embedded(s.data_dir, backup_dir(config), s.collection, engine="qdrant-local")
    else:
        path = backups.snapshot_remote(
            store._client_only(), s.collection, backup_dir(config), s.url or "", s.api_key, s.timeout_s
        )
    removed = backups.prune(backup_dir(config), keep)
    return {
        "backup": str(path),
        "bytes": path.stat().st_size,
        "kept": [str(p) for p in backups.backups(backup_dir(config))],
        "removed": [str(p) for p in removed],
    }


def restore(store: ConversationStore, archive: Path) -> dict:
    """Put a backup back; the embedded store is closed for it and reopened after."""
    s = store.settings
    if not archive.is_file():
        raise backups.BackupNotFoundError(f"no backup at {archive}")
    if s.backend == "embedded":
        store.close()
        kept = backups.restore_embedded(archive, s.data_dir)
        removed = backups.prune_replaced(s.data_dir, KEEP_REPLACED)
        return {
            "restored": str(archive),
            "previous_store_kept_at": str(kept),
            "removed_previous_stores": [str(p) for p in removed],
        }
    backups.restore_remote(archive, s.collection, s.url or "", s.api_key, s.timeout_s)
    return {"restored": str(archive), "collection": s.collection}
