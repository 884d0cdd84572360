"""A one-time import of the old embedded store (qdrant-client's local mode) into the Edge shard.

Before Edge, the embedded backend kept its points in ``<data_dir>/qdrant`` (qdrant-client's local
storage: a ``meta.json`` and a SQLite file of pickled points per collection).  At the first open on
Edge the collection is scrolled page by page, with vectors and payloads, and upserted into the shard
under the same ids; mem0's history database is shared by both and needs nothing.  The import is
verified by count (every old id present in the shard) and only then recorded in a marker file beside
the shard; the old directory is left where it is, for the operator to remove.  An import that is
interrupted (a kill, a full disk) left no marker, so the next open imports again from the start:
upserts by id make that harmless.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from layers.common.fsutil import atomic_write

log = logging.getLogger(__name__)

PAGE = 512


def marker_path(shard_dir: Path) -> Path:
    return shard_dir.parent / f"{shard_dir.name}.imported.json"


def pending(local_dir: Path, collection: str, shard_dir: Path) -> bool:
    """True when an old local-mode collection exists and has not been imported into ``shard_dir`` yet."""
    return (local_dir / "collection" / collection / "storage.sqlite").is_file() and not marker_path(shard_dir).is_file()


def import_local_mode(
    local_dir: Path,
    collection: str,
    shard,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Copy every point of ``collection`` from qdrant-client's local storage into ``shard`` (an EdgeCollection).

    Returns what was done; raises RuntimeError when the shard does not hold every old point afterwards.
    """
    from qdrant_client import QdrantClient

    started = time.monotonic()
    client = QdrantClient(path=str(local_dir))
    try:
        total = client.count(collection, exact=True).count
        copied, offset = 0, None
        ids: list[str] = []
        while True:
            points, offset = client.scroll(collection, limit=PAGE, offset=offset, with_payload=True, with_vectors=True)
            batch = []
            for p in points:
                vector = p.vector.get("") if isinstance(p.vector, dict) else p.vector
                if vector is None:
                    raise RuntimeError(f"point {p.id} in {local_dir} has no dense vector: cannot import it")
                batch.append((str(p.id), vector, p.payload or {}))
            shard.upsert(batch)
            ids.extend(b[0] for b in batch)
            copied += len(batch)
            if progress is not None:
                progress(copied, total)
            if offset is None:
                break
    finally:
        client.close()
    present = sum(len(shard.retrieve(ids[i : i + 1024], with_payload=False)) for i in range(0, len(ids), 1024))
    if present != total:
        raise RuntimeError(
            f"import from {local_dir} incomplete: {present} of {total} points in the shard "
            "(it is tried again at the next start)"
        )
    shard.flush()
    result = {
        "from": str(local_dir),
        "collection": collection,
        "points": total,
        "seconds": round(time.monotonic() - started, 1),
        "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    atomic_write(marker_path(shard.path), json.dumps(result), mode=0o600)
    return result
