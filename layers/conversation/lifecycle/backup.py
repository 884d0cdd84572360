"""Backups of the L4 store: daily snapshots, the newest N kept (Engram kept 7).

The embedded store is a Qdrant Edge shard directory per collection (``edge/``)
plus mem0's history database.  Edge cannot create snapshots, so the backup is a
copy of the shard's files: the caller flushes the shard first and holds writes
back while the copy is taken (the daemon runs it on its store thread), which
makes the copy one that loads as it was.  mem0's history (SQLite) is copied with
SQLite's online backup API.  The old engine's layout (qdrant-client's local
mode: a ``meta.json`` and one SQLite file per collection) is still backed up the
same way it always was.  The whole set becomes one ``.tar.gz`` that appears
under its final name only when complete.  A remote collection is snapshotted by
the server (Qdrant's snapshot API) and the snapshot downloaded next to them.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tarfile
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from layers.common.fsutil import fsync_dir, fsync_file, sync_tree

PREFIX = "conversation-"
REPLACED = "before-restore-"  # a store a restore replaced: ``edge.before-restore-<stamp>``


class NotABackupError(ValueError):
    """The file given to restore is not a backup memstrata can put back; the message says why."""


class BackupNotFoundError(FileNotFoundError):
    """No backup at the path given to restore, or no embedded store to back up; the message says which."""


def _copy_sqlite(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(f"file:{source}?mode=ro", uri=True) as src, sqlite3.connect(target) as dst:
        src.backup(dst)


def _stamp(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%S%fZ")


def _publish(staging: Path, dest_dir: Path, name: str) -> Path:
    """Pack ``staging`` into ``dest_dir/name`` atomically (a partial archive never has the final name)."""
    dest_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    final = dest_dir / name
    partial = dest_dir / f".{name}.partial"
    with tarfile.open(partial, "w:gz") as tar:
        for path in sorted(staging.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(staging)), recursive=False)
    partial.chmod(0o600)  # memories, private ones included
    fsync_file(partial)  # a backup answered is one a power cut leaves whole, under its final name
    partial.replace(final)
    fsync_dir(dest_dir)
    return final


def snapshot_embedded(data_dir: Path, dest_dir: Path, collection: str, engine: str = "edge") -> Path:
    """A consistent archive of the embedded store under ``data_dir`` (an Edge shard: flushed, writes held back)."""
    qdrant = data_dir / "qdrant"
    edge = data_dir / "edge"
    if engine != "edge" and not (qdrant / "meta.json").is_file():
        raise BackupNotFoundError(f"no embedded store at {qdrant} (nothing has been written yet)")
    with tempfile.TemporaryDirectory(dir=dest_dir.parent if dest_dir.parent.exists() else None) as tmp:
        staging = Path(tmp)
        if engine == "edge":
            (staging / "edge").mkdir()  # empty when nothing was ever stored: that state is backed up too
            if edge.is_dir():
                # dot-directories are an optimize's scratch (.optimize: a copy being rebuilt), not shards
                for shard in sorted(p for p in edge.iterdir() if p.is_dir() and not p.name.startswith(".")):
                    shutil.copytree(shard, staging / "edge" / shard.name, symlinks=True)
        else:
            (staging / "qdrant").mkdir()
            shutil.copy2(qdrant / "meta.json", staging / "qdrant" / "meta.json")
            for storage in sorted((qdrant / "collection").glob("*/storage.sqlite")):
                _copy_sqlite(storage, staging / "qdrant" / "collection" / storage.parent.name / "storage.sqlite")
        if (data_dir / "history.db").is_file():
            _copy_sqlite(data_dir / "history.db", staging / "history.db")
        manifest = {
            "kind": "embedded",
            "engine": engine,
            "collection": collection,
            "created": datetime.now(timezone.utc).isoformat(),
        }
        (staging / "manifest.json").write_text(json.dumps(manifest))
        return _publish(staging, dest_dir, f"{PREFIX}{_stamp()}.tar.gz")


def restore_embedded(archive: Path, data_dir: Path) -> Path:
    """Replace the embedded store with ``archive``; the store must be closed.

    The current files are kept beside it (``edge.before-restore-…``), so a
    restore can itself be undone by hand (:func:`prune_replaced` keeps the newest few).  When a
    rename fails the current files are put back: a failed restore changes nothing.

    Durable when it returns (issue 45): the extracted tree (the shards' files, mem0's history) is
    synced, files and directories, before it is renamed into place, and ``data_dir`` after the
    renames: a power cut after the answer finds the backup's store, never the new names over files
    the disk did not get (a shard that does not load, an empty ``history.db``).
    """
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tempfile.TemporaryDirectory(dir=data_dir) as tmp:
        try:
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(tmp, filter="data")  # no absolute paths, no links out of the directory
        except (tarfile.TarError, OSError) as exc:
            raise NotABackupError(f"{archive} is not a readable backup: {exc}") from None
        staged = Path(tmp)
        manifest = json.loads((staged / "manifest.json").read_text()) if (staged / "manifest.json").exists() else {}
        layout = "edge" if (staged / "edge").is_dir() else "qdrant"
        if manifest.get("kind") != "embedded" or not (
            (staged / "edge").is_dir() or (staged / "qdrant" / "meta.json").is_file()
        ):
            raise NotABackupError(f"{archive} is not a memstrata backup of an embedded store")
        sync_tree(staged)
        kept = data_dir / f"{layout}.{REPLACED}{_stamp()}"
        if (data_dir / layout).exists():
            (data_dir / layout).replace(kept)
        try:
            (staged / layout).replace(data_dir / layout)
        except OSError:
            if kept.exists():
                kept.replace(data_dir / layout)  # the store as it was: a failed restore changes nothing
            raise
        if (staged / "history.db").exists():
            for stale in ("history.db-wal", "history.db-shm"):  # the replaced database's, not this one's
                (data_dir / stale).unlink(missing_ok=True)
            (staged / "history.db").replace(data_dir / "history.db")
        fsync_dir(data_dir)  # the renames (and the side files' removal) on disk before the answer
    return kept


def prune_replaced(data_dir: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` stores that restores replaced; returns what was deleted.

    Each restore keeps the store it replaced (an undo by hand); kept for ever they fill the disk
    (one bench run's restores filled 1 GB), so only the newest few stay.
    """
    replaced = sorted(
        (p for p in data_dir.glob(f"*.{REPLACED}*") if p.is_dir()), key=lambda p: p.name.rsplit("-", 1)[-1]
    )
    doomed = replaced[: max(len(replaced) - keep, 0)]
    for path in doomed:
        shutil.rmtree(path)
    if doomed:
        fsync_dir(data_dir)
    return doomed


