"""The daemon's embedded L4 shard opened straight from a test, while the daemon is stopped."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from layers.conversation.adapters.edge import EdgeCollection, stored_dim

COLLECTION = "mem0_v4_shared"


@contextmanager
def open_shard(root: Path, collection: str = COLLECTION):
    """The shard under ``root/state/conversation/edge`` (made by a daemon that has since stopped)."""
    path = Path(root) / "state" / "conversation" / "edge" / collection
    shard = EdgeCollection(path, stored_dim(path) or 0)
    try:
        yield shard
    finally:
        shard.close()


def all_points(root: Path, collection: str = COLLECTION) -> list[dict]:
    """Every stored point as ``{"id": ..., **payload}``."""
    with open_shard(root, collection) as shard:
        points, offset = [], None
        while True:
            page, offset = shard.scroll(limit=1000, offset=offset)
            points += [{"id": h.id, **h.payload} for h in page]
            if offset is None:
                return points
