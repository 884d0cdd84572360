"""The store as consolidation uses it: raw payloads with their vectors, supersede, restore.

Consolidation compares payloads point by point (undo must give back exactly what was there), so
this face reads payloads as the engine holds them, not the caller's view (``memory_view``), and
reads the vectors the store was written with rather than embedding again: the cosines are then
the ones the store's own searches see.  Superseding and putting validity back go through the
store's own primitives (``supersede``, ``restore_fields``: layers/conversation/policy/validity.py).  It
works over the Edge shard and over a remote Qdrant collection alike.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from layers.conversation.adapters.store import ConversationStore, NewMemory, StoreRequestError, _translate_errors
from layers.conversation.consolidation.plan import Stored
from layers.conversation.policy import validity

T = TypeVar("T")


class StoreFace:
    """``ConsolidationStore`` and ``BatchStore`` (layers/conversation/consolidation/nightly.py) over one store.

    ``exclusive`` runs its function at once: in this process nothing else uses the store (the
    daemon wraps this face so that the whole function is one job on its store thread).
    """

    def __init__(self, store: ConversationStore) -> None:
        self.store = store

    # ------------------------------------------------------------ reads

    def count(self) -> int:
        return self.store.count()

    def scan_points(self, limit: int, cursor: str | None, agent: str | None) -> tuple[list[Stored], str | None]:
        filters = {"agent_id": agent} if agent else None
        store = self.store
        if store.settings.on_edge:
            shard = store._client_only()
            if shard is None:
                return [], None  # nothing was ever written
            with _translate_errors("consolidation scan"):
                hits, next_offset = shard.scroll(filters, limit=limit, offset=cursor, with_vector=True)
            return [Stored(h.id, h.payload, h.vector) for h in hits], next_offset
        from layers.conversation.policy.filters import to_qdrant

        client = store._client_only()
        with _translate_errors("consolidation scan"):
            if not client.collection_exists(store.settings.collection):
                return [], None
            points, offset = client.scroll(
                store.settings.collection,
                scroll_filter=to_qdrant(filters),
                limit=limit,
                offset=cursor or None,
                with_payload=True,
                with_vectors=True,
            )
        return [Stored(str(p.id), dict(p.payload or {}), _vector(p.vector)) for p in points], (
            str(offset) if offset else None
        )

    def payloads(self, ids: Sequence[str]) -> dict[str, dict]:
        if not ids:
            return {}
        store = self.store
        client = store._client_only()
        with _translate_errors("consolidation read"):
            if store.settings.on_edge:
                hits = client.retrieve(list(ids)) if client is not None else []
                return {h.id: dict(h.payload) for h in hits}
            points = client.retrieve(store.settings.collection, ids=list(ids), with_payload=True)
        return {str(p.id): dict(p.payload or {}) for p in points}

    # ------------------------------------------------------------ writes

    def supersede(self, old_ids: Sequence[str], by_id: str, at: str) -> None:
        """The store's one primitive for it: one engine update for all of ``old_ids`` (all or none)."""
        self.store.supersede(list(old_ids), by_id, at)

    def restore_validity(self, payloads: Mapping[str, Mapping]) -> None:
        """Each memory's lifecycle fields put back as in ``payloads`` (a field absent there is removed).

        Through the store's ``restore_fields``: only what a run changes (state, validity window) can
        be put back this way, never a memory's text, owner or place.
        """
        for memory_id, payload in payloads.items():
            fields = {name: payload.get(name) for name in validity.LIFECYCLE_FIELDS}
            if not self.store.restore_fields(memory_id, fields):
                raise StoreRequestError(f"consolidation undo: memory {memory_id} is gone")

    def add_memories(self, memories: Sequence[NewMemory]) -> list[str]:
        results = self.store.add_batch(list(memories))
        refused = [r for r in results if r.event == "REFUSED"]
        if refused:
            raise StoreRequestError(f"consolidation: a summary was refused: {refused[0].reason}")
        return [i for r in results for i in r.ids]

    def delete_ids(self, ids: Sequence[str]) -> None:
        self.store.delete_ids(list(ids))

    def exclusive(self, fn: Callable[[StoreFace], T]) -> T:
        """``fn`` at once, then the store flushed: the caller writes ``applied`` only once it is on disk."""
        try:
            result = fn(self)
        except BaseException:  # a batch cut off half-way is flushed too: the report's ``applying`` describes it
            with contextlib.suppress(Exception):
                self.store.flush()
            raise
        self.store.flush()
        return result


def _vector(value) -> list[float] | None:
    if isinstance(value, dict):  # named vectors: mem0's is the default one
        value = value.get("") or next(iter(value.values()), None)
    return list(value) if value is not None else None