def snapshot_remote(client, collection: str, dest_dir: Path, url: str, api_key: str | None, timeout_s: float) -> Path:
    """Have the server snapshot ``collection`` and download it into ``dest_dir``."""
    import httpx

    description = client.create_snapshot(collection, wait=True)
    dest_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    final = dest_dir / f"{PREFIX}{_stamp()}.snapshot"
    partial = dest_dir / f".{final.name}.partial"
    headers = {"api-key": api_key} if api_key else {}
    source = f"{url.rstrip('/')}/collections/{collection}/snapshots/{description.name}"
    with httpx.stream("GET", source, headers=headers, timeout=max(timeout_s, 60)) as response:
        response.raise_for_status()
        with open(partial, "wb") as fh:
            for chunk in response.iter_bytes():
                fh.write(chunk)
    partial.chmod(0o600)
    partial.replace(final)
    client.delete_snapshot(collection, description.name)  # the copy lives here now, not on the server's disk
    return final


def restore_remote(archive: Path, collection: str, url: str, api_key: str | None, timeout_s: float) -> None:
    """Upload a snapshot to the server and recover ``collection`` from it."""
    import httpx

    headers = {"api-key": api_key} if api_key else {}
    target = f"{url.rstrip('/')}/collections/{collection}/snapshots/upload?priority=snapshot&wait=true"
    with open(archive, "rb") as fh:
        response = httpx.post(target, headers=headers, files={"snapshot": fh}, timeout=max(timeout_s, 300))
    response.raise_for_status()


def backups(dest_dir: Path) -> list[Path]:
    """Existing backups, newest first."""
    if not dest_dir.is_dir():
        return []
    return sorted((p for p in dest_dir.glob(f"{PREFIX}*") if not p.name.startswith(".")), reverse=True)


def prune(dest_dir: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` backups; returns what was deleted."""
    doomed = backups(dest_dir)[keep:]
    for path in doomed:
        path.unlink()
    return doomed
